"""Read a node's GPU inventory from a sysfs root (the tested source of truth, live or fixture).

Per GPU: the PCIe path endpoint -> AMD internal switch ports -> platform bridges -> root port,
each hop with its link and AER counters; the NUMA node and the socket (package id of the GPU's
local CPUs, falling back to `local_cpulist` when `numa_node` is -1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocmseat.sysfs.aer import AerReading, read_aer
from rocmseat.sysfs.amdgpu import AmdgpuReading, read_amdgpu
from rocmseat.sysfs.attrs import errors_of
from rocmseat.sysfs.dmi import read_dmi
from rocmseat.sysfs.drm import Card, list_cards
from rocmseat.sysfs.kfd import read_kfd_topology
from rocmseat.sysfs.module_params import NO_PARAMS, DriverParams, read_driver_params
from rocmseat.sysfs.numa import CpuTopology, NumaNode, read_cpu_topology, read_numa_nodes
from rocmseat.sysfs.pci import VENDOR_AMD_ATI, LinkState, PciDevice, parent_chain, read_pci_device


@dataclass(frozen=True, slots=True)
class Hop:
    """One PCI function on a GPU's path. `role`: endpoint, amd-switch-port, bridge, root-port."""

    address: str
    role: str
    vendor_id: int | None
    device_id: int | None
    link: LinkState
    aer: AerReading
    errors: tuple[str, ...] = ()

    @property
    def is_amd(self) -> bool:
        return self.vendor_id == VENDOR_AMD_ATI

    @property
    def ids(self) -> str:
        def fmt(value: int | None) -> str:
            return "????" if value is None else f"{value:04x}"

        return f"{fmt(self.vendor_id)}:{fmt(self.device_id)}"


@dataclass(frozen=True, slots=True)
class Gpu:
    """One AMD GPU of the node: its identity, NUMA node, socket, PCI path and amdgpu readings."""

    pci_address: str
    card: str | None
    gfx_target: str | None
    numa_node: int | None  # None when the kernel says -1 or the file is absent
    socket: int | None
    local_cpulist: str | None  # cpulist of the GPU's NUMA node, else its local_cpulist
    product_name: str | None
    vendor_id: int | None
    device_id: int | None
    path: tuple[Hop, ...]  # endpoint first, root port last
    numa_node_raw: int | None  # -1 kept
    socket_source: str  # how `socket` was found, in words
    amdgpu: AmdgpuReading
    errors: tuple[str, ...] = ()
    # why `vendor`, `device` or `class` of the GPU's own function could not be read: the card is
    # kept (bound to amdgpu, or listed by KFD) and judged, and preflight says it could not check
    identity_errors: tuple[str, ...] = ()
    hypervisor: str | None = None  # Inventory.hypervisor (the host's DMI), for the link judge
    # the loaded amdgpu's module parameters (host-wide), for the RAS judge's bad-page rule
    driver_params: DriverParams = NO_PARAMS

    @property
    def endpoint(self) -> Hop:
        return self.path[0]

    @property
    def root_port(self) -> Hop | None:
        return self.path[-1] if len(self.path) > 1 else None


@dataclass(frozen=True, slots=True)
class Inventory:
    """The node as preflight sees it: its GPUs, NUMA nodes, sockets and what could not be read."""

    sysfs_root: Path
    gpus: tuple[Gpu, ...]  # sorted by PCI address
    numa_nodes: tuple[NumaNode, ...]
    sockets: tuple[int, ...]  # physical package ids seen on the CPUs
    other_cards: tuple[str, ...]  # DRM cards that are not AMD GPUs ("card0 1a03:2000 ast")
    problems: tuple[str, ...]  # cards that could not be read (one line each)
    cpu_errors: tuple[str, ...] = ()
    # GPUs KFD lists (class/kfd topology) that no DRM card shows: the card is gone, the GPU
    # cannot be judged, and a run must say so rather than count the GPUs it could see
    kfd_only: tuple[str, ...] = ()
    kfd_errors: tuple[str, ...] = ()  # KFD topology files that could not be read
    # the hypervisor the host's DMI names (class/dmi/id), None on bare metal or without DMI:
    # then the PCIe ports a guest sees are emulated (rocmseat.node.link.hierarchy)
    hypervisor: str | None = None

    @property
    def multi_socket(self) -> bool:
        return len(self.sockets) > 1

    def gpu(self, address: str) -> Gpu | None:
        return next((g for g in self.gpus if g.pci_address == address), None)


def read_inventory(sysfs_root: Path) -> Inventory:
    """Every amdgpu card under `sysfs_root/class/drm`, keyed by PCI address (never card index)."""
    numa_nodes = read_numa_nodes(sysfs_root)
    topology = read_cpu_topology(sysfs_root)
    kfd = read_kfd_topology(sysfs_root)
    gfx = kfd.as_dict()
    hypervisor = read_dmi(sysfs_root).hypervisor
    params = read_driver_params(sysfs_root)
    gpus: dict[str, Gpu] = {}
    others: list[str] = []
    problems: list[str] = []
    seen: set[str] = set()  # functions a DRM card points at, GPU or not
    for card in list_cards(sysfs_root):
        if card.device_dir is None:
            problems.append(f"{card.name}: {card.error or 'no device link'}")
            continue
        device = read_pci_device(card.device_dir)
        seen.add(device.address)
        amdgpu = read_amdgpu(card.device_dir)
        identity = _identity_errors(device, amdgpu)
        known_gpu = amdgpu.driver == "amdgpu" or device.address in gfx
        if device.vendor_id is None and not known_gpu:
            # Unreadable vendor, no amdgpu binding, not in KFD: it may be a GPU. Never drop it
            # as "another card" (issue 11): the run says it could not check.
            problems.append(
                f"{card.name}: cannot tell whether {device.address} is an AMD GPU: {identity[0]}"
            )
            continue
        if not known_gpu and (
            device.vendor_id != VENDOR_AMD_ATI or amdgpu.driver not in (None, "amdgpu")
        ):
            ids = Hop(
                device.address,
                "endpoint",
                device.vendor_id,
                device.device_id,
                device.link,
                _no_aer(device.address),
            ).ids
            others.append(f"{card.name} {device.address} {ids} {amdgpu.driver or 'no driver'}")
            continue
        if device.address in gpus:
            continue  # a second card of one function (partition mode): same GPU
        gpus[device.address] = _gpu(
            card,
            device,
            amdgpu=amdgpu,
            gfx=gfx,
            numa_nodes=numa_nodes,
            topology=topology,
            identity_errors=identity,
            hypervisor=hypervisor,
            driver_params=params,
        )
    sockets = tuple(sorted(set(topology.package_of().values())))
    return Inventory(
        sysfs_root=sysfs_root,
        gpus=tuple(gpus[address] for address in sorted(gpus)),
        numa_nodes=numa_nodes,
        sockets=sockets,
        other_cards=tuple(others),
        problems=tuple(problems),
        cpu_errors=topology.errors,
        kfd_only=tuple(sorted(set(gfx) - set(gpus) - set(seen))),
        kfd_errors=kfd.errors,
        hypervisor=hypervisor,
    )


def _identity_errors(device: PciDevice, amdgpu: AmdgpuReading) -> tuple[str, ...]:
    """Why the function's vendor, device or class is not known (a real PCI function always has
    all three: drivers/pci/pci-sysfs.c), or contradicts its amdgpu binding."""
    found = errors_of(device.errors, "vendor", "device", "class")
    for name, value in (
        ("vendor", device.vendor_id),
        ("device", device.device_id),
        ("class", device.class_code),
    ):
        if value is None and not errors_of(device.errors, name):
            found.append(f"{device.path / name}: missing")
    if amdgpu.driver == "amdgpu" and device.vendor_id not in (None, VENDOR_AMD_ATI):
        # amdgpu's PCI id table holds vendor 0x1002 only (amdgpu_drv.c pciidlist)
        found.append(
            f"{device.path / 'vendor'}: 0x{device.vendor_id:04x}, yet the function is bound "
            "to amdgpu (which drives vendor 0x1002 only)"
        )
    return tuple(found)


def _no_aer(address: str) -> AerReading:
    return AerReading(address, None, None, None, ())


def _hop(device: PciDevice, role: str) -> Hop:
    return Hop(
        address=device.address,
        role=role,
        vendor_id=device.vendor_id,
        device_id=device.device_id,
        link=device.link,
        aer=read_aer(device.path),
        errors=device.errors,
    )


def _gpu(
    card: Card,
    device: PciDevice,
    *,
    amdgpu: AmdgpuReading,
    gfx: dict[str, str],
    numa_nodes: tuple[NumaNode, ...],
    topology: CpuTopology,
    identity_errors: tuple[str, ...] = (),
    hypervisor: str | None = None,
    driver_params: DriverParams = NO_PARAMS,
) -> Gpu:
    path = [_hop(device, "endpoint")]
    chain = parent_chain(device.path)
    for index, parent_dir in enumerate(chain):
        parent = read_pci_device(parent_dir)
        if index == len(chain) - 1:
            role = "root-port"
        elif parent.is_amd:
            role = "amd-switch-port"
        else:
            role = "bridge"
        path.append(_hop(parent, role))
    socket, cpulist, source = _locality(device, numa_nodes, topology)
    return Gpu(
        pci_address=device.address,
        card=card.name,
        gfx_target=gfx.get(device.address),
        numa_node=device.numa_node,
        socket=socket,
        local_cpulist=cpulist,
        product_name=amdgpu.product_name,
        vendor_id=device.vendor_id,
        device_id=device.device_id,
        path=tuple(path),
        numa_node_raw=device.numa_node_raw,
        socket_source=source,
        amdgpu=amdgpu,
        errors=device.errors,
        identity_errors=identity_errors,
        hypervisor=hypervisor,
        driver_params=driver_params,
    )


def _locality(
    device: PciDevice, numa_nodes: tuple[NumaNode, ...], topology: CpuTopology
) -> tuple[int | None, str | None, str]:
    """(socket, cpulist, how the socket was found).

    The NUMA node's CPUs decide; with numa_node -1 (no ACPI _PXM) the function's own
    local_cpulist does (it then lists every online CPU on most firmware, so a multi-socket host
    gives no single package and the socket stays unknown).
    """
    package_of = topology.package_of()
    node = next((n for n in numa_nodes if n.node_id == device.numa_node), None)
    if node is not None and node.cpus:
        packages = {package_of[c] for c in node.cpus if c in package_of}
        if len(packages) == 1:
            return packages.pop(), node.cpulist, f"package of NUMA node {node.node_id}'s CPUs"
    if device.local_cpus:
        packages = {package_of[c] for c in device.local_cpus if c in package_of}
        cpulist = device.local_cpulist
        if len(packages) == 1:
            return packages.pop(), cpulist, f"package of local_cpulist {cpulist}"
        if packages:
            spread = ",".join(str(p) for p in sorted(packages))
            return None, cpulist, f"local_cpulist {cpulist} spans packages {spread}"
    if not package_of:
        return None, device.local_cpulist, "no CPU topology (physical_package_id) to infer from"
    return None, device.local_cpulist, "no numa_node and no local_cpulist"
