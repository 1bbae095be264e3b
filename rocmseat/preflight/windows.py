"""Error windows that no look can shorten: timestamped readings of every counter, per device.

AER counters, amdgpu's replay count, gpu_metrics' PCIe counters and the RAS counts only grow
(drivers/pci/pcie/aer.c; amdgpu_ras.c accumulates), so a count means nothing without a window.
The window is fixed in time, never "since the last run": every run that reads the counters
(the timer's full run, a replica's `--pair` ExecStartPre, a person's `--only aer`) adds its
reading to one ring per device, and every run judges growth over the same span, the last 24 h by
default (a profile's `window_h`), so a look by hand never clears what the timer found
(docs/preflight.md, "Error windows").

The base of a window starting at S is the newest reading first taken at or before S: its counts
are a lower bound of the counts at S, so the growth judged is never less than the growth since S
(it may include errors seen just before S, never hide one inside it). With no reading that old
yet in this boot, the window is "since boot" (every count this boot has).

Windows run on the boot clock. Each reading is stamped with the wall clock (`first`, `last`: what
a person reads) and, beside it, the seconds since boot (`first_boot_s`, `last_boot_s`:
CLOCK_BOOTTIME, `<proc>/uptime`, rocmseat.sysfs.host.read_uptime_s). All readings of a ring are of
one boot (a ring of another boot id is dropped), so within it the boot clock orders them and
measures the window: a wall clock a month slow at boot (a CMOS reset) and stepped by NTP later
moves nothing, and the boot's first reading can never look "older than the window". Without a
proc root (a fixture tree, no boot of its own) the wall clock measures, as before. A reading
taken while a source could not be read (a GPU reset answering EPERM, a RAS count file
inaccessible) records that source under `unknown`: its counts are missing, not zero, so that
reading is never a window's base (an older one is, or "since boot"): a gap never charges old
errors to the window.

`<state dir>/preflight/error-readings.json` (`rocmseat.error-readings/v1`): the sysfs root, the
boot id, and per device a list of {first, last, counters} (plus first_boot_s, last_boot_s and
unknown when known: fields a reader of the v1 file may ignore): the counts (nonzero ones only)
seen unchanged from `first` to `last`. Bounded: entries older than MAX_KEEP_S go (but the newest of
them, the base of the longest window), and a device keeps at most MAX_ENTRIES (thinned in the
middle, which only moves a base earlier: a longer window, never a shorter one). Written
atomically under an exclusive lock; read back through read_trusted_state (it decides a verdict:
a file a group or others could write, or reached through a link, is refused).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.errors import ReadError, RocmseatError
from rocmseat.located import DocumentInvalid
from rocmseat.preflight.readings_doc import (
    MAX_BOOT_S,
    MAX_DEVICES,
    MAX_ENTRIES,
    READINGS_DOC,
    SCHEMA,
    ReadingsDoc,
)
from rocmseat.safeio import UntrustedState
from rocmseat.statedir import READINGS_LOCK, StateDir

__all__ = ["MAX_BOOT_S", "MAX_DEVICES", "MAX_ENTRIES", "SCHEMA"]  # the document's bounds
DEFAULT_WINDOW_S = 24 * 3600
MAX_WINDOW_S = 7 * 24 * 3600  # the longest window a profile may ask
MAX_KEEP_S = MAX_WINDOW_S
# With nothing counted since a device's last reading, the file is rewritten (and fsynced) only to
# move that reading's `last` on, at most this often: a base's `last` only words the window's
# start ("since ..."), and an older one words a longer window, never a shorter one.
REFRESH_S = 3600
LOCK_TIMEOUT_S = 10.0
_STAMP_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")

Counters = dict[str, int]


@dataclass(frozen=True, slots=True)
class Entry:
    """One reading of a device's error counters (or a run of equal ones)."""

    first: str  # UTC stamps, "YYYY-MM-DDTHH:MM:SSZ"
    last: str
    counters: Counters  # nonzero counts only (absent = 0)
    first_boot_s: float | None = None  # seconds since boot (CLOCK_BOOTTIME); None: not known
    last_boot_s: float | None = None
    unknown: tuple[str, ...] = ()  # sources unreadable in this reading: never a base


@dataclass(frozen=True, slots=True)
class Stamp:
    """When a reading is taken: the wall clock, and the boot clock when the proc root gives it."""

    wall: str
    boot_s: float | None = None


@dataclass(frozen=True, slots=True)
class Ring:
    """The readings kept for a sysfs root in one boot, per device, oldest first."""

    sysfs_root: str
    boot_id: str | None
    devices: dict[str, tuple[Entry, ...]]


@dataclass(frozen=True, slots=True)
class Window:
    """The base of one device's window and how to say it."""

    base: Counters | None  # None: since boot
    phrase: str  # "in the last 24 h (since 2026-12-01 05:12 UTC)", "since boot (...)"


def state_path(state_dir: Path) -> Path:
    return StateDir(state_dir).readings


def parse_stamp(stamp: str) -> dt.datetime:
    """A stamp "YYYY-MM-DDTHH:MM:SSZ" (UTC) -> an aware datetime; ValueError otherwise.
    fromisoformat (C) rather than strptime: a run parses every kept reading's stamps."""
    if not _STAMP_RE.fullmatch(stamp):
        raise ValueError(f"not a UTC stamp: {stamp[:40]!r}")
    return dt.datetime.fromisoformat(stamp[:-1]).replace(tzinfo=dt.UTC)


def window_words(window_s: int) -> str:
    hours = window_s / 3600
    return f"{hours:g} h" if hours < 48 or hours % 24 else f"{hours / 24:g} d"


def root_key(sysfs_root: Path) -> str:
    try:
        return str(sysfs_root.resolve())
    except (OSError, RuntimeError):
        return str(sysfs_root)


# --- the file ----------------------------------------------------------------------------------
def parse_ring(text: str, shown: str) -> Ring:
    """Pure: the file's text -> its ring; DocumentInvalid naming `shown` and the wrong key (the
    strict model of rocmseat.preflight.readings_doc)."""
    return _ring(READINGS_DOC.parse(text, shown))


def _ring(doc: ReadingsDoc) -> Ring:
    devices = {address: tuple(Entry(e.first, e.last, dict(e.counters), e.first_boot_s,
                                    e.last_boot_s, e.unknown) for e in entries)
               for address, entries in doc.devices.items()}
    return Ring(doc.sysfs_root, doc.boot_id, devices)


@dataclass(frozen=True, slots=True)
class Loaded:
    """The ring as read back, or why there is none."""

    ring: Ring | None  # None: no file, or one of another root/boot, or unusable
    problem: str | None  # a one-line problem with the file
    untrusted: bool = False  # the file could not be trusted (StrictModes): never rewrite it


def load_ring(state_dir: Path, sysfs_root: Path, boot_id: str | None) -> Loaded:
    path = state_path(state_dir)
    try:
        doc = StateDir(state_dir).read(READINGS_DOC)
    except UntrustedState as exc:
        return Loaded(None, f"{path}: untrusted ({exc.cause})", untrusted=True)
    except ReadError as exc:
        return Loaded(None, f"{path}: {exc.cause}")
    except DocumentInvalid as exc:
        return Loaded(None, f"{path}: unusable error readings ({exc.detail})")
    if doc is None:
        return Loaded(None, None)
    ring = _ring(doc)
    if ring.sysfs_root != root_key(sysfs_root) or ring.boot_id != boot_id:
        return Loaded(None, None)  # another tree or another boot: counters restarted
    return Loaded(ring, None)


# --- windows -----------------------------------------------------------------------------------
def window_for(
    entries: tuple[Entry, ...], now: str | Stamp, window_s: int
) -> Window:
    """The base of a window of `window_s` ending at `now` (see the module's docstring): on the
    boot clock when `now` carries it, else on the wall clock. A reading with an unknown source
    is never the base."""
    stamp = now if isinstance(now, Stamp) else Stamp(now)
    if stamp.boot_s is not None:
        return _boot_window(entries, stamp, stamp.boot_s, window_s)
    start = parse_stamp(stamp.wall) - dt.timedelta(seconds=window_s)
    base = None
    for entry in entries:
        if entry.unknown:
            continue
        if parse_stamp(entry.first) <= start and (
            base is None or parse_stamp(entry.first) >= parse_stamp(base.first)
        ):
            base = entry
    span = window_words(window_s)
    if base is None:
        return Window(None, f"since boot (no reading of this boot is {span} old yet)")
    since = min(parse_stamp(base.last), start)
    return Window(base.counters, f"in the last {span} (since {since:%Y-%m-%d %H:%M} UTC)")


def _boot_window(entries: tuple[Entry, ...], stamp: Stamp, now_boot: float,
                 window_s: int) -> Window:
    """The boot-clock window: the base is the newest reading first taken at or before
    (now - window) on the boot clock; its start is worded in the wall clock of now, so a
    stepped clock words it right too."""
    start = now_boot - window_s
    base = None
    for entry in entries:
        if entry.unknown or entry.first_boot_s is None:
            continue  # a gap, or a reading no boot clock placed: never a base
        if entry.first_boot_s <= start and (
            base is None or entry.first_boot_s >= (base.first_boot_s or 0.0)
        ):
            base = entry
    span = window_words(window_s)
    if base is None:
        return Window(None, f"since boot (no reading of this boot is {span} old yet)")
    last = base.last_boot_s if base.last_boot_s is not None else base.first_boot_s
    assert last is not None
    since = parse_stamp(stamp.wall) - dt.timedelta(seconds=now_boot - min(last, start))
    return Window(base.counters, f"in the last {span} (since {since:%Y-%m-%d %H:%M} UTC)")


def save_readings(
    state_dir: Path,
    sysfs_root: Path,
    boot_id: str | None,
    readings: Mapping[str, Mapping[str, int]],
    now: str | Stamp,
    *,
    seen: Mapping[str, tuple[Entry, ...]] | None = None,
    unknown: Mapping[str, tuple[str, ...]] | None = None,
) -> str | None:
    """Add this run's readings to the ring; returns a one-line problem or None. `seen`: the
    ring as this run read it; with nothing new against it, nothing is written (a reading that
    another run added meanwhile is at least as new). `unknown`: per device, the sources this
    reading could not read (recorded, so the reading is never a base)."""
    path = state_path(state_dir)
    stamp = now if isinstance(now, Stamp) else Stamp(now)
    gaps = unknown or {}
    if seen and not _news(seen, readings, stamp.wall, gaps):
        return None
    state = StateDir(state_dir)
    try:
        with state.lock(READINGS_LOCK, timeout_s=LOCK_TIMEOUT_S):
            loaded = load_ring(state_dir, sysfs_root, boot_id)
            if loaded.untrusted:
                return loaded.problem
            devices = dict(loaded.ring.devices) if loaded.ring is not None else {}
            if loaded.ring is not None and not _news(devices, readings, stamp.wall, gaps):
                return None
            for address, counters in readings.items():
                devices[address] = _add(devices.get(address, ()), counters, stamp,
                                        gaps.get(address, ()))
            devices = _bounded(devices)
            state.write(READINGS_DOC, {
                "sysfs_root": root_key(sysfs_root),
                "boot_id": boot_id,
                "devices": {
                    address: [_entry_doc(e) for e in entries]
                    for address, entries in sorted(devices.items())
                },
            })
    except (FileExistsError, NotADirectoryError):
        return f"{path}: cannot save the error readings (a file stands where a directory should be)"
    except (OSError, RocmseatError) as exc:
        return f"{path}: cannot save the error readings ({getattr(exc, 'strerror', None) or exc})"
    return None


def _entry_doc(entry: Entry) -> dict[str, Any]:
    """An entry as the file holds it: the v1 keys, and the boot clock and the unknown sources
    only when known (additive: a v1 reader ignores them)."""
    doc: dict[str, Any] = {"first": entry.first, "last": entry.last, "counters": entry.counters}
    if entry.first_boot_s is not None:
        doc["first_boot_s"] = round(entry.first_boot_s, 3)
    if entry.last_boot_s is not None:
        doc["last_boot_s"] = round(entry.last_boot_s, 3)
    if entry.unknown:
        doc["unknown"] = list(entry.unknown)
    return doc


def _news(
    devices: Mapping[str, tuple[Entry, ...]], readings: Mapping[str, Mapping[str, int]],
    now: str, unknown: Mapping[str, tuple[str, ...]],
) -> bool:
    """Whether this run's readings change the ring: a device unseen, a count that moved, a
    source now (un)readable, or a last reading older than REFRESH_S."""
    horizon = parse_stamp(now) - dt.timedelta(seconds=REFRESH_S)
    for address, counters in readings.items():
        entries = devices.get(address)
        if not entries or entries[-1].counters != {k: v for k, v in counters.items() if v}:
            return True
        if entries[-1].unknown != tuple(unknown.get(address, ())):
            return True
        if parse_stamp(entries[-1].last) <= horizon:
            return True
    return False


def _add(
    entries: tuple[Entry, ...], counters: Mapping[str, int], stamp: Stamp,
    unknown: tuple[str, ...] = (),
) -> tuple[Entry, ...]:
    nonzero = {k: v for k, v in counters.items() if v}
    now, boot = stamp.wall, stamp.boot_s
    now_at = parse_stamp(now)
    kept = list(entries)
    if boot is not None:
        # on the boot clock a reading no boot clock placed can never be a base: it goes
        kept = [e for e in kept if e.first_boot_s is not None]
    last = kept[-1] if kept else None
    if (
        last is not None and last.counters == nonzero and last.unknown == unknown
        and _order(last, boot is not None) <= (boot if boot is not None else now_at.timestamp())
    ):
        kept[-1] = Entry(last.first, max(last.last, now, key=parse_stamp), last.counters,
                         last.first_boot_s, boot if boot is not None else last.last_boot_s,
                         last.unknown)
    else:
        # a wall clock stepped back leaves readings "in the future": they are kept (dropping
        # them would move a later window's base later, a shorter window), in time order (the
        # boot clock's when there is one: it never steps)
        kept.append(Entry(now, now, nonzero, boot, boot, unknown))
        kept.sort(key=lambda e: _order(e, boot is not None))
    return _pruned(tuple(kept), now_at, boot)


def _order(entry: Entry, on_boot_clock: bool) -> float:
    if on_boot_clock and entry.first_boot_s is not None:
        return entry.first_boot_s
    return parse_stamp(entry.first).timestamp()


def _pruned(
    entries: tuple[Entry, ...], now_at: dt.datetime, boot: float | None = None
) -> tuple[Entry, ...]:
    """Drop what no window can use: entries older than the newest one at or before
    now - MAX_KEEP_S (the base of the longest window); then thin the middle to MAX_ENTRIES."""
    if boot is not None:
        old = [i for i, e in enumerate(entries)
               if e.first_boot_s is not None and e.first_boot_s <= boot - MAX_KEEP_S]
    else:
        cutoff = now_at - dt.timedelta(seconds=MAX_KEEP_S)
        old = [i for i, e in enumerate(entries) if parse_stamp(e.first) <= cutoff]
    kept = list(entries[old[-1]:] if old else entries)
    while len(kept) > MAX_ENTRIES:
        # every other entry of the older half goes; the first (the oldest base) and the newest
        # stay, so a window's base only ever moves earlier
        half = len(kept) // 2
        kept = [kept[0]] + [e for i, e in enumerate(kept[1:half], 1) if i % 2 == 0] + kept[half:]
    return tuple(kept)


def _bounded(devices: dict[str, tuple[Entry, ...]]) -> dict[str, tuple[Entry, ...]]:
    """At most MAX_DEVICES devices: the ones read most recently."""
    if len(devices) <= MAX_DEVICES:
        return devices
    newest = sorted(devices, key=lambda a: parse_stamp(devices[a][-1].last), reverse=True)
    return {a: devices[a] for a in newest[:MAX_DEVICES]}
