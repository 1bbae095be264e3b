"""TP groups of 1, 2, 4 or 8 GPUs: the placement rule per node kind (pure; docs/launch.md,
"Placement").

- TP1: every GPU is a group of its own.
- A node whose GPUs form one XGMI hive (rocmseat.sysfs.xgmi): groups whose members are all one
  hop apart (`xgmi_num_hops`) with every link between them up (no end reports the link
  inactive in `xgmi_link_status[]`). vLLM's custom all-reduce above TP2 on ROCm needs every pair
  one XGMI hop apart (vllm/platforms/rocm.py); with a link down it falls back to RCCL, silently.
  Groups on one NUMA node come first, then PCI order; a group that spans NUMA nodes is not bound
  to one (its note says which nodes it spans).
- Any other node (Radeon boards, no hive): TP2 only, as socket-local pairs
  (rocmseat.preflight.pairs: cross-socket HIP IPC fails there, docs/architecture.md incident 2).

A GPU outside the hive, or a hive whose compute partition is not SPX (CPX and the others split
each GPU into several devices HIP numbers apart: rocmseat.sysfs.partition), places no group
above TP1: the refusal says so, as it names the missing link when no valid group exists.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rocmseat.node.inventory import Inventory
from rocmseat.preflight.xgmi import hive_of, link_problem

TP_SIZES = (1, 2, 4, 8)
_SEARCH_MAX = 16  # GPUs searched exhaustively for a full partition into groups


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """The groups of one TP size on a node (each sorted, in placement order), or why none."""

    tp: int
    groups: tuple[tuple[str, ...], ...]
    rule: str  # "single" | "xgmi-hive" | "socket-local-pairs"
    why: str = ""  # when groups is empty, or fewer than GPUs / tp: the missing links, in words


def group_pairs(group: Sequence[str]) -> list[tuple[str, str]]:
    """Every pair of a group, sorted: what the HIP probe checks (28 for TP8)."""
    return [(a, b) for a, b in itertools.combinations(sorted(group), 2)]


def plan_groups(inventory: Inventory, tp: int) -> GroupPlan:
    """The TP groups of this node (module docstring); `why` says what stopped a group."""
    if tp not in TP_SIZES:
        return GroupPlan(tp, (), "none", f"tp = {tp}: rocmseat places TP groups of "
                         f"{', '.join(map(str, TP_SIZES))}")
    if tp == 1:
        return GroupPlan(1, tuple((g.pci_address,) for g in inventory.gpus), "single")
    if not hive_of(inventory):
        if tp == 2:
            from rocmseat.preflight.pairs import propose_pairs

            pairs = tuple(p.addresses() for p in propose_pairs(inventory))
            return GroupPlan(2, pairs, "socket-local-pairs",
                             "" if pairs else "no socket-local GPU pair")
        outside = [g.pci_address for g in inventory.gpus if g.amdgpu.xgmi is None]
        why = (f"GPU {', '.join(outside)} is in no XGMI hive" if outside and len(outside) <
               len(inventory.gpus) else "the GPUs form no single XGMI hive")
        return GroupPlan(tp, (), "none", f"tp = {tp} needs GPUs of one XGMI hive: {why} "
                         "(a node without a hive serves TP2 socket-local pairs)")
    modes = {g.amdgpu.partition.compute for g in inventory.gpus if g.amdgpu.partition}
    if modes - {None, "SPX"}:
        mode = ", ".join(sorted(m for m in modes if m))
        return GroupPlan(tp, (), "none", f"the GPUs are in compute partition {mode}: each "
                         "GPU is several devices, rocmseat places TP groups of whole (SPX) GPUs")
    return _hive_groups(inventory, tp)


def _hive_groups(inventory: Inventory, tp: int) -> GroupPlan:
    gpus = list(inventory.gpus)
    addresses = [g.pci_address for g in gpus]
    bad = {(a, b): why for a, b in itertools.combinations(addresses, 2)
           if (why := link_problem(inventory, a, b)) is not None}
    node = {g.pci_address: g.numa_node for g in gpus}

    def valid(group: tuple[str, ...]) -> bool:
        return not any(pair in bad for pair in itertools.combinations(group, 2))

    def preference(group: tuple[str, ...]) -> tuple[int, tuple[str, ...]]:
        return len({node[a] for a in group}), group

    candidates = sorted((c for c in itertools.combinations(addresses, tp) if valid(c)),
                        key=preference)
    chosen = _partition(addresses, candidates) if len(addresses) <= _SEARCH_MAX else None
    if chosen is None:
        chosen = _greedy(candidates)
    why = ""
    if len(chosen) < len(addresses) // tp:
        missing = sorted(bad.items())
        shown = "; ".join(w for _pair, w in missing[:4])
        more = f" (and {len(missing) - 4} more)" if len(missing) > 4 else ""
        placed = (f"only {len(chosen)} of {len(addresses) // tp} TP{tp} groups placed; "
                  if chosen else "")
        why = (f"{placed}a TP{tp} group needs its GPUs all one XGMI hop apart with every link "
               f"up: {shown}{more}")
    return GroupPlan(tp, tuple(sorted(chosen, key=preference)), "xgmi-hive", why)


def _partition(addresses: list[str],
               candidates: list[tuple[str, ...]]) -> list[tuple[str, ...]] | None:
    """The first full partition of `addresses` into candidate groups (candidates in preference
    order), or None."""
    by_first: dict[str, list[tuple[str, ...]]] = {}
    for group in candidates:
        by_first.setdefault(group[0], []).append(group)

    def search(left: frozenset[str]) -> Iterator[list[tuple[str, ...]]]:
        if not left:
            yield []
            return
        first = min(left)
        for group in by_first.get(first, ()):
            if left.issuperset(group):
                for rest in search(left - set(group)):
                    yield [group, *rest]

    return next(search(frozenset(addresses)), None)


def _greedy(candidates: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
    taken: set[str] = set()
    out = []
    for group in candidates:
        if taken.isdisjoint(group):
            out.append(group)
            taken.update(group)
    return out


def without(inventory: Inventory, claimed: set[str]) -> Inventory:
    """The inventory less the GPUs other replicas hold (their identities)."""
    return dataclasses.replace(
        inventory, gpus=tuple(g for g in inventory.gpus if g.pci_address not in claimed))
