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

`<state dir>/preflight/error-readings.json` (`rocmseat.error-readings/v1`): the sysfs root, the
boot id, and per device a list of {first, last, counters}: the counts (nonzero ones only) seen
unchanged from `first` to `last`. Bounded: entries older than MAX_KEEP_S go (but the newest of
them, the base of the longest window), and a device keeps at most MAX_ENTRIES (thinned in the
middle, which only moves a base earlier: a longer window, never a shorter one). Written
atomically under an exclusive lock; read back through read_trusted_state (it decides a verdict:
a file a group or others could write, or reached through a link, is refused).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.atomic import atomic_write_text, exclusive_lock
from rocmseat.errors import ReadError, RocmseatError
from rocmseat.jsonio import dumps
from rocmseat.safeio import UntrustedState, read_trusted_state
from rocmseat.statedir import StateDir

SCHEMA = "rocmseat.error-readings/v1"
DEFAULT_WINDOW_S = 24 * 3600
MAX_WINDOW_S = 7 * 24 * 3600  # the longest window a profile may ask
MAX_KEEP_S = MAX_WINDOW_S
MAX_ENTRIES = 512
# With nothing counted since a device's last reading, the file is rewritten (and fsynced) only to
# move that reading's `last` on, at most this often: a base's `last` only words the window's
# start ("since ..."), and an older one words a longer window, never a shorter one.
REFRESH_S = 3600
MAX_DEVICES = 4096
LIMIT_BYTES = 16 << 20
LOCK_TIMEOUT_S = 10.0
_U64_MAX = (1 << 64) - 1
_KEY_RE = re.compile(r"^[A-Za-z0-9_.\[\] -]{1,100}$")
_STAMP_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_ADDRESS_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

Counters = dict[str, int]


@dataclass(frozen=True, slots=True)
class Entry:
    first: str  # UTC stamps, "YYYY-MM-DDTHH:MM:SSZ"
    last: str
    counters: Counters  # nonzero counts only (absent = 0)


@dataclass(frozen=True, slots=True)
class Ring:
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
def parse_ring(text: str) -> Ring:
    """Pure: the file's text -> its ring; ValueError naming what is wrong."""
    data = json.loads(text, parse_constant=_refuse_constant)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} file")
    root, boot_id, devices = data.get("sysfs_root"), data.get("boot_id"), data.get("devices")
    if not isinstance(root, str) or len(root) > 4096:
        raise ValueError("bad sysfs_root")
    if boot_id is not None and (not isinstance(boot_id, str) or len(boot_id) > 64):
        raise ValueError("bad boot_id")
    if not isinstance(devices, dict) or len(devices) > MAX_DEVICES:
        raise ValueError("bad devices")
    ring: dict[str, tuple[Entry, ...]] = {}
    for address, entries in devices.items():
        if not isinstance(address, str) or not _ADDRESS_RE.fullmatch(address):
            raise ValueError(f"bad device {str(address)[:40]!r}")
        if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
            raise ValueError(f"bad readings for {address}")
        ring[address] = tuple(_entry(e, address) for e in entries)
    return Ring(root, boot_id, ring)


def _entry(raw: Any, address: str) -> Entry:
    if not isinstance(raw, dict):
        raise ValueError(f"bad reading for {address}")
    first, last, counters = raw.get("first"), raw.get("last"), raw.get("counters")
    for stamp in (first, last):
        if not isinstance(stamp, str) or not _STAMP_RE.fullmatch(stamp):
            raise ValueError(f"bad stamp in a reading for {address}")
        try:
            parse_stamp(stamp)
        except ValueError:
            raise ValueError(f"bad stamp {stamp!r} in a reading for {address}") from None
    if (
        not isinstance(counters, dict)
        or len(counters) > 512
        or not all(
            isinstance(k, str) and _KEY_RE.fullmatch(k)
            and isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _U64_MAX
            for k, v in counters.items()
        )
    ):
        raise ValueError(f"bad counters in a reading for {address}")
    assert isinstance(first, str) and isinstance(last, str)
    return Entry(first, last, dict(counters))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


@dataclass(frozen=True, slots=True)
class Loaded:
    ring: Ring | None  # None: no file, or one of another root/boot, or unusable
    problem: str | None  # a one-line problem with the file
    untrusted: bool = False  # the file could not be trusted (StrictModes): never rewrite it


def load_ring(state_dir: Path, sysfs_root: Path, boot_id: str | None) -> Loaded:
    path = state_path(state_dir)
    try:
        text = read_trusted_state(path, trusted_root=state_dir, limit_bytes=LIMIT_BYTES)
    except UntrustedState as exc:
        return Loaded(None, f"{path}: untrusted ({exc.cause})", untrusted=True)
    except ReadError as exc:
        return Loaded(None, f"{path}: {exc.cause}")
    if text is None:
        return Loaded(None, None)
    try:
        ring = parse_ring(text)
    except (ValueError, RecursionError) as exc:
        return Loaded(None, f"{path}: unusable error readings ({exc})")
    if ring.sysfs_root != root_key(sysfs_root) or ring.boot_id != boot_id:
        return Loaded(None, None)  # another tree or another boot: counters restarted
    return Loaded(ring, None)


# --- windows -----------------------------------------------------------------------------------
def window_for(entries: tuple[Entry, ...], now: str, window_s: int) -> Window:
    """The base of a window of `window_s` ending at `now` (see the module's docstring)."""
    start = parse_stamp(now) - dt.timedelta(seconds=window_s)
    base = None
    for entry in entries:
        if parse_stamp(entry.first) <= start and (
            base is None or parse_stamp(entry.first) >= parse_stamp(base.first)
        ):
            base = entry
    span = window_words(window_s)
    if base is None:
        return Window(None, f"since boot (no reading of this boot is {span} old yet)")
    since = min(parse_stamp(base.last), start)
    return Window(base.counters, f"in the last {span} (since {since:%Y-%m-%d %H:%M} UTC)")


def save_readings(
    state_dir: Path,
    sysfs_root: Path,
    boot_id: str | None,
    readings: Mapping[str, Mapping[str, int]],
    now: str,
    *,
    seen: Mapping[str, tuple[Entry, ...]] | None = None,
) -> str | None:
    """Add this run's readings to the ring; returns a one-line problem or None. `seen`: the
    ring as this run read it; with nothing new against it, nothing is written (a reading that
    another run added meanwhile is at least as new)."""
    path = state_path(state_dir)
    if seen and not _news(seen, readings, now):
        return None
    try:
        with exclusive_lock(path.with_suffix(".lock"), timeout_s=LOCK_TIMEOUT_S):
            loaded = load_ring(state_dir, sysfs_root, boot_id)
            if loaded.untrusted:
                return loaded.problem
            devices = dict(loaded.ring.devices) if loaded.ring is not None else {}
            if loaded.ring is not None and not _news(devices, readings, now):
                return None
            for address, counters in readings.items():
                devices[address] = _add(devices.get(address, ()), counters, now)
            devices = _bounded(devices)
            doc = {
                "schema": SCHEMA,
                "sysfs_root": root_key(sysfs_root),
                "boot_id": boot_id,
                "devices": {
                    address: [
                        {"first": e.first, "last": e.last, "counters": e.counters}
                        for e in entries
                    ]
                    for address, entries in sorted(devices.items())
                },
            }
            atomic_write_text(path, dumps(doc, indent=None) + "\n")
    except (FileExistsError, NotADirectoryError):
        return f"{path}: cannot save the error readings (a file stands where a directory should be)"
    except (OSError, RocmseatError) as exc:
        return f"{path}: cannot save the error readings ({getattr(exc, 'strerror', None) or exc})"
    return None


def _news(
    devices: Mapping[str, tuple[Entry, ...]], readings: Mapping[str, Mapping[str, int]], now: str
) -> bool:
    """Whether this run's readings change the ring: a device unseen, a count that moved, or a
    last reading older than REFRESH_S."""
    horizon = parse_stamp(now) - dt.timedelta(seconds=REFRESH_S)
    for address, counters in readings.items():
        entries = devices.get(address)
        if not entries or entries[-1].counters != {k: v for k, v in counters.items() if v}:
            return True
        if parse_stamp(entries[-1].last) <= horizon:
            return True
    return False


def _add(entries: tuple[Entry, ...], counters: Mapping[str, int], now: str) -> tuple[Entry, ...]:
    nonzero = {k: v for k, v in counters.items() if v}
    now_at = parse_stamp(now)
    kept = list(entries)
    if kept and kept[-1].counters == nonzero and parse_stamp(kept[-1].first) <= now_at:
        last = kept[-1]
        kept[-1] = Entry(last.first, max(last.last, now, key=parse_stamp), last.counters)
    else:
        # a clock stepped back leaves readings "in the future": they are kept (dropping them
        # would move a later window's base later, a shorter window), in time order
        kept.append(Entry(now, now, nonzero))
        kept.sort(key=lambda e: parse_stamp(e.first))
    return _pruned(tuple(kept), now_at)


def _pruned(entries: tuple[Entry, ...], now_at: dt.datetime) -> tuple[Entry, ...]:
    """Drop what no window can use: entries older than the newest one at or before
    now - MAX_KEEP_S (the base of the longest window); then thin the middle to MAX_ENTRIES."""
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
