"""The interleaved gate at work: arms A and B over fresh starts in the order A B B A A B ...,
each start one `GateRun.run_arm` (launch cold, the battery, stop), decided after every start
by rocmseat.speculation.gate.interleave until DIFFERENT, SAME or the bound (UNKNOWN).

The figure of a start is the median of its decode runs' output tokens/s at one concurrency (its
repeats); the minutes are the wall time of the start, launch included (what the bound counts).

Each arm keeps one cache root across its starts (`caches`): its first start compiles, the others
load what it compiled, as a replica's restart does (rocmseat.cache). A start is still fresh, a
new process that draws the spawn lottery again; it is the compile, the same for every start of
an arm, that is not repeated (on the CPU engine 32 of a start's 73 s, so about 40 % more starts
fit in the bound).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rocmseat.speculation.gate.arms import ArmError, ArmRecord
from rocmseat.speculation.gate.interleave import Decision, Rules, Start, arm_of, decide
from rocmseat.speculation.gate.settings import SeatWithGate


class ArmRunner(Protocol):
    """What runs one fresh start of an arm: `GateRun.run_arm` (launch cold, battery, stop)."""

    def run_arm(self, name: str, source: SeatWithGate, *,
                cache_root: Path | None = None) -> ArmRecord: ...


@dataclass(frozen=True, slots=True)
class Interleaved:
    decision: Decision
    starts: tuple[Start, ...]
    decisions: tuple[Decision, ...]  # after every start


def start_of(record: ArmRecord, arm: str, concurrency: int, minutes: float) -> Start:
    repeats = tuple(r.result.output_tokens_per_s for r in record.runs
                    if r.phase == "decode" and r.concurrency == concurrency
                    and r.result is not None and r.error is None)
    if not repeats:
        raise ArmError(f"arm {record.name}: no decode run at concurrency {concurrency}")
    return Start(arm, repeats, minutes)


@dataclass(frozen=True, slots=True)
class ArmPair:
    """The two arms of an interleaved run: their seats, their names (a start is `NN-<name>`)
    and, when kept, each arm's cache root across its starts (None: each start its own)."""

    a: SeatWithGate
    b: SeatWithGate
    names: tuple[str, str] = ("A", "B")
    caches: tuple[Path, Path] | None = None

    def of(self, arm: str) -> tuple[str, SeatWithGate, Path | None]:
        """The name, seat and cache root of arm "A" or "B"."""
        side = 0 if arm == "A" else 1
        return (self.names[side], (self.a, self.b)[side],
                None if self.caches is None else self.caches[side])


def run_interleaved(gate: ArmRunner, arms: ArmPair, rules: Rules, *, concurrency: int,
                    clock: Callable[[], float] = time.monotonic,
                    on_start: Callable[[Start, ArmRecord], None] = lambda s, r: None,
                    on_decision: Callable[[Decision], None] = lambda d: None) -> Interleaved:
    """Start after start until the decision is final; each start's arm is named
    `NN-<name of its arm>` (00-A, 01-B, ...)."""
    starts: list[Start] = []
    decisions: list[Decision] = []
    for index in itertools.count():
        arm = arm_of(index)
        began = clock()
        name, seat, cache_root = arms.of(arm)
        record = gate.run_arm(f"{index:02d}-{name}", seat, cache_root=cache_root)
        start = start_of(record, arm, concurrency, (clock() - began) / 60.0)
        starts.append(start)
        on_start(start, record)
        decision = decide(starts, rules)
        decisions.append(decision)
        on_decision(decision)
        if decision.final:
            return Interleaved(decision, tuple(starts), tuple(decisions))
    raise AssertionError("unreachable: itertools.count() does not end")
