"""The worst first: the one order of findings for everything an operator reads first (the
table, `--problems`, the node-problem-detector line, the Slurm drain reason).

By severity (fail, unknown, warn, ok), then by the weight of the finding's check family, then by
check id and subject (or by the order the run made them, for the table). The weight ranks
what breaks serving soonest: a run that could not judge (`preflight`) or a card nobody could
read (`inventory`) speaks for every family; broken HIP IPC or P2P stops the replica; RAS
errors are the hardware failing; a degraded link costs bandwidth now; a cross-socket pair costs
it on every all-reduce; AER counts are a symptom, often of that same link; then the rest. So a
link that trained down to 2.5 GT/s comes before the 6,655 BadTLPs counted on it. A family this
table does not know (a newer check) weighs least. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from rocmseat.findings import SEVERITY_ORDER, Severity

FAMILY_WEIGHT: dict[str, int] = {
    "preflight": 90,
    "inventory": 80,
    "hip": 70,
    "ras": 60,
    "pcie": 50,
    "numa": 40,
    "aer": 30,
    "amdsmi": 20,
    "profile": 10,
}


class Ordered(Protocol):
    @property
    def check_id(self) -> str: ...
    @property
    def severity(self) -> Severity: ...
    @property
    def subject(self) -> str: ...


T = TypeVar("T", bound=Ordered)


def family_weight(check_id: str) -> int:
    return FAMILY_WEIGHT.get(check_id.split(".", 1)[0], 0)


def rank(finding: Ordered) -> tuple[int, int]:
    """Severity, then family weight, as a key that sorts the worst first."""
    return (-SEVERITY_ORDER[finding.severity], -family_weight(finding.check_id))


def worst_first(findings: Sequence[T]) -> list[T]:
    """The findings, worst first; ties by check id and subject (a stable line for NPD)."""
    return sorted(findings, key=lambda f: (*rank(f), f.check_id, f.subject))


def worst_first_in_run_order(findings: Sequence[T]) -> list[T]:
    """The findings, worst first; ties in the order the run made them (the table)."""
    return [f for _, f in sorted(enumerate(findings), key=lambda item: (*rank(item[1]),
                                                                         item[0]))]
