"""The --once table for a person at a terminal (pure: statuses in, text out).

The table fits 80 columns with short replica names (issue 35: it was 91): one number per
column; what takes words (the baseline's source, the alerts, per-position acceptance) is a
note line under it, one replica per line.
"""

from __future__ import annotations

from rocmseat.watch.alerts import REPLICA_DOWN, SPEC_BLIND, SUMMARY
from rocmseat.watch.status import ReplicaStatus


def _f(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def render_table(statuses: list[ReplicaStatus]) -> str:
    header = ("replica", "up", "AL", "base", "rate", "K", "dr/s", "tok/s", "run", "wait",
              "kv", "pfx")
    rows = [header]
    for s in statuses:
        w = s.window
        base = None
        if s.expected_al is not None:
            base = s.expected_al
        elif s.baseline is not None:
            base = s.baseline.acceptance_length
        rows.append((
            s.replica,
            "yes" if s.up else "NO",
            _f(w.acceptance_length if w else None, ".2f"),
            _f(base, ".2f"),
            _f(w.draft_acceptance_rate if w else None, ".3f"),
            _f(w.effective_k if w else None, ".2f"),
            _f(w.drafts_per_s if w else None, ".1f"),
            _f(w.generation_tokens_per_s if w else None, ".1f"),
            _f(w.running if w else None, ".0f"),
            _f(w.waiting if w else None, ".0f"),
            _f(w.kv_usage if w else None, ".2f"),
            _f(w.prefix_cache_hit_rate if w else None, ".2f"),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
             for row in rows]
    notes = [note for s in statuses for note in _notes(s)]
    return "\n".join(lines + notes) + "\n"


def _notes(s: ReplicaStatus) -> list[str]:
    """The note lines of one replica: what the table's columns cannot say in a number."""
    notes: list[str] = []
    w = s.window
    own: dict[str, int] = {}  # the alerts a note of their own already explains
    if s.error:
        own[REPLICA_DOWN] = len(notes)
        notes.append(f"{s.replica}: scrape failed: {s.error}")
    if s.blind:
        own[SPEC_BLIND] = len(notes)
        notes.append(f"{s.replica}: no spec-decode series (speculation off or "
                     "--disable-log-stats)")
    if s.restarted:
        notes.append(f"{s.replica}: restarted between the two scrapes (no window to judge; "
                     f"{s.restarts_in_row} reset(s) in a row)")
    if s.up and s.speculating and not s.blind and s.baseline is None:
        notes.append(f"{s.replica}: no baseline yet (learning; pin one with --baseline-al "
                     "or the seat's [watch].expected_acceptance_length)")
    if s.undrafted and w is not None:
        notes.append(f"{s.replica}: no drafts in this window while it generated "
                     f"{w.generation_tokens or 0:.0f} tokens ({w.running or 0:.0f} "
                     "running): acceptance not judged "
                     "(the schedule turned drafting off at this batch size, or the drafter "
                     "stopped drafting)")
    for alert in s.alerts:
        if alert in own:  # name the alert in its own note
            notes[own[alert]] = f"{notes[own[alert]]} [{alert}]"
        else:
            notes.append(f"{s.replica}: {alert}: {SUMMARY.get(alert, alert)}")
    said = []
    if s.baseline is not None:
        said.append(f"baseline {s.baseline.acceptance_length:.2f} {s.baseline.source}")
    if w is not None and w.position_acceptance:
        pos = " ".join(f"{p:.3f}" for p in w.position_acceptance)
        said.append(f"per-position {pos} over {w.drafts:.0f} drafts")
    if said:
        notes.append(f"{s.replica}: {', '.join(said)}")
    return notes
