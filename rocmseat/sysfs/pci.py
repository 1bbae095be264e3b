"""PCI devices under a sysfs root: ids, link state, NUMA affinity, the chain of parents.

Files (Documentation/ABI/testing/sysfs-bus-pci, drivers/pci/pci-sysfs.c): `vendor`, `device`,
`class` (0x-hex), `current_link_speed`/`max_link_speed` ("8.0 GT/s PCIe", older "8 GT/s",
"Unknown"), `current_link_width`/`max_link_width` (lanes), `numa_node` (-1 = unknown),
`local_cpulist`. Link files exist only on PCIe functions; absent values are None.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocmseat.sysfs.attrs import Collector, read_parsed
from rocmseat.sysfs.parse import (
    is_pci_address,
    parse_cpulist,
    parse_hex_id,
    parse_link_speed,
    parse_link_width,
    parse_numa_node,
)

VENDOR_AMD_ATI = 0x1002  # PCI_VENDOR_ID_ATI: the GPU and its internal switch ports


@dataclass(frozen=True, slots=True)
class LinkState:
    """One function's view of its PCIe link. Speeds in GT/s, widths in lanes."""

    current_speed_gts: float | None
    current_width: int | None
    max_speed_gts: float | None
    max_width: int | None

    @property
    def present(self) -> bool:
        values = (self.current_speed_gts, self.current_width, self.max_speed_gts, self.max_width)
        return any(v is not None for v in values)


@dataclass(frozen=True, slots=True)
class PciDevice:
    address: str
    path: Path  # the real directory (symlinks resolved)
    vendor_id: int | None
    device_id: int | None
    class_code: int | None
    link: LinkState
    numa_node: int | None  # None for -1 (unknown) or absent
    numa_node_raw: int | None  # -1 kept, so "unknown" and "absent" stay apart
    local_cpulist: str | None
    local_cpus: tuple[int, ...] | None
    errors: tuple[str, ...] = ()

    @property
    def is_amd(self) -> bool:
        return self.vendor_id == VENDOR_AMD_ATI


def read_pci_device(path: Path) -> PciDevice:
    """Read one PCI function directory (already resolved). Never raises on a bad file."""
    attrs = Collector(path)
    get = attrs.get
    link = LinkState(
        current_speed_gts=get("current_link_speed", parse_link_speed),
        current_width=get("current_link_width", parse_link_width),
        max_speed_gts=get("max_link_speed", parse_link_speed),
        max_width=get("max_link_width", parse_link_width),
    )
    raw_numa, numa_error = read_parsed(path / "numa_node", _parse_numa_raw)
    if numa_error:
        attrs.errors.append(numa_error)
    cpus = get("local_cpulist", parse_cpulist)
    return PciDevice(
        address=path.name,
        path=path,
        vendor_id=get("vendor", parse_hex_id),
        device_id=get("device", parse_hex_id),
        class_code=get("class", parse_hex_id),
        link=link,
        numa_node=None if raw_numa is None or raw_numa < 0 else raw_numa,
        numa_node_raw=raw_numa,
        local_cpulist=_cpulist_text(cpus),
        local_cpus=cpus,
        errors=tuple(attrs.errors),
    )


def _parse_numa_raw(text: str, source: str) -> int:
    node = parse_numa_node(text, source)
    return -1 if node is None else node


def _cpulist_text(cpus: tuple[int, ...] | None) -> str | None:
    if cpus is None:
        return None
    ranges: list[str] = []
    start = prev = None
    for cpu in cpus:
        if start is None:
            start = prev = cpu
        elif prev is not None and cpu == prev + 1:
            prev = cpu
        else:
            ranges.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = cpu
    if start is not None:
        ranges.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(ranges)


def parent_chain(device_dir: Path) -> tuple[Path, ...]:
    """The PCI functions above `device_dir`, nearest first, up to the root port.

    PCI directories nest under their bridges in /sys/devices (pci0000:80/0000:80:03.0/...), so
    the chain is the run of parent directories named like a PCI address; the host bridge
    directory (pci0000:80) ends it.
    """
    chain = []
    parent = device_dir.parent
    while is_pci_address(parent.name):
        chain.append(parent)
        parent = parent.parent
    return tuple(chain)
