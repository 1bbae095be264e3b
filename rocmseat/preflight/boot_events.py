"""The kernel events seen this boot, kept in the state dir
(`<state dir>/preflight/boot-events.json`, `rocmseat.boot-events/v1`), so a wrap of the printk
ring forgets none (docs/preflight.md, "Kernel events").

The printk ring keeps the newest records only: a GPU reset read by the 10:00 run may be gone by
11:00 (the ring wrapped: /dev/kmsg opens at the oldest record left, its sequence number past the
reset's; Documentation/ABI/testing/dev-kmsg). Sequence numbers count from 0 each boot and never
repeat within it (kernel/printk/printk_ringbuffer.c), so a record is named by (boot id, seq):

- each run of the node's own log (its /dev/kmsg or `$ROCMSEAT_KMSG`, never a `--kernel-log`
  file) with a known boot id (rocmseat.sysfs.host) merges what it read with what earlier runs
  of this boot kept: a kept event whose sequence number is below the first one read now is no
  longer in the ring, and still counts (`Tally.kept`); an event still in the ring is counted
  once;
- records of this boot no run ever read (a ring that wrapped before the first run, or between
  two runs, or overran the reader) are counted and kept too, so every later run of the boot
  says so (`events.lost`), and `slurm health` never resumes a node drained for `events` on such
  a verdict (rocmseat.fleet.slurm);
- another boot's file, or another sysfs root's, is replaced; a file that cannot be trusted
  (rocmseat.statedir: StrictModes) is never used nor rewritten: on a ring that has lost records
  that is `unknown` (events seen earlier may be forgotten), else a warning.

`merge` is pure; `remember` reads, merges and writes under the file's lock, through the state
dir's door (rocmseat.statedir.StateDir). The document is modelled without pydantic, like the
error readings (rocmseat.preflight.readings_doc: every preflight run reads it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.atomic import LockTimeout
from rocmseat.errors import ReadError, RocmseatError
from rocmseat.findings import NODE, Finding
from rocmseat.located import DocumentInvalid, kind_of, load_json
from rocmseat.preflight.events import KEEP_SEQS, KernelEvents, Tally
from rocmseat.preflight.windows import root_key
from rocmseat.safeio import UntrustedState
from rocmseat.statedir import BOOT_EVENTS, BOOT_EVENTS_LOCK, Document, StateDir
from rocmseat.text import CONTROL_CHARS

SCHEMA = "rocmseat.boot-events/v1"
LIMIT_BYTES = 4 << 20
LOCK_TIMEOUT_S = 10.0
MAX_TALLIES = 1024
MAX_RANGES = 32
MAX_SEQ = (1 << 64) - 1
MAX_BOOT_S = 1e10
_TOP_KEYS = {"schema", "sysfs_root", "boot_id", "last_seq", "unseen", "unseen_ranges",
             "tallies"}
_TALLY_KEYS = {"subject", "class", "count", "first_s", "last_s", "sample", "rings",
               "processes", "details", "seqs"}
_LISTS = ("rings", "processes", "details")


@dataclass(frozen=True, slots=True)
class KeptTally:
    subject: str
    event_class: str
    count: int
    first_s: float | None
    last_s: float | None
    sample: str
    rings: tuple[str, ...]
    processes: tuple[str, ...]
    details: tuple[str, ...]
    seqs: tuple[int, ...]  # the newest KEEP_SEQS sequence numbers, oldest first


@dataclass(frozen=True, slots=True)
class BootEventsDoc:
    sysfs_root: str
    boot_id: str
    last_seq: int  # the highest sequence number any run of this boot read
    unseen: int  # records of this boot no run read
    unseen_ranges: tuple[tuple[int, int], ...]  # the first MAX_RANGES of them, by number
    tallies: tuple[KeptTally, ...]


# --- the document -------------------------------------------------------------------------------
class _Refused(Exception):
    def __init__(self, loc: tuple[str | int, ...], why: str) -> None:
        super().__init__(why)
        self.loc, self.why = loc, why


def _object(value: Any, loc: tuple[str | int, ...], keys: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Refused(loc, f"expected an object, not {kind_of(value)}")
    extra = sorted(set(value) - keys)
    if extra:
        raise _Refused((*loc, extra[0]), "unknown key")
    missing = sorted(keys - set(value))
    if missing:
        raise _Refused((*loc, missing[0]), "missing")
    return value


def _int(value: Any, loc: tuple[str | int, ...]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQ:
        raise _Refused(loc, f"expected a whole number from 0 to {MAX_SEQ}, not "
                       f"{kind_of(value)}")
    return value


def _text(value: Any, loc: tuple[str | int, ...], limit: int) -> str:
    if not isinstance(value, str) or len(value) > limit:
        raise _Refused(loc, f"expected a string of at most {limit} characters")
    if CONTROL_CHARS.search(value):
        raise _Refused(loc, "control character in the value")
    return value


def _seconds(value: Any, loc: tuple[str | int, ...]) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not 0 <= value < MAX_BOOT_S:  # NaN fails this too
        raise _Refused(loc, "expected seconds since boot")
    return float(value)


def _list(value: Any, loc: tuple[str | int, ...], limit: int) -> list[Any]:
    if not isinstance(value, list) or len(value) > limit:
        raise _Refused(loc, f"expected a list of at most {limit} items")
    return value


def _tally(value: Any, loc: tuple[str | int, ...]) -> KeptTally:
    raw = _object(value, loc, _TALLY_KEYS)
    lists = {key: tuple(_text(v, (*loc, key, i), 80)
                        for i, v in enumerate(_list(raw[key], (*loc, key), 8))) for key in _LISTS}
    seqs = tuple(_int(v, (*loc, "seqs", i))
                 for i, v in enumerate(_list(raw["seqs"], (*loc, "seqs"), KEEP_SEQS)))
    if list(seqs) != sorted(set(seqs)):
        raise _Refused((*loc, "seqs"), "not in increasing order")
    count = _int(raw["count"], (*loc, "count"))
    if count < len(seqs):
        raise _Refused((*loc, "count"), "fewer than the sequence numbers listed")
    return KeptTally(_text(raw["subject"], (*loc, "subject"), 64),
                     _text(raw["class"], (*loc, "class"), 64), count,
                     _seconds(raw["first_s"], (*loc, "first_s")),
                     _seconds(raw["last_s"], (*loc, "last_s")),
                     _text(raw["sample"], (*loc, "sample"), 400),
                     lists["rings"], lists["processes"], lists["details"], seqs)


def _range(value: Any, loc: tuple[str | int, ...]) -> tuple[int, int]:
    pair = _list(value, loc, 2)
    if len(pair) != 2:
        raise _Refused(loc, "expected [first, last]")
    low, high = _int(pair[0], (*loc, 0)), _int(pair[1], (*loc, 1))
    if low > high:
        raise _Refused(loc, "first above last")
    return low, high


def _doc(value: Any) -> BootEventsDoc:
    raw = _object(value, (), _TOP_KEYS)
    if raw["schema"] != SCHEMA:
        raise _Refused(("schema",), f"expected '{SCHEMA}'")
    return BootEventsDoc(
        _text(raw["sysfs_root"], ("sysfs_root",), 4096), _text(raw["boot_id"], ("boot_id",), 64),
        _int(raw["last_seq"], ("last_seq",)), _int(raw["unseen"], ("unseen",)),
        tuple(_range(v, ("unseen_ranges", i))
              for i, v in enumerate(_list(raw["unseen_ranges"], ("unseen_ranges",), MAX_RANGES))),
        tuple(_tally(v, ("tallies", i))
              for i, v in enumerate(_list(raw["tallies"], ("tallies",), MAX_TALLIES))),
    )


def parse_boot_events(text: str, shown: str) -> BootEventsDoc:
    """The file's text as the model; DocumentInvalid (one line naming `shown` and the key)."""
    value = load_json(text, shown)
    try:
        return _doc(value)
    except _Refused as exc:
        raise DocumentInvalid(shown, exc.loc, exc.why) from None
    except RecursionError:
        raise DocumentInvalid(shown, (), "nested too deeply") from None


BOOT_EVENTS_DOC = Document(BOOT_EVENTS, SCHEMA, parse_boot_events, limit_bytes=LIMIT_BYTES,
                           indent=None)


# --- the merge (pure) ---------------------------------------------------------------------------
def _unseen_now(events: KernelEvents, above: int) -> tuple[int, list[tuple[int, int]]]:
    """The records this read did not see whose numbers are above `above` (the highest an
    earlier run read): below the first record read, and the gaps while reading."""
    span = events.span
    assert span is not None and span.first is not None
    ranges = ([(0, span.first - 1)] if span.first > 0 else []) + list(span.gaps)
    clipped = [(max(low, above + 1), high) for low, high in ranges if high > above]
    named = sum(high - low + 1 for low, high in span.gaps)
    count = sum(high - low + 1 for low, high in clipped)
    if span.last is not None and span.last > above:
        count += span.missed - named  # gaps beyond the ones named (a long flood)
    return count, clipped


def _from_kept(kept: KeptTally, lost: int) -> Tally:
    return Tally(count=lost, first_s=kept.first_s, last_s=kept.last_s, sample=kept.sample,
                 rings=list(kept.rings), processes=list(kept.processes),
                 details=list(kept.details), seqs=list(kept.seqs), kept=lost)


def _merge_tally(now: Tally | None, kept: KeptTally, first_seq: int) -> Tally:
    """One (subject, class): the kept events no longer in the ring (numbers below the first
    read now) added to what this read counted; never fewer than were kept (a count within a
    boot only grows)."""
    gone = [s for s in kept.seqs if s < first_seq]
    older = kept.count - len(kept.seqs)  # beyond the numbers kept: all below kept.seqs[0]
    lost = len(gone) + (older if not kept.seqs or kept.seqs[0] < first_seq else 0)
    if now is None:
        return _from_kept(kept, max(lost, kept.count))
    count = max(kept.count, now.count + lost)
    times = [t for t in (now.first_s, kept.first_s) if t is not None]
    lasts = [t for t in (now.last_s, kept.last_s) if t is not None]
    seqs = sorted(set(gone) | set(now.seqs))[-KEEP_SEQS:]
    return dataclasses.replace(now, count=count, kept=count - now.count,
                               first_s=min(times) if times else None,
                               last_s=max(lasts) if lasts else None, seqs=seqs)


def merge(kept: BootEventsDoc | None, events: KernelEvents, *, sysfs_root: str,
          boot_id: str) -> tuple[KernelEvents, dict[str, Any]]:
    """This read with what earlier runs of the boot kept (None: nothing usable), and the
    document to keep now. Pure. `events.span` must be known (the log had kmsg records)."""
    span = events.span
    assert span is not None and span.first is not None and span.last is not None
    same = kept is not None and kept.boot_id == boot_id and kept.sysfs_root == sysfs_root
    prev = kept if same else None
    above = prev.last_seq if prev is not None else -1
    count, ranges = _unseen_now(events, above)
    unseen = (prev.unseen if prev is not None else 0) + count
    all_ranges = [*(prev.unseen_ranges if prev is not None else ()), *ranges][:MAX_RANGES]
    tallies: dict[tuple[str, str], Tally] = dict(events.tallies)
    for old in prev.tallies if prev is not None else ():
        key = (old.subject, old.event_class)
        tallies[key] = _merge_tally(tallies.get(key), old, span.first)
    merged = dataclasses.replace(events, tallies=tallies, lost_before_first=unseen,
                                 lost_during=0)
    doc = {
        "sysfs_root": sysfs_root, "boot_id": boot_id,
        "last_seq": max(above, span.last), "unseen": unseen,
        "unseen_ranges": [list(r) for r in all_ranges],
        "tallies": [_tally_doc(key, tally) for key, tally in sorted(tallies.items())
                    ][:MAX_TALLIES],
    }
    return merged, doc


def _tally_doc(key: tuple[str, str], tally: Tally) -> dict[str, Any]:
    return {"subject": key[0][:64], "class": key[1][:64], "count": tally.count,
            "first_s": tally.first_s, "last_s": tally.last_s, "sample": tally.sample[:400],
            "rings": tally.rings[:8], "processes": tally.processes[:8],
            "details": tally.details[:8], "seqs": sorted(set(tally.seqs))[-KEEP_SEQS:]}


# --- the door -----------------------------------------------------------------------------------
def remember(state_dir: Path, sysfs_root: Path, boot_id: str,
             events: KernelEvents) -> tuple[KernelEvents, list[Finding]]:
    """This read merged with what this boot's earlier runs kept, and the merge kept in turn;
    the findings say what could not be kept or used. A log without kmsg sequence numbers
    (a dmesg or journalctl text) has nothing to name records by: returned as it is."""
    if events.span is None:
        return events, []
    state = StateDir(state_dir)
    shown = state.path(BOOT_EVENTS_DOC)
    key = root_key(sysfs_root)
    try:
        with state.lock(BOOT_EVENTS_LOCK, timeout_s=LOCK_TIMEOUT_S):
            try:
                kept = state.read(BOOT_EVENTS_DOC)
            except UntrustedState as exc:
                return events, [_unusable(events, f"{shown}: untrusted ({exc.cause})")]
            except (ReadError, DocumentInvalid) as exc:
                problem: str | None = f"{shown}: {getattr(exc, 'detail', None) or exc}"
                kept = None
            else:
                problem = None
            merged, doc = merge(kept, events, sysfs_root=key, boot_id=boot_id)
            state.write(BOOT_EVENTS_DOC, doc)
    except LockTimeout as exc:
        return events, [_unusable(events, str(exc))]
    except (OSError, RocmseatError) as exc:
        return events, [NODE.warn(
            "events.memory", f"cannot keep this boot's kernel events in {shown} "
            f"({getattr(exc, 'strerror', None) or exc}): a wrap of the kernel's ring will "
            "forget them", "pass --state-dir to a writable directory")]
    findings = [_unusable(merged, problem)] if problem else []
    return merged, findings


def _unusable(events: KernelEvents, problem: str) -> Finding:
    """The kept events could not be used: unknown when the ring has lost records (what was
    kept may be all that is left of them), a warning otherwise (the ring holds the boot)."""
    span = events.span
    wrapped = span is not None and span.first is not None and span.first > 0
    message = (f"cannot use the kernel events kept this boot ({problem})"
               + ("; the ring has dropped records since boot, so events read earlier may be "
                  "forgotten" if wrapped else ""))
    hint = "the state dir and its files must be owned by root or this user and writable by no "\
           "one else; remove a damaged file"
    return NODE.unknown("events.memory", message, hint) if wrapped else NODE.warn(
        "events.memory", message, hint)

