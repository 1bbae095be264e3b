"""The error readings (`<state dir>/preflight/error-readings.json`, `rocmseat.error-readings/v1`,
rocmseat.preflight.windows) as a strict model: the base every error window is judged from, so a
damaged or forged file is one located line and a window since boot (never fewer errors), never
a KeyError or a count of 1e400.

The one document of the house modelled without pydantic: every preflight run reads it, and
importing pydantic and building a model costs a run more than the whole of its start-up budget
(4x `python -c pass`, bench/bench_preflight.py; docs/architecture.md, "Documents read back").
The rules are the models' rules all the same: unknown keys refused, strict types (a bool is no
count, 3.0 is no count), counts 0..2**64-1, stamps "YYYY-MM-DDTHH:MM:SSZ" inside 2000..2200
(rocmseat.located.stamp_problem, the rule of rocmseat.docmodel.UtcStamp), strings without
control characters, every list and map bounded; the first wrong key is named through the one
located-error builder. Self-contained: a new per-reading field is one entry of `_ENTRY_KEYS` and
one line of `_entry`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rocmseat.located import DocumentInvalid, kind_of, load_json, stamp_problem
from rocmseat.statedir import READINGS, Document
from rocmseat.text import CONTROL_CHARS
from rocmseat.tomllocate import Loc

SCHEMA = "rocmseat.error-readings/v1"
MAX_ENTRIES = 512  # per device (rocmseat.preflight.windows thins the middle to keep to it)
MAX_BOOT_S = 1e10  # seconds since boot: three centuries
MAX_DEVICES = 4096
LIMIT_BYTES = 16 << 20
MAX_COUNTERS = 512
MAX_COUNT = (1 << 64) - 1
_ADDRESS = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_COUNTER = re.compile(r"[A-Za-z0-9_.\[\] -]{1,100}")
_TOP_KEYS = {"schema", "sysfs_root", "boot_id", "devices"}
_ENTRY_KEYS = {"first", "last", "counters"}
# the boot clock beside the wall clock, and the sources unreadable in that reading (optional:
# readings written before the boot clock was kept have neither)
_OPTIONAL_ENTRY_KEYS = {"first_boot_s", "last_boot_s", "unknown"}
MAX_UNKNOWN = 64


@dataclass(frozen=True, slots=True)
class EntryDoc:
    """The counts (nonzero ones only) seen unchanged from `first` to `last`."""

    first: str
    last: str
    counters: dict[str, int]
    first_boot_s: float | None = None
    last_boot_s: float | None = None
    unknown: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ReadingsDoc:
    """The error-readings file as checked: its root, its boot, each device's readings."""

    sysfs_root: str
    boot_id: str | None
    devices: dict[str, tuple[EntryDoc, ...]]


class _Refused(Exception):
    def __init__(self, loc: Loc, why: str) -> None:
        super().__init__(why)
        self.loc = loc
        self.why = why


def _object(value: Any, loc: Loc, keys: set[str], limit: int | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Refused(loc, f"expected an object, not {kind_of(value)}")
    extra = sorted(set(value) - keys) if keys else []
    if extra:
        raise _Refused((*loc, extra[0]), "unknown key")
    if limit is not None and len(value) > limit:
        raise _Refused(loc, f"more than {limit} items")
    return value


def _text(value: Any, loc: Loc, limit: int) -> str:
    if not isinstance(value, str):
        raise _Refused(loc, f"expected a string, not {kind_of(value)}")
    if len(value) > limit:
        raise _Refused(loc, f"longer than {limit} characters")
    bad = CONTROL_CHARS.search(value)
    if bad is not None:
        raise _Refused(loc, f"control character U+{ord(bad.group()):04X} in the value")
    return value


def _stamp(value: Any, loc: Loc) -> str:
    if not isinstance(value, str):
        raise _Refused(loc, f"expected a string, not {kind_of(value)}")
    why = stamp_problem(value)
    if why is not None:
        raise _Refused(loc, why)
    return value


def _count(value: Any, loc: Loc) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Refused(loc, f"expected a whole number, not {kind_of(value)}")
    if not 0 <= value <= MAX_COUNT:
        raise _Refused(loc, f"expected a count from 0 to {MAX_COUNT}")
    return value


def _boot_s(value: Any, loc: Loc) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Refused(loc, f"expected seconds since boot, not {kind_of(value)}")
    if not 0 <= value < MAX_BOOT_S:  # NaN fails this too
        raise _Refused(loc, f"expected seconds since boot from 0 to {MAX_BOOT_S:.0e}")
    return float(value)


def _unknown(value: Any, loc: Loc) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_UNKNOWN:
        raise _Refused(loc, f"expected a list of at most {MAX_UNKNOWN} counter names")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not _COUNTER.fullmatch(name):
            raise _Refused((*loc, i), "not a counter name")
    return tuple(value)


def _entry(value: Any, loc: Loc) -> EntryDoc:
    raw = _object(value, loc, _ENTRY_KEYS | _OPTIONAL_ENTRY_KEYS)
    for key in sorted(_ENTRY_KEYS - set(raw)):
        raise _Refused((*loc, key), "missing")
    counters = _object(raw["counters"], (*loc, "counters"), set(), MAX_COUNTERS)
    for name in counters:
        if not _COUNTER.fullmatch(name):
            raise _Refused((*loc, "counters", name), "not a counter name")
    return EntryDoc(_stamp(raw["first"], (*loc, "first")), _stamp(raw["last"], (*loc, "last")),
                    {n: _count(c, (*loc, "counters", n)) for n, c in counters.items()},
                    _boot_s(raw.get("first_boot_s"), (*loc, "first_boot_s")),
                    _boot_s(raw.get("last_boot_s"), (*loc, "last_boot_s")),
                    _unknown(raw.get("unknown", []), (*loc, "unknown")))


def _readings(value: Any) -> ReadingsDoc:
    raw = _object(value, (), _TOP_KEYS)
    for key in ("schema", "sysfs_root", "devices"):
        if key not in raw:
            raise _Refused((key,), "missing")
    if raw["schema"] != SCHEMA:
        raise _Refused(("schema",), f"expected '{SCHEMA}'")
    boot_id = raw.get("boot_id")
    devices = _object(raw["devices"], ("devices",), set(), MAX_DEVICES)
    ring: dict[str, tuple[EntryDoc, ...]] = {}
    for address, entries in devices.items():
        if not _ADDRESS.fullmatch(address):
            raise _Refused(("devices", address), "not a PCI address")
        if not isinstance(entries, list) or len(entries) > MAX_ENTRIES:
            raise _Refused(("devices", address), f"expected a list of at most {MAX_ENTRIES} "
                           "readings")
        ring[address] = tuple(_entry(e, ("devices", address, i)) for i, e in enumerate(entries))
    return ReadingsDoc(_text(raw["sysfs_root"], ("sysfs_root",), 4096),
                       None if boot_id is None else _text(boot_id, ("boot_id",), 64), ring)


def parse_readings(text: str, shown: str) -> ReadingsDoc:
    """The file's text as the model; DocumentInvalid (one line naming `shown` and the key)."""
    value = load_json(text, shown)
    try:
        return _readings(value)
    except _Refused as exc:
        raise DocumentInvalid(shown, exc.loc, exc.why) from None
    except RecursionError:
        raise DocumentInvalid(shown, (), "nested too deeply") from None


# the document as the state dir declares it (rocmseat.statedir.StateDir.read and write): one
# line of JSON, rewritten by every run that reads new counts
READINGS_DOC = Document(READINGS, SCHEMA, parse_readings, limit_bytes=LIMIT_BYTES, indent=None)
