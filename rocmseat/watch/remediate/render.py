"""`rocmseat remediate status` as text (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rocmseat.text import printable
from rocmseat.watch.alerts import iso
from rocmseat.watch.remediate.journal import Meta
from rocmseat.watch.remediate.policy import State


def render_status(state: State, meta: Meta, records: Sequence[Mapping[str, Any]]) -> str:
    lines = [f"seat {meta.seat} (node {meta.node or '-'}, remediation {meta.mode or '-'})"]
    if not state.ladders:
        lines.append("  no replica was remediated")
    for name, ladder in sorted(state.ladders.items()):
        since = f" since {iso(ladder.since_s)}" if ladder.since_s is not None else ""
        running = (f", step {ladder.pending.step} ({ladder.pending.action}) running"
                   if ladder.pending is not None else "")
        lines.append(f"  {name}: {ladder.mode}{since}{running}")
    for scope, halt in sorted(state.halts.items()):
        lines.append(f"  HALTED {scope}: {halt.bound}: {printable(halt.text, 200)} (since "
                     f"{iso(halt.since_s)}; `rocmseat remediate reset"
                     f"{' ' + scope.split(':', 1)[1] if scope.startswith('replica:') else ''}`)")
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
