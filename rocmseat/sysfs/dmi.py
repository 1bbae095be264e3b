"""The host's DMI identity (`class/dmi/id/sys_vendor`, `product_name`:
drivers/firmware/dmi-id.c), read to tell a virtual
machine: a hypervisor names itself there (QEMU, VMware, Microsoft Hyper-V, Xen, KVM,
VirtualBox), and then the PCIe hierarchy a guest sees is emulated, not the slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocmseat.sysfs.attrs import read_text

# (word in sys_vendor or product_name, the hypervisor it names); matched case-insensitively
_HYPERVISORS = (
    ("qemu", "QEMU"),
    ("vmware", "VMware"),
    ("microsoft corporation", "Microsoft Hyper-V"),
    ("virtual machine", "a virtual machine"),
    ("xen", "Xen"),
    ("kvm", "KVM"),
    ("virtualbox", "VirtualBox"),
    ("innotek", "VirtualBox"),
    ("amazon ec2", "Amazon EC2"),
    ("google compute engine", "Google Compute Engine"),
    ("openstack", "OpenStack"),
)


@dataclass(frozen=True, slots=True)
class DmiIdentity:
    """The DMI strings that name the machine (class/dmi/id sys_vendor, product_name)."""

    sys_vendor: str | None
    product_name: str | None

    @property
    def hypervisor(self) -> str | None:
        """The hypervisor the DMI strings name, or None (bare metal, or no DMI)."""
        text = f"{self.sys_vendor or ''} {self.product_name or ''}".lower()
        if "microsoft corporation" in text and "virtual machine" not in text:
            return None  # a Surface laptop, not Hyper-V
        return next((name for word, name in _HYPERVISORS if word in text), None)


def read_dmi(sysfs_root: Path) -> DmiIdentity:
    base = sysfs_root / "class" / "dmi" / "id"
    return DmiIdentity(read_text(base / "sys_vendor")[0] or None,
                       read_text(base / "product_name")[0] or None)
