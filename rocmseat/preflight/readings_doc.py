"""The error readings (`<state dir>/preflight/error-readings.json`, `rocmseat.error-readings/v1`,
rocmseat.preflight.windows) as a strict model: the base every error window is judged from, so a
damaged or forged file is one located line and a window since boot (never fewer errors), never
a KeyError or a count of 1e400.

Self-contained: rocmseat.preflight.windows calls `parse_readings` when a file is there (pydantic
is imported then, not by a run without one); new per-reading fields are one line each here.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from rocmseat.docmodel import Counter, Line, StrictDoc, UtcStamp, load_json_doc
from rocmseat.preflight.windows import MAX_DEVICES, MAX_ENTRIES

MAX_COUNTERS = 512

Address = Annotated[str, StringConstraints(
    pattern=r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")]
CounterName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.\[\] -]{1,100}$")]


class EntryDoc(StrictDoc):
    """The counts (nonzero ones only) seen unchanged from `first` to `last`."""

    first: UtcStamp
    last: UtcStamp
    counters: Annotated[dict[CounterName, Counter], Field(max_length=MAX_COUNTERS)]


class ReadingsDoc(StrictDoc):
    schema_: Literal["rocmseat.error-readings/v1"] = Field(alias="schema")
    sysfs_root: Annotated[Line, Field(max_length=4096)]
    boot_id: Annotated[Line, Field(max_length=64)] | None = None
    devices: Annotated[dict[Address, Annotated[list[EntryDoc], Field(max_length=MAX_ENTRIES)]],
                       Field(max_length=MAX_DEVICES)]


def parse_readings(text: str, shown: str) -> ReadingsDoc:
    """The file's text as the model; DocumentInvalid (one line naming `shown` and the key)."""
    return load_json_doc(ReadingsDoc, text, shown)
