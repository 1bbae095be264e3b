"""PCI devices under a sysfs root: ids, link state, NUMA affinity, the chain of parents.

Files (Documentation/ABI/testing/sysfs-bus-pci, drivers/pci/pci-sysfs.c): `vendor`, `device`,
`class` (0x-hex), `current_link_speed`/`max_link_speed` ("8.0 GT/s PCIe", older "8 GT/s",
"Unknown"), `current_link_width`/`max_link_width` (lanes), `numa_node` (-1 = unknown),
`local_cpulist`. Link files exist only on PCIe functions; absent values are None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rocmseat.errors import ParseError
from rocmseat.sysfs.attrs import Collector, read_parsed
from rocmseat.sysfs.parse import (
    is_pci_address,
    parse_cpulist,
    parse_hex_id,
    parse_link_speed,
    parse_link_width,
    parse_numa_node,
)

_RESOURCE_RE = re.compile(r"0x([0-9a-fA-F]{1,16}) 0x([0-9a-fA-F]{1,16}) 0x([0-9a-fA-F]{1,16})")
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
    """One PCI function as sysfs shows it: ids, class, link state, NUMA node, local CPUs."""

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


# include/linux/ioport.h: the flags resource_show() prints per BAR
IORESOURCE_MEM = 0x00000200
IORESOURCE_PREFETCH = 0x00002000
IORESOURCE_MEM_64 = 0x00100000
PCI_STD_NUM_BARS = 6  # include/uapi/linux/pci_regs.h: BARs 0-5 are the first six lines


@dataclass(frozen=True, slots=True)
class Bar:
    """One line of the function's `resource` file: a BAR's start, size and flags."""

    index: int
    start: int
    size_bytes: int
    flags: int

    @property
    def prefetchable_64(self) -> bool:
        wanted = IORESOURCE_MEM | IORESOURCE_PREFETCH | IORESOURCE_MEM_64
        return self.flags & wanted == wanted


def parse_resource(text: str, source: str = "<text>") -> tuple[Bar, ...]:
    """A function's `resource` file (drivers/pci/pci-sysfs.c resource_show(): one
    "0x%016llx 0x%016llx 0x%016llx" start, end, flags line per resource, BARs 0-5 first) -> its
    assigned BARs (an all-zero line is an unassigned BAR: left out)."""
    bars = []
    lines = text.splitlines()
    if len(lines) < PCI_STD_NUM_BARS or len(lines) > 64:
        raise ParseError(source, f"{len(lines)} lines", "not a PCI resource table")
    for index, line in enumerate(lines[:PCI_STD_NUM_BARS]):
        match = _RESOURCE_RE.fullmatch(line.strip())
        if match is None:
            raise ParseError(f"{source}:{index + 1}", line, "not 'start end flags' in hex")
        start, end, flags = (int(g, 16) for g in match.groups())
        if start == end == 0:
            continue
        if end < start:
            raise ParseError(f"{source}:{index + 1}", line, "ends before it starts")
        bars.append(Bar(index, start, end - start + 1, flags))
    return tuple(bars)


def vram_bar(bars: tuple[Bar, ...]) -> Bar | None:
    """The VRAM aperture of an AMD GPU: its largest 64-bit prefetchable memory BAR (BAR0; the
    doorbell BAR2 is 64-bit prefetchable too, and small)."""
    candidates = [b for b in bars if b.prefetchable_64]
    return max(candidates, key=lambda b: b.size_bytes) if candidates else None
