"""KFD topology (`class/kfd/kfd/topology/nodes/N/properties`, kfd_topology.c node_show).

GPU nodes carry `gfx_target_version` (120001 -> gfx1201), `domain` and `location_id`
((bus << 8) | devfn), which key them to a PCI address, and `drm_render_minor` (the minor of the
GPU's /dev/dri/renderD<minor>, node_show's `drm_render_minor`). CPU nodes have simd_count 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocmseat.sysfs.attrs import Collector
from rocmseat.sysfs.numa import numbered_dirs
from rocmseat.sysfs.parse import gfx_target, parse_kfd_properties


@dataclass(frozen=True, slots=True)
class KfdTopology:
    """What KFD's topology (class/kfd/kfd/topology/nodes) says of each GPU: gfx target and
    render minor, by PCI address."""

    gfx_by_address: tuple[tuple[str, str], ...]  # ("0000:05:00.0", "gfx1201")
    errors: tuple[str, ...] = ()
    render_minor_by_address: tuple[tuple[str, int], ...] = ()  # ("0000:05:00.0", 129)

    def as_dict(self) -> dict[str, str]:
        return dict(self.gfx_by_address)


def read_kfd_topology(sysfs_root: Path) -> KfdTopology:
    nodes_dir = sysfs_root / "class" / "kfd" / "kfd" / "topology" / "nodes"
    found: list[tuple[str, str]] = []
    minors: list[tuple[str, int]] = []
    errors: list[str] = []
    for _node_id, path in numbered_dirs(nodes_dir, ""):
        attrs = Collector(path)
        props = attrs.get("properties", parse_kfd_properties)
        errors.extend(attrs.errors)
        if not props or props.get("simd_count", 0) == 0:
            continue
        target = gfx_target(props.get("gfx_target_version", 0))
        location = props.get("location_id")
        if target is None or location is None:
            continue
        domain = props.get("domain", 0)
        bus, devfn = location >> 8, location & 0xFF
        address = f"{domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 7}"
        found.append((address, target))
        minor = props.get("drm_render_minor")
        if isinstance(minor, int) and 0 < minor < 1 << 20:
            minors.append((address, minor))
    return KfdTopology(tuple(found), tuple(errors), tuple(minors))
