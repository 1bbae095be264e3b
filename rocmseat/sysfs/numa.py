"""NUMA nodes and CPU packages (Documentation/ABI/stable/sysfs-devices-node,
Documentation/ABI/stable/sysfs-devices-system-cpu).

`devices/system/node/nodeN/{cpulist,distance}`; `devices/system/cpu/cpuN/topology/
physical_package_id` (typically the socket). An empty cpulist is a memory-only node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rocmseat.sysfs.attrs import Collector
from rocmseat.sysfs.parse import parse_cpulist, parse_distance, parse_int


@dataclass(frozen=True, slots=True)
class NumaNode:
    """One devices/system/node/nodeN: its CPUs and distance row."""

    node_id: int
    cpus: tuple[int, ...] | None
    cpulist: str | None
    distance: tuple[int, ...] | None
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CpuTopology:
    """Each CPU's physical package (devices/system/cpu/cpuN/topology/physical_package_id)."""

    packages: tuple[tuple[int, int], ...]  # (cpu, physical_package_id)
    errors: tuple[str, ...] = ()

    def package_of(self) -> dict[int, int]:
        return dict(self.packages)


def numbered_dirs(directory: Path, prefix: str) -> list[tuple[int, Path]]:
    pattern = re.compile(rf"^{prefix}(\d{{1,5}})$")
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    found = []
    for entry in entries:
        match = pattern.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry))
    return sorted(found)


def read_numa_nodes(sysfs_root: Path) -> tuple[NumaNode, ...]:
    nodes = []
    for node_id, path in numbered_dirs(sysfs_root / "devices" / "system" / "node", "node"):
        attrs = Collector(path)
        cpus = attrs.get("cpulist", parse_cpulist)
        raw = attrs.text("cpulist")
        nodes.append(
            NumaNode(
                node_id=node_id,
                cpus=cpus,
                cpulist=raw if cpus is not None else None,
                distance=attrs.get("distance", parse_distance),
                errors=tuple(dict.fromkeys(attrs.errors)),
            )
        )
    return tuple(nodes)


def read_cpu_topology(sysfs_root: Path) -> CpuTopology:
    packages = []
    errors: list[str] = []
    for cpu, path in numbered_dirs(sysfs_root / "devices" / "system" / "cpu", "cpu"):
        attrs = Collector(path / "topology")
        package = attrs.get("physical_package_id", lambda t, s: parse_int(t, s, minimum=-1))
        errors.extend(attrs.errors)
        if package is not None and package >= 0:
            packages.append((cpu, package))
    return CpuTopology(tuple(packages), tuple(errors))
