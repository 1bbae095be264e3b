"""The record of remediation: `<state dir>/remediation/<seat>/` (docs/remediate.md).

    state.json                 the ladder's state (rocmseat.remediation-state/v1): what each
                               replica is doing, the actions taken in the last day, the halts
    journal/<stamp>-<n>.json   one file per step (rocmseat.remediation/v1): what, why, when,
                               the verification figures, the outcome
    .lock                      flock: the watcher and `rocmseat remediate reset` take turns

The state decides actions, so it is read back through rocmseat.safeio.read_trusted_state (no
link, owned by root or the reader, not writable by group or others); a state file that fails
that, or is not one this module wrote, is a StateUnusable and nothing acts on it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat import exitcodes
from rocmseat.atomic import atomic_write_json, exclusive_lock
from rocmseat.errors import ReadError, RocmseatError
from rocmseat.redact import redact_text
from rocmseat.safeio import read_regular_text, read_trusted_state
from rocmseat.statedir import StateDir
from rocmseat.text import printable
from rocmseat.watch.alerts import iso
from rocmseat.watch.remediate.policy import (
    State,
    StateError,
    StepRecord,
    state_from_json,
    state_json,
)

SCHEMA = "rocmseat.remediation/v1"
STATE_SCHEMA = "rocmseat.remediation-state/v1"
STATE_LIMIT_BYTES = 4 << 20
RECORD_LIMIT_BYTES = 1 << 20
DIR_MODE = 0o700
_SEQ = itertools.count()


class StateUnusable(RocmseatError):
    """The remediation state cannot be trusted or read: nothing acts on it (exit 2)."""

    exit_code = exitcodes.CANNOT_CHECK


@dataclass(frozen=True, slots=True)
class Meta:
    seat: str
    seat_file: str | None = None
    node: str | None = None
    mode: str | None = None  # "on" | "dry-run" (the watcher that wrote it)


def seat_dir(state_dir: Path, seat: str) -> Path:
    return StateDir(state_dir).remediation(seat)


def _prepare(state_dir: Path, seat: str) -> Path:
    from rocmseat.statedir import check_owned_dir

    names = StateDir(state_dir)
    directory = names.remediation(seat)
    for path in (names.remediation_root, directory, names.remediation_journal(seat)):
        check_owned_dir(path, what="remediation dir")
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        check_owned_dir(path, what="remediation dir")
    return directory


@contextlib.contextmanager
def locked(state_dir: Path, seat: str, timeout_s: float = 60.0) -> Iterator[Path]:
    directory = _prepare(state_dir, seat)
    with exclusive_lock(StateDir(state_dir).remediation_lock(seat), timeout_s=timeout_s):
        yield directory


def load_state(state_dir: Path, seat: str) -> tuple[State, Meta]:
    """The state (empty when there is none yet); StateUnusable when it cannot be trusted."""
    path = StateDir(state_dir).remediation_state(seat)
    try:
        text = read_trusted_state(path, trusted_root=state_dir, limit_bytes=STATE_LIMIT_BYTES)
    except ReadError as exc:
        raise StateUnusable(f"remediation state: {printable(exc.message, 300)}",
                            hint="look at who wrote it; `rocmseat remediate status` says what it "
                            "held") from None
    if text is None:
        return State(), Meta(seat)
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("schema") != STATE_SCHEMA:
            raise StateError(f"not a {STATE_SCHEMA} document")
        if doc.get("seat") != seat:
            raise StateError(f"the state of seat {printable(str(doc.get('seat')), 60)!r}")
        state = state_from_json(doc)
    except (ValueError, RecursionError) as exc:  # StateError is a ValueError
        raise StateUnusable(f"{path}: not a remediation state: {printable(str(exc), 200)}",
                            hint="move it away; remediation starts afresh") from None
    meta = Meta(seat, *(doc.get(k) if isinstance(doc.get(k), str) else None
                        for k in ("seat_file", "node", "mode")))
    return state, meta


def save_state(state_dir: Path, meta: Meta, state: State, now_s: float) -> None:
    _prepare(state_dir, meta.seat)
    atomic_write_json(StateDir(state_dir).remediation_state(meta.seat), {
        "schema": STATE_SCHEMA, "seat": meta.seat, "seat_file": meta.seat_file,
        "node": meta.node, "mode": meta.mode, "written_at": iso(now_s), **state_json(state),
    }, mode=0o600)


def record_json(meta: Meta, record: StepRecord) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "seat": meta.seat,
        "node": meta.node,
        "replica": record.replica,
        "step": record.step,
        "action": record.action,
        "when": iso(record.time_s),
        "why": dict(record.why),
        "figures": dict(record.figures),
        "outcome": record.outcome,
        "diagnosis": record.diagnosis,
        "dry_run": record.dry_run,
    }


def write_record(state_dir: Path, meta: Meta, record: StepRecord) -> Path:
    _prepare(state_dir, meta.seat)
    stamp = dt.datetime.fromtimestamp(record.time_s, dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    journal = StateDir(state_dir).remediation_journal(meta.seat)
    path = journal / f"{stamp}-{os.getpid()}-{next(_SEQ)}.json"
    atomic_write_json(path, record_json(meta, record), mode=0o600)
    return path


def journal_line(meta: Meta, record: StepRecord) -> str:
    """One journald-friendly line per step: key=value, no spaces or controls inside values."""
    def token(value: object) -> str:
        text = "-" if value is None or value == "" else str(value)
        return "".join("_" if c.isspace() or not c.isprintable() else c for c in text)

    parts = [f"replica={token(record.replica)}", f"step={token(record.step)}",
             f"action={token(record.action)}", f"outcome={token(record.outcome)}"]
    if record.dry_run:
        parts.append("dry_run=1")
    for prefix, items in (("why.", record.why), ("", record.figures)):
        parts += [f"{prefix}{key}={token(value)}" for key, value in items.items()
                  if value is not None and not isinstance(value, (dict, list))]
    if record.diagnosis:
        parts.append(f"diagnosis={token(record.diagnosis)}")
    return redact_text("rocmseat-remediate " + " ".join(parts))


def read_records(state_dir: Path, seat: str, *, last: int = 20) -> tuple[list[dict[str, Any]],
                                                                          list[str]]:
    """The newest `last` journal records, oldest first, and one line per file not read."""
    journal = StateDir(state_dir).remediation_journal(seat)
    if journal.is_symlink():
        return [], [f"{journal}: is a symlink: not read"]
    try:
        names = sorted(n for n in os.listdir(journal) if n.endswith(".json")
                       and not n.startswith("."))
    except (FileNotFoundError, NotADirectoryError):
        return [], []
    except OSError as exc:
        return [], [f"{journal}: {exc.strerror or exc}"]
    records, problems = [], []
    for name in names[-last:]:
        try:
            doc = json.loads(read_regular_text(journal / name, limit_bytes=RECORD_LIMIT_BYTES))
            if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
                raise ValueError(f"not a {SCHEMA} record")
        except ReadError as exc:
            problems.append(printable(exc.message, 300))
            continue
        except (ValueError, RecursionError) as exc:
            problems.append(f"{journal / name}: {printable(str(exc), 200)}")
            continue
        records.append(doc)
    return records, problems


def counters(records: list[Mapping[str, Any]]) -> dict[tuple[str, str, str], int]:
    """(replica, action, outcome) -> count, for rocmseat_remediations_total."""
    out: dict[tuple[str, str, str], int] = {}
    for r in records:
        key = (str(r.get("replica")), str(r.get("action")), str(r.get("outcome")))
        out[key] = out.get(key, 0) + 1
    return out
