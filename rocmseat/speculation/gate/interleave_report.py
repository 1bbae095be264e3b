"""The interleaved gate's answer as a document (`rocmseat.gate-interleave/v1`) and as text
(pure; docs/spec.md "Arms interleaved across starts").

The exit code of the answer: SAME is 0 (no difference of the asked size: for an A/A run the
gate's own noise is within bounds; for a candidate, speculation neither gains nor loses that
much), DIFFERENT is 0 when the candidate is faster and 1 when it is slower, UNKNOWN (the bound
reached undecided) is 2; a candidate start with hangs or failed requests beyond the gate's
allowance makes it 1 whatever the figures say.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rocmseat import exitcodes
from rocmseat.speculation.gate.interleave import DIFFERENT, SAME, Decision, Rules, Start

SCHEMA = "rocmseat.gate-interleave/v1"
ROLE = {"A": "base", "B": "candidate"}


@dataclass(frozen=True, slots=True)
class StartEntry:
    """One start as the report shows it: the pure figures and what its arm record said."""

    start: Start
    name: str  # the arm directory under --out/arms
    problems: tuple[str, ...]  # hangs, failed requests


@dataclass(frozen=True, slots=True)
class Answer:
    decision: Decision | None  # None: no start was measured
    exit_code: int
    verdict: str  # one line


def _f(value: float, digits: int = 4) -> float | None:
    return round(value, digits) if math.isfinite(value) else None


def answer(decision: Decision | None, entries: Sequence[StartEntry], aa: bool) -> Answer:
    """The exit code and the verdict line of a finished interleaved gate."""
    bad = [e for e in entries if e.start.arm == "B" and e.problems]
    if bad:
        return Answer(decision, exitcodes.PROBLEM,
                      f"do not ship: candidate start {bad[0].name}: {bad[0].problems[0]}")
    if decision is None:
        return Answer(None, exitcodes.CANNOT_CHECK, "could not decide: no start was measured")
    shown = f"{decision.ratio:.3f}x" if math.isfinite(decision.ratio) else "unknown"
    if decision.result == SAME:
        what = ("A/A: the gate's noise is within bounds" if aa else
                "no measurable difference: speculation neither gains nor loses that much here")
        return Answer(decision, exitcodes.OK, f"SAME ({shown}): {what}")
    if decision.result == DIFFERENT:
        faster = decision.ratio > 1.0
        if aa:
            return Answer(decision, exitcodes.PROBLEM,
                          f"DIFFERENT ({shown}) on an A/A run: the arms are not the same seat, or "
                          "the host drifts more than starts can average out")
        return Answer(decision, exitcodes.OK if faster else exitcodes.PROBLEM,
                      f"DIFFERENT ({shown}): the candidate is "
                      + ("faster: ship" if faster else "slower: do not ship"))
    return Answer(decision, exitcodes.CANNOT_CHECK,
                  f"UNKNOWN ({shown}): could not decide within the bound; {decision.why}")


def document(head: dict[str, Any], rules: Rules, entries: Sequence[StartEntry], *,
             history: Sequence[Decision], result: Answer, error: str | None) -> dict[str, Any]:
    """The rocmseat.gate-interleave/v1 document: `head` (schema, seats, battery, ...) first, the
    same keys on every way out (`error` set when a start could not be measured)."""
    d = result.decision
    flagged = set(d.flagged) if d is not None else set()
    return {
        "schema": SCHEMA, **head,
        # margin: SAME's band is 1/(1+m)..1+m, m the effect (interleave.Rules.band)
        "rules": {"effect": rules.effect, "margin": rules.effect,
                  "max_starts": rules.max_starts, "max_minutes": rules.max_minutes,
                  "start_spread": rules.start_spread, "noise_floor": rules.noise_floor},
        "starts": [_start_json(i, e, i in flagged) for i, e in enumerate(entries)],
        "decision": None if d is None else {
            "result": d.result, "final": d.final, "p_value": _f(d.p_value),
            "ratio": _f(d.ratio), "low": _f(d.low), "high": _f(d.high), "starts": d.starts,
            "minutes": _f(d.minutes, 2), "flagged": list(d.flagged), "why": d.why},
        "history": [{"starts": h.starts, "minutes": _f(h.minutes, 2), "result": h.result}
                    for h in history],
        "verdict": result.verdict if error is None else "could not measure",
        "exit_code": result.exit_code if error is None else exitcodes.CANNOT_CHECK,
        "error": error,
    }


def _start_json(index: int, entry: StartEntry, flagged: bool) -> dict[str, Any]:
    s = entry.start
    return {"index": index, "arm": s.arm, "seat": ROLE[s.arm], "name": entry.name,
            "arm_file": f"arms/{entry.name}/arm.json",
            "figure_tokens_per_s": _f(s.figure, 3),
            "repeats_tokens_per_s": [_f(r, 3) for r in s.repeats],
            "spread": _f(s.spread()), "minutes": _f(s.minutes, 2), "flagged": flagged,
            "problems": list(entry.problems)}


def render(entries: Sequence[StartEntry], result: Answer, *, concurrency: int,
           rules: Rules) -> str:
    """The text: one line per start, then the decision and the verdict."""
    d = result.decision
    flagged = set(d.flagged) if d is not None else set()
    lines = [f"Interleaved gate: decode output tokens/s at concurrency {concurrency}, arms over "
             f"fresh starts (A = base, B = candidate); effect {rules.effect:.0%}, bounds "
             f"{rules.max_starts} starts, {rules.max_minutes:g} min",
             "start  arm  seat       tok/s     spread  min    repeats"]
    for i, e in enumerate(entries):
        s = e.start
        note = "  FLAGGED: its repeats disagree" if i in flagged else ""
        note += "".join(f"  {p}" for p in e.problems)
        lines.append(f"{i:5d}  {s.arm:3}  {ROLE[s.arm]:9}  {s.figure:8.2f}  {s.spread():6.1%}  "
                     f"{s.minutes:5.2f}  {', '.join(f'{r:.2f}' for r in s.repeats)}{note}")
    if d is not None:
        interval = (f"{d.low:.3f}..{d.high:.3f}" if math.isfinite(d.low) and math.isfinite(d.high)
                    else "unknown")
        shown = f"{d.ratio:.3f}" if math.isfinite(d.ratio) else "unknown"
        lines.append(f"{d.result} after {d.starts} starts, {d.minutes:.1f} min: median(B)/"
                     f"median(A) {shown} (90 % {interval}), Mann-Whitney p {d.p_value:.4f}; "
                     f"{d.why}")
    lines.append(f"verdict: {result.verdict}")
    return "\n".join(lines) + "\n"
