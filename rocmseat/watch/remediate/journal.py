"""The record of remediation: `<state dir>/remediation/<seat>/` (docs/remediate.md).

    state.json                 the ladder's state (rocmseat.remediation-state/v1): what each
                               replica is doing, the actions taken in the last day, the halts
    journal/<stamp>-<n>.json   one file per step (rocmseat.remediation/v1): what, why, when,
                               the verification figures, the outcome
    .lock                      flock: the watcher and `rocmseat remediate reset` take turns
    .action.lock               flock: held around each restart (the worker's, reset's)
    .judge.lock                flock: held by the one watcher that judges the seat

Every file here is made, read, written and locked through the state dir's door
(rocmseat.statedir.StateDir; the documents are declared in rocmseat.watch.remediate.documents).
The state decides actions, so it is read back as every state file is (no link, owned by root or
the reader, not writable by group or others, capped); a state file that fails that, or is not
one this module wrote, is a StateUnusable and nothing acts on it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat import exitcodes
from rocmseat.atomic import WriteRefused
from rocmseat.errors import ReadError, RocmseatError
from rocmseat.redact import redact_output, redact_text
from rocmseat.safeio import misplaced
from rocmseat.statedir import (
    ACTION_LOCK,
    JOURNAL_RECORD,
    JUDGE_LOCK,
    REMEDIATION_DIR,
    REMEDIATION_JOURNAL,
    REMEDIATION_LOCK,
    REMEDIATION_ROOT,
    StateDir,
)
from rocmseat.text import printable
from rocmseat.watch.alerts import iso
from rocmseat.watch.remediate.documents import (
    RECORD_DOC,
    SCHEMA,
    STATE_DOC,
    DocumentError,
    state_of,
)
from rocmseat.watch.remediate.mode import Mode
from rocmseat.watch.remediate.policy import State, StepRecord, state_json

DIR_MODE = 0o700
STAMP_FORMAT = "%Y%m%dT%H%M%S.%fZ"
KEEP_PER_REPLICA = 100  # journal records kept per replica (prune), beside the current ladder's
KEEP_AGE_S = 30 * 86_400.0  # and none older than this
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
    """The seat's remediation dirs, made when missing: each a real directory of ours (a file,
    FIFO, socket or link at one of their names is one StateUnusable line, never a traceback)."""
    from rocmseat.statedir import check_owned_dir

    names = StateDir(state_dir)
    for template in (REMEDIATION_ROOT, REMEDIATION_DIR, REMEDIATION_JOURNAL):
        path = names.path(template, seat=seat)
        try:
            check_owned_dir(path, what="remediation dir")
            # made as every state dir is (never group- or other-writable, whatever the
            # umask), then 0700: the journal holds the seat's argv and alerts
            names.make_dir(template, mode=DIR_MODE, seat=seat)
            check_owned_dir(path, what="remediation dir")
            if not path.is_dir() or path.is_symlink():
                raise NotADirectoryError(20, "not a directory")
        except (OSError, WriteRefused) as exc:
            why = exc.strerror if isinstance(exc, OSError) else exc.message
            raise StateUnusable(f"{path}: {_shape(path) or why or exc}",
                                hint="move it away; rocmseat makes its own directory there")\
                from None
    return names.remediation(seat)


def check_shapes(state_dir: Path, seat: str) -> None:
    """Read only: StateUnusable when one of the seat's remediation dirs is something else."""
    names = StateDir(state_dir)
    for path in (names.remediation_root, names.remediation(seat),
                 names.remediation_journal(seat)):
        if (shape := _shape(path)) is not None:
            raise StateUnusable(f"{path}: {shape}", hint="move it away; rocmseat makes its own "
                                "directory there")


def _shape(path: Path) -> str | None:
    """What stands at `path` when it is not a directory (None: nothing, or a directory)."""
    try:
        return misplaced(os.lstat(path).st_mode)
    except OSError:
        return None


@contextlib.contextmanager
def locked(state_dir: Path, seat: str, timeout_s: float = 60.0) -> Iterator[Path]:
    directory = _prepare(state_dir, seat)
    with StateDir(state_dir).lock(REMEDIATION_LOCK, timeout_s=timeout_s, seat=seat):
        yield directory


@contextlib.contextmanager
def acting(state_dir: Path, seat: str, timeout_s: float) -> Iterator[None]:
    """Held by whoever restarts a replica of the seat (the watcher's worker, `remediate
    reset`): a reset waits for the worker's restart in flight, never lands under it."""
    _prepare(state_dir, seat)
    with StateDir(state_dir).lock(ACTION_LOCK, timeout_s=timeout_s, seat=seat):
        yield


def try_judge(state_dir: Path, seat: str) -> int | None:
    """The judge's lock of the seat (held for a watcher's life; the kernel drops it when the
    process dies): the descriptor when this watcher got it, None when another watcher holds
    it. Only the holder decides and counts verification drafts: two watchers on one seat
    would count each draft twice."""
    _prepare(state_dir, seat)
    state = StateDir(state_dir)
    path = state.remediation_judge_lock(seat)
    try:
        return state.hold(JUDGE_LOCK, seat=seat)
    except OSError as exc:
        raise StateUnusable(f"{path}: {_shape(path) or exc.strerror or exc}") from None
    except WriteRefused:
        raise StateUnusable(f"{path}: not a lock file") from None


def load_state(state_dir: Path, seat: str) -> tuple[State, Meta]:
    """The state (empty when there is none yet); StateUnusable when it cannot be trusted."""
    path = StateDir(state_dir).remediation_state(seat)
    try:
        doc = StateDir(state_dir).read(STATE_DOC, seat=seat)
        if doc is None:
            return State(), Meta(seat)
        if doc.seat != seat:
            raise DocumentError(f"the state of seat {doc.seat!r}")
        state = state_of(doc)
    except ReadError as exc:
        raise StateUnusable(f"remediation state: {printable(exc.message, 300)}",
                            hint="look at who wrote it; `rocmseat remediate status` says what it "
                            "held") from None
    except (DocumentError, RecursionError) as exc:
        raise StateUnusable(f"{path}: not a remediation state: {printable(str(exc), 300)}",
                            hint="move it away; remediation starts afresh (rocmseat acts on "
                            "nothing of this seat until then)") from None
    return state, Meta(seat, doc.seat_file, doc.node, doc.mode)


def save_state(state_dir: Path, meta: Meta, state: State, now_s: float) -> None:
    _prepare(state_dir, meta.seat)
    StateDir(state_dir).write(STATE_DOC, {
        "seat": meta.seat, "seat_file": meta.seat_file, "node": meta.node, "mode": meta.mode,
        "written_at": iso(now_s), **state_json(state),
    }, seat=meta.seat)


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
    """One journal file, named `<UTC stamp>-<replica>-<pid>-<n>.json` (the replica in the name:
    `prune` keeps each replica's last records without opening a file)."""
    _prepare(state_dir, meta.seat)
    stamp = dt.datetime.fromtimestamp(record.time_s, dt.UTC).strftime(STAMP_FORMAT)
    replica = record.replica if record.replica != "*" else "all"
    # the sequence zero-padded: names sort as written within a stamp ("-10" sorted before "-9"
    # and a reset's two records read back swapped once the count passed 9)
    entry = f"{stamp}-{replica}-{os.getpid()}-{next(_SEQ):012d}.json"
    return StateDir(state_dir).write(RECORD_DOC, record_json(meta, record), seat=meta.seat,
                                     entry=entry)


def _name_facts(name: str) -> tuple[float | None, str | None]:
    """(time, replica) of a journal file name; None for a part it does not hold."""
    stamp, _, rest = name.removesuffix(".json").partition("-")
    try:
        when = dt.datetime.strptime(stamp, STAMP_FORMAT).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None, None
    parts = rest.rsplit("-", 2)
    return when, (parts[0] if len(parts) == 3 else None)


def prune(state_dir: Path, seat: str, state: State, now_s: float, *,
          keep: int = KEEP_PER_REPLICA, max_age_s: float = KEEP_AGE_S) -> int:
    """Remove journal records older than `max_age_s` and beyond the last `keep` of each
    replica, never one of a ladder still running (a pending step, a replica off its drafter:
    every record since its ladder began stays). Returns how many went."""
    door = StateDir(state_dir)
    try:
        names = door.names(REMEDIATION_JOURNAL, suffix=".json", seat=seat) or []
    except (OSError, ReadError):  # nothing pruned; the dir's next write says what is wrong
        return 0
    current = {name: lad.ladder_started_s for name, lad in state.ladders.items()
               if lad.ladder_started_s is not None
               and (lad.pending is not None or lad.mode != Mode.DRAFTER)}
    seen: dict[str | None, int] = {}
    removed = 0
    for name in reversed(names):  # newest first
        when, replica = _name_facts(name)
        seen[replica] = seen.get(replica, 0) + 1
        began = current.get(replica or "")
        if began is not None and when is not None and when >= began - 1.0:
            continue
        old = when is None or now_s - when > max_age_s
        if old or seen[replica] > keep:
            removed += door.remove(JOURNAL_RECORD, seat=seat, entry=name)
    return removed


def token(value: object) -> str:
    """A value inside a key=value log line: redacted, control characters escaped, no spaces,
    "-" for none. Redacted before its spaces become `_` (after, a URL with a spaced password
    or a `--api-key VALUE` is no longer one to the redactor)."""
    text = "" if value is None else printable(redact_output(str(value)), 400)
    return "_".join(text.split()) or "-"


def journal_line(meta: Meta, record: StepRecord) -> str:
    """One journald-friendly line per step: key=value, each value a `token`."""
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
    """The newest `last` journal records, oldest first, each checked by the record model
    (rocmseat.watch.remediate.documents.RecordDoc), and one line per file not read."""
    journal = StateDir(state_dir).remediation_journal(seat)
    check_shapes(state_dir, seat)
    try:
        names = StateDir(state_dir).names(REMEDIATION_JOURNAL, suffix=".json", seat=seat) or []
    except OSError as exc:
        return [], [f"{journal}: {exc.strerror or exc}"]
    except ReadError as exc:  # a link on the way (UntrustedState)
        return [], [printable(exc.message, 300)]
    records, problems = [], []
    for name in names[-last:]:
        try:
            doc = StateDir(state_dir).read(RECORD_DOC, seat=seat, entry=name)
        except ReadError as exc:
            problems.append(printable(exc.message, 300))
            continue
        except (DocumentError, RecursionError) as exc:
            problems.append(f"{journal / name}: {printable(str(exc), 300)}")
            continue
        if doc is None:  # pruned meanwhile (by another watcher)
            continue
        out = doc.model_dump(by_alias=True)
        out["why"] = doc.why.model_dump(exclude_none=True)
        out["figures"] = doc.figures.model_dump(exclude_none=True)
        records.append(out)
    return records, problems
