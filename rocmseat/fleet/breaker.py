"""The circuit breaker on drains: a wrong profile or release must not empty a partition.

When `--max-drained` nodes of those Slurm lists (default 10 %) already carry a rocmseat drain,
no further node is drained (`breaker`, on the fresh node list; exit 1, saying so); a resume is
never held. Since slurmctld starts every node's check at once, a drain is followed by a second
read once its second has passed: a drain beyond the limit in slurmctld's stamp order is handed
back (`settle_and_rank`, docs/fleet.md, "The circuit breaker").
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from rocmseat.fleet.scontrol import (
    CALL_RESERVE_S,
    Action,
    Clocks,
    Deadline,
    NodeState,
    list_nodes,
    pick_node,
)
from rocmseat.runner import Runner

DEFAULT_MAX_DRAINED = "10%"
# The breaker's second half (settle_and_rank): how far this host's clock may be from
# slurmctld's (Slurm needs them synchronised anyway: munge credentials carry a time), the
# longest wait for a drain's second to pass, and how many re-reads that may take
CLOCK_SLACK_S = 0.25
MAX_SETTLE_S = 5.0
SETTLE_TRIES = 3
_MAX_DRAINED_RE = re.compile(r"([0-9]{1,7}(?:\.[0-9]{1,6})?)(%?)", re.ASCII)


@dataclass(frozen=True, slots=True)
class MaxDrained:
    """`--max-drained N|P%`: how many nodes rocmseat may hold drained at once."""

    count: int | None = None
    percent: float | None = None

    def limit(self, nodes: int) -> int:
        """The limit for a cluster of `nodes` (a percentage rounds down, and is at least 1:
        one node of a small cluster can always be drained)."""
        if self.count is not None:
            return self.count
        assert self.percent is not None
        return max(1, math.floor(nodes * self.percent / 100.0 + 1e-9))


def parse_max_drained(text: str) -> MaxDrained:
    """`3` or `10%` (ValueError with the reason otherwise; ASCII digits only). Pure."""
    match = _MAX_DRAINED_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not N (1..1000000) or P% (0 < P <= 100)")
    number, percent = match.groups()
    if percent:
        value = float(number)
        if not 0 < value <= 100:
            raise ValueError(f"{text!r}: a percentage in (0, 100]")
        return MaxDrained(percent=value)
    if "." in number or not 1 <= int(number) <= 1_000_000:
        raise ValueError(f"{text!r} is not N (1..1000000) or P% (0 < P <= 100)")
    return MaxDrained(count=int(number))


def breaker(action: Action, name: str, nodes: Sequence[NodeState],
            max_drained: MaxDrained) -> Action:
    """The circuit breaker on drains (pure): a drain of a node not yet drained is held when
    `max_drained` other nodes already carry a rocmseat drain. Resumes and re-drains (a new
    reason on a node rocmseat drained) pass."""
    if action.kind != "drain":
        return action
    this = [n for n in nodes if n.name == name]
    if this and this[0].drained:
        return action
    ours = sum(1 for n in nodes if n.name != name and n.drained and n.ours)
    limit = max_drained.limit(len(nodes))
    if ours < limit:
        return action
    return Action("none", action.reason,
                  f"circuit breaker: {ours} of {len(nodes)} nodes already drained by rocmseat "
                  f"(limit {limit}): not draining {name}", held=True)


def breaker_after(name: str, nodes: Sequence[NodeState], max_drained: MaxDrained) -> Action | None:
    """The breaker's second half (pure), on a node list read after this node's drain and after
    every drain stamped in the same second as it was committed: the drains rocmseat holds, in
    the order slurmctld stamped them (then by name), keep their place up to the limit; a drain
    beyond it is handed back (an Action to resume), else None.

    Every run that drains ranks the same drains the same way, so however many nodes drain at
    the same instant, the first `limit` stay and the rest resume (docs/fleet.md, "The circuit
    breaker"). A drain whose stamp cannot be read counts as older than any other.
    """
    ours = sorted((n for n in nodes if n.drained_by_rocmseat), key=_drain_order)
    names = [n.name for n in ours]
    if name not in names:
        return None
    limit = max_drained.limit(len(nodes))
    place = names.index(name) + 1
    if place <= limit:
        return None
    return Action("resume", None,
                  f"circuit breaker: {place - 1} of {len(nodes)} nodes were drained by rocmseat "
                  f"before it (limit {limit}): handed back the drain of {name}", held=True)


def _drain_order(node: NodeState) -> tuple[int, float, str]:
    stamp = node.reason_set_unix_s
    return (0 if stamp is None else 1, stamp or 0.0, node.name)


def settle_and_rank(
    name: str,
    reason: str,
    max_drained: MaxDrained,
    *,
    runner: Runner,
    deadline: Deadline,
    clocks: Clocks,
) -> Action | None:
    """After this node's drain: wait until every drain slurmctld stamped in the same second has
    been committed, re-list, and rank (breaker_after). None when the drain stays or is no
    longer rocmseat's to judge (its reason changed since: an administrator stepped in).

    slurmctld stamps a reason with its clock in whole seconds, under the node write lock
    (update_node in src/slurmctld/node_mgr.c; _slurm_rpc_update_node in proc_req.c takes the
    lock), so a list asked for once its clock has passed the stamp's second holds every drain
    of that second. This host's clock stands in for slurmctld's, within CLOCK_SLACK_S.
    """
    for _ in range(SETTLE_TRIES):
        asked = clocks.wall()
        nodes = list_nodes(runner=runner, deadline=deadline, keep_s=CALL_RESERVE_S)
        own = pick_node(nodes, name, "scontrol -o show node")
        if not (own.drained_by_rocmseat and own.reason == reason):
            return None
        stamp = own.reason_set_unix_s
        if stamp is None:
            return Action("resume", None, "circuit breaker: scontrol printed no readable time "
                          f"for the drain of {name}, so it cannot be ordered: handed back",
                          held=True)
        settled = stamp + 1.0 + CLOCK_SLACK_S
        if asked >= settled:
            return breaker_after(name, nodes, max_drained)
        wait = settled - clocks.wall()
        if wait > MAX_SETTLE_S:
            return Action("resume", None, f"circuit breaker: slurmctld stamped the drain of "
                          f"{name} {wait - 1.0 - CLOCK_SLACK_S:.0f}s ahead of this host's "
                          "clock (clocks not synchronised?): handed back", held=True)
        clocks.sleep(max(wait, 0.0))
    return Action("resume", None, f"circuit breaker: the node list did not settle after "
                  f"{SETTLE_TRIES} reads: handed back the drain of {name}", held=True)
