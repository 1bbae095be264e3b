"""Propose socket-local TP2 GPU pairs (pure).

Cross-socket HIP IPC fails on the X99 platform of docs/architecture.md incident 2, so a pair that
straddles sockets is never proposed. Within a socket, pairs on one NUMA node come first, then
pairs whose effective links are symmetric (an x8 GPU beside an x16 one bounds the pair's host
bandwidth: 20.5 against 27.2 GB/s on the R9700 bench), then PCI address order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from rocmseat.node.inventory import Gpu, Inventory
from rocmseat.node.link import EffectiveLink, effective_link
from rocmseat.sysfs.parse import format_speed

_EXHAUSTIVE_MAX = 10  # perfect matchings of 10 GPUs: 945; above, pair neighbours greedily


@dataclass(frozen=True, slots=True)
class Pair:
    """Two GPUs of a TP2 pair: where they sit and how their links trained."""

    a: str  # PCI address, a < b
    b: str
    socket: int | None
    numa_node: int | None  # the common NUMA node, None if the two differ or are unknown
    symmetric: bool  # both effective links have the same speed and width
    link_a: str  # "8 GT/s x16"
    link_b: str
    degraded: bool = False  # a link trained below what its slot supports (pcie.link fails it)

    @property
    def subject(self) -> str:
        return f"{self.a}+{self.b}"

    def addresses(self) -> tuple[str, str]:
        return (self.a, self.b)


def pair_json(pair: Pair) -> dict[str, object]:
    """A pair as JSON: the preflight document's `pairs.proposed` and the `numa.pair` finding's
    data alike."""
    return {
        "a": pair.a,
        "b": pair.b,
        "socket": pair.socket,
        "numa_node": pair.numa_node,
        "symmetric": pair.symmetric,
        "degraded": pair.degraded,
        "link_a": pair.link_a,
        "link_b": pair.link_b,
    }


def link_text(link: EffectiveLink) -> str:
    width = "x?" if link.width is None else f"x{link.width}"
    return f"{format_speed(link.speed_gts)} {width}"


def make_pair(
    first: Gpu, second: Gpu, links: Mapping[str, EffectiveLink] | None = None
) -> Pair:
    """`links`: the GPUs' effective links by address, when the caller has them already."""
    a, b = sorted((first, second), key=lambda g: g.pci_address)
    if links is None:
        links = {a.pci_address: effective_link(a), b.pci_address: effective_link(b)}
    link_a, link_b = links[a.pci_address], links[b.pci_address]
    same_node = a.numa_node is not None and a.numa_node == b.numa_node
    return Pair(
        a=a.pci_address,
        b=b.pci_address,
        socket=a.socket if a.socket == b.socket else None,
        numa_node=a.numa_node if same_node else None,
        symmetric=(link_a.speed_gts, link_a.width) == (link_b.speed_gts, link_b.width),
        link_a=link_text(link_a),
        link_b=link_text(link_b),
        degraded=_degraded(link_a) or _degraded(link_b),
    )


def _degraded(link: EffectiveLink) -> bool:
    return (link.speed_gts or 0) < (link.capable_speed_gts or 0) or (link.width or 0) < (
        link.capable_width or 0
    )


def propose_pairs(inventory: Inventory) -> tuple[Pair, ...]:
    """Socket-local pairs covering most GPUs; a GPU with no known socket is left out."""
    by_socket: dict[int, list[Gpu]] = {}
    for gpu in inventory.gpus:
        if gpu.socket is not None:
            by_socket.setdefault(gpu.socket, []).append(gpu)
    # every matching of a socket's GPUs builds its pairs anew: compute each link once
    links = {gpu.pci_address: effective_link(gpu) for gpu in inventory.gpus}
    pairs: list[Pair] = []
    for socket in sorted(by_socket):
        pairs.extend(_pair_socket(sorted(by_socket[socket], key=lambda g: g.pci_address), links))
    return tuple(sorted(pairs, key=lambda p: (p.a, p.b)))


def unpaired(inventory: Inventory, pairs: Sequence[Pair]) -> tuple[Gpu, ...]:
    taken = {address for pair in pairs for address in pair.addresses()}
    return tuple(g for g in inventory.gpus if g.pci_address not in taken)


def _rank(pairs: Sequence[Pair]) -> tuple[int, int, tuple[str, ...]]:
    """Lower is better: more same-node pairs, more symmetric pairs, then address order."""
    same_node = sum(p.numa_node is not None for p in pairs)
    symmetric = sum(p.symmetric for p in pairs)
    return -same_node, -symmetric, tuple(x for p in pairs for x in p.addresses())


def _pair_socket(gpus: list[Gpu], links: Mapping[str, EffectiveLink]) -> list[Pair]:
    if len(gpus) < 2:
        return []
    if len(gpus) > _EXHAUSTIVE_MAX:
        return _greedy(gpus, links)
    made: dict[tuple[str, str], Pair] = {}

    def pair(x: Gpu, y: Gpu) -> Pair:
        key = (x.pci_address, y.pci_address)
        if key not in made:
            made[key] = make_pair(x, y, links)
        return made[key]

    candidates = ([pair(x, y) for x, y in matching] for matching in _matchings(gpus))
    return min(candidates, key=_rank)


def _matchings(gpus: list[Gpu]) -> Iterator[list[tuple[Gpu, Gpu]]]:
    """Every maximum matching (one GPU left out when the count is odd)."""
    if len(gpus) % 2:
        for index in range(len(gpus)):
            yield from _perfect(gpus[:index] + gpus[index + 1 :])
    else:
        yield from _perfect(gpus)


def _perfect(gpus: list[Gpu]) -> Iterator[list[tuple[Gpu, Gpu]]]:
    if not gpus:
        yield []
        return
    first, rest = gpus[0], gpus[1:]
    for index, partner in enumerate(rest):
        for tail in _perfect(rest[:index] + rest[index + 1 :]):
            yield [(first, partner), *tail]


def _greedy(gpus: list[Gpu], links: Mapping[str, EffectiveLink]) -> list[Pair]:
    def key(gpu: Gpu) -> tuple[int, float, str]:
        link = links[gpu.pci_address]
        bandwidth = (link.speed_gts or 0.0) * (link.width or 0)
        node = -1 if gpu.numa_node is None else gpu.numa_node
        return node, -bandwidth, gpu.pci_address

    ordered = sorted(gpus, key=key)
    return [
        make_pair(ordered[i], ordered[i + 1], links) for i in range(0, len(ordered) - 1, 2)
    ]
