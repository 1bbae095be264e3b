"""The physical links of a GPU's path and its effective link (pure functions over a Gpu).

AMD dGPUs sit behind an internal switch (vendor 0x1002 upstream + downstream port); the
endpoint's own link is that virtual link and reports the ASIC's capability (32 GT/s x16 on an
R9700 in a Gen3 slot). Like amdgpu_device_partner_bandwidth() (amdgpu_device.c: "skip
upstream/downstream switches internal to dGPU"), the real links are the ones whose upper end
is not an AMD port: below the root port and below any platform switch's downstream port.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from rocmseat.node.inventory import Gpu, Hop


@dataclass(frozen=True, slots=True)
class PhysicalLink:
    """The link below `upstream` (a non-AMD port) to `downstream` (the next hop toward the GPU)."""

    upstream: Hop
    downstream: Hop
    trained_speed_gts: float | None
    trained_width: int | None
    capable_speed_gts: float | None  # what both ends support: min of their max_link_*
    capable_width: int | None

    @property
    def bandwidth_key(self) -> float:
        if self.trained_speed_gts is None or self.trained_width is None:
            return float("inf")
        return self.trained_speed_gts * self.trained_width


def _min(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _min_int(a: int | None, b: int | None) -> int | None:
    value = _min(a, b)
    return None if value is None else int(value)


def _link_pairs(path: tuple[Hop, ...]) -> list[tuple[Hop, Hop]]:
    """(lower, upper) ends of each PCIe link on a path, nearest the GPU first.

    Each function's link registers describe one link: an endpoint's or a switch upstream port's
    the link above it, a downstream or root port's the link below it (pcie_bandwidth_available()
    in drivers/pci/pci.c reads every function on the way up for that reason). From the endpoint
    a path alternates link, a switch's internal bus, link ...: (path[0], path[1]),
    (path[2], path[3]) ... are links, while (path[1], path[2]) joins a switch's downstream port
    to its own upstream port and has no link. An odd path (a PCIe-to-PCI bridge, or a hop
    missing from the tree) does not fit that shape: then every adjacent pair counts.
    """
    if len(path) % 2 == 0:
        return [(path[i], path[i + 1]) for i in range(0, len(path), 2)]
    return list(itertools.pairwise(path))


def physical_links(gpu: Gpu) -> tuple[PhysicalLink, ...]:
    """The real links of the GPU's path, nearest the GPU first."""
    links = []
    for below, hop in _link_pairs(gpu.path):
        if hop.is_amd:
            continue  # an internal switch port of the GPU itself
        trained_speed = hop.link.current_speed_gts
        if trained_speed is None:
            trained_speed = below.link.current_speed_gts
        trained_width = hop.link.current_width
        if trained_width is None:
            trained_width = below.link.current_width
        links.append(
            PhysicalLink(
                upstream=hop,
                downstream=below,
                trained_speed_gts=trained_speed,
                trained_width=trained_width,
                capable_speed_gts=_min(hop.link.max_speed_gts, below.link.max_speed_gts),
                capable_width=_min_int(hop.link.max_width, below.link.max_width),
            )
        )
    return tuple(links)


@dataclass(frozen=True, slots=True)
class EffectiveLink:
    speed_gts: float | None
    width: int | None
    limited_at: str | None  # the address of the hop whose link limits the path
    capable_speed_gts: float | None
    capable_width: int | None


def effective_link(gpu: Gpu) -> EffectiveLink:
    """The slowest/narrowest physical link; the endpoint's own if the GPU has no bridge above."""
    links = physical_links(gpu)
    if not links:
        own = gpu.endpoint.link
        return EffectiveLink(
            own.current_speed_gts,
            own.current_width,
            gpu.pci_address,
            own.max_speed_gts,
            own.max_width,
        )
    speed = min(
        (x.trained_speed_gts for x in links if x.trained_speed_gts is not None), default=None
    )
    width = min((x.trained_width for x in links if x.trained_width is not None), default=None)
    slowest = min(links, key=lambda x: x.bandwidth_key)
    capable_speed = min(
        (x.capable_speed_gts for x in links if x.capable_speed_gts is not None), default=None
    )
    capable_width = min(
        (x.capable_width for x in links if x.capable_width is not None), default=None
    )
    return EffectiveLink(speed, width, slowest.upstream.address, capable_speed, capable_width)
