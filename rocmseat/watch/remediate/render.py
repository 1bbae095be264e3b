"""`rocmseat remediate status` as text, and the ladder as docs/remediate.md shows it (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rocmseat.text import printable
from rocmseat.watch.alerts import iso
from rocmseat.watch.remediate.journal import Meta
from rocmseat.watch.remediate.mode import Mode
from rocmseat.watch.remediate.policy import (
    LADDER,
    NO_ACTION,
    OUTCOME_CLASSES,
    RESET_ACTION,
    State,
    Step,
)

LADDER_BEGIN = "<!-- the ladder: generated from rocmseat.watch.remediate.policy.LADDER -->"
LADDER_END = "<!-- end of the ladder -->"


def render_status(state: State, meta: Meta, records: Sequence[Mapping[str, Any]]) -> str:
    """Every name and text from the state or the journal through `printable` (one line each:
    a name holding an escape sequence or a newline cannot forge a line)."""
    lines = [f"seat {printable(meta.seat, 80)} (node {printable(meta.node or '-', 80)}, "
             f"remediation {printable(meta.mode or '-', 20)})"]
    if not state.ladders:
        lines.append("  no replica was remediated")
    for name, ladder in sorted(state.ladders.items()):
        since = f" since {iso(ladder.since_s)}" if ladder.since_s is not None else ""
        running = (f", step {ladder.pending.step} ({ladder.pending.action}) running"
                   if ladder.pending is not None else "")
        problem = (f": its reset's restart failed: {ladder.reset_problem}; run the reset again "
                   "once that is fixed" if ladder.reset_problem else
                   ": a reset is restarting it" if ladder.mode == Mode.RESETTING else "")
        lines.append("  " + printable(f"{name}: {ladder.mode}{since}{running}{problem}", 400))
    for scope, halt in sorted(state.halts.items()):
        lift = scope.split(":", 1)[1] if scope.startswith("replica:") else ""
        lines.append("  " + printable(
            f"HALTED {scope}: {halt.bound}: {halt.text} (since {iso(halt.since_s)}; "
            f"`rocmseat remediate reset{' ' + lift if lift else ''}`)", 400))
    if records:
        lines.append("journal:")
    for r in records:
        step = r.get("step")
        lines.append("  " + printable(
            f"{r.get('when')} {r.get('replica')} step {step if step is not None else '-'} "
            f"{r.get('action')}: {r.get('outcome')}"
            + (f" ({r['diagnosis']})" if r.get("diagnosis") else "")
            + (" [dry-run]" if r.get("dry_run") else ""), 300))
    return "\n".join(lines) + "\n"


def applies_line(engine: str, label: str) -> str:
    """What of the ladder applies to a seat's engine (`remediate status` with a seat file):
    the steps that list it, and those that do not (llama.cpp: no compile cache to move)."""
    from rocmseat.watch.remediate.policy import steps_for

    on, off = steps_for(engine)
    said = ", ".join(dict.fromkeys(f"{s.number} {s.action}" for s in on)) or "none"
    line = f"engine {label} ({engine}): steps that apply: {said}"
    if off:
        line += "; not: " + ", ".join(f"{s.number} {s.action}" for s in off)
        if engine == "llamacpp":
            line += " (llama.cpp has no compile cache)"
    return line + "\n"


def ladder_table(steps: Sequence[Step] = LADDER) -> str:
    """docs/remediate.md's table of the ladder, between LADDER_BEGIN and LADDER_END
    (tests/watch/test_remediate_ladder.py holds the two equal)."""
    def codes(items: Sequence[str]) -> str:
        return ", ".join(f"`{i}`" for i in items) or "-"

    rows = [LADDER_BEGIN, "",
            "| step | action | trigger | from mode | when | mode after | the edge | verified by "
            "| outcomes (class) | bounds | engines |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in steps:
        outcomes = "; ".join(f"{o.text} (`{o.label}`)" for o in s.outcomes)
        cells = [str(s.number), f"`{s.action}`", codes(s.triggers), codes(s.starts_from),
                 s.condition, f"`{s.mode}`" if s.mode else "its mode",
                 ", then ".join(s.effects) or "nothing", s.verification,
                 outcomes + (f"; then `{s.then}`" if s.then else ""),
                 "; ".join(s.bounds) or "-", ", ".join(sorted(s.engines))]
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    actions = codes([*dict.fromkeys(s.action for s in steps), RESET_ACTION, NO_ACTION])
    return "\n".join([*rows, "", f"Journal actions: {actions} (`{RESET_ACTION}`: the operator's "
                      f"reset; `{NO_ACTION}`: a refusal). Outcome classes "
                      f"(`rocmseat_remediations_total{{outcome}}`): {codes(OUTCOME_CLASSES)}.",
                      "", LADDER_END]) + "\n"
