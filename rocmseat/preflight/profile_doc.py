"""The expectation profile (checks/*.toml) as a strict model: the shapes, types and ranges of
every key, unknown keys refused (docs/preflight.md, "Profiles"). Facts that span keys (a link
needs speed and width together, warn at most fail, a pair of two different GPUs) are checked by
rocmseat.preflight.profile on the model.

`profile_problem(exc)` words a ValidationError as the loader always has ("must be a socket
number 0..4095"), with the key path the located error builder (rocmseat.located) puts
on the file's line.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError

from rocmseat.docmodel import Line, StrictDoc, clean_loc, error_words, refuse
from rocmseat.preflight.windows import MAX_WINDOW_S
from rocmseat.sysfs.parse import KNOWN_SPEEDS_GTS, normalize_pci_address
from rocmseat.tomllocate import Loc

MAX_SOCKET = 4095  # physical_package_id; numa_node has the same kernel bound (MAX_NUMNODES)
MAX_THRESHOLD = (1 << 32) - 1  # errors per window; a larger one would never fire
MAX_WINDOW_H = MAX_WINDOW_S // 3600  # the longest window, in hours
MAX_LANES = 32
MAX_GPUS = 4096
MAX_NAME = 200
MAX_NOTE = 2000
TOP_KEYS = ("name", "description", "thresholds", "gpu", "pair", "xgmi")
MAX_HIVE = 64


def _address(value: Any) -> str:
    address = normalize_pci_address(value) if isinstance(value, str) else None
    if address is None:
        raise refuse(f"not a PCI address: {value!r:.80}")
    return address


def _speed(value: float) -> float:
    if value not in KNOWN_SPEEDS_GTS:
        raise refuse(f"must be one of {KNOWN_SPEEDS_GTS}")
    return value


def _window(hours: int) -> int:
    if not 1 <= hours <= MAX_WINDOW_H:
        raise refuse(f"must be a window of 1..{MAX_WINDOW_H} hours")
    return hours


Address = Annotated[str, BeforeValidator(_address)]
Threshold = Annotated[int, Field(ge=0, le=MAX_THRESHOLD)]


class GpuDoc(StrictDoc):
    pci_address: Address
    speed_gts: Annotated[float, AfterValidator(_speed)] | None = None
    width: Annotated[int, Field(ge=1, le=MAX_LANES)] | None = None
    socket: Annotated[int, Field(ge=0, le=MAX_SOCKET)] | None = None
    note: Annotated[Line, Field(max_length=MAX_NOTE)] | None = None


class PairDoc(StrictDoc):
    gpus: Annotated[list[Address], Field(min_length=2, max_length=2)]
    note: Annotated[Line, Field(max_length=MAX_NOTE)] | None = None


class ThresholdsDoc(StrictDoc):
    """[thresholds]: errors per window (window_h: the window in hours)."""

    aer_correctable_warn: Threshold | None = None
    aer_correctable_fail: Threshold | None = None
    replay_warn: Threshold | None = None
    replay_fail: Threshold | None = None
    ras_ce_warn: Threshold | None = None
    ras_ce_fail: Threshold | None = None
    ras_bad_pages_fail: Threshold | None = None
    window_h: Annotated[Threshold, AfterValidator(_window)] | None = None
    # the events family (rocmseat.preflight.events.EventThresholds): fail at >= this many per boot
    gpu_resets_fail: Threshold | None = None
    ring_timeouts_fail: Threshold | None = None


class XgmiDoc(StrictDoc):
    """[xgmi]: the hive the node should show (rocmseat.preflight.xgmi.XgmiExpectations)."""

    hive_members: Annotated[int, Field(ge=1, le=MAX_HIVE)] | None = None
    links_per_peer: Annotated[int, Field(ge=1, le=16)] | None = None
    width: Annotated[int, Field(ge=1, le=MAX_LANES)] | None = None
    speed_gts: Annotated[int, Field(ge=1, le=1000)] | None = None
    compute_partition: Annotated[Line, Field(max_length=16)] | None = None
    memory_partition: Annotated[Line, Field(max_length=16)] | None = None


class ProfileDoc(StrictDoc):
    name: Annotated[Line, Field(max_length=MAX_NAME)] | None = None
    description: Annotated[Line, Field(max_length=MAX_NOTE)] | None = None
    thresholds: Annotated[ThresholdsDoc, Field(default_factory=ThresholdsDoc)]
    gpu: Annotated[list[GpuDoc], Field(max_length=MAX_GPUS, default_factory=list)]
    pair: Annotated[list[PairDoc], Field(max_length=MAX_GPUS, default_factory=list)]
    xgmi: Annotated[XgmiDoc, Field(default_factory=XgmiDoc)]


# What a wrong value of each key is told (any type or range error of it).
_FIELD_WORDS = {
    "name": "must be a string",
    "description": "must be a string",
    "speed_gts": f"must be one of {KNOWN_SPEEDS_GTS}",
    "width": f"must be a lane count 1..{MAX_LANES}",
    "socket": f"must be a socket number 0..{MAX_SOCKET}",
    "gpus": "must list two PCI addresses",
    "note": "must be a string",
}


def profile_problem(exc: ValidationError) -> tuple[Loc, str]:
    """The first problem of a profile the model refused: (key path, the loader's words)."""
    errors = exc.errors(include_url=False)
    error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc, kind = clean_loc(error["loc"]), str(error["type"])
    if kind == "extra_forbidden":
        if len(loc) == 1:
            return loc, f"unknown key (expected {', '.join(TOP_KEYS)})"
        if loc[0] == "thresholds":
            return loc, f"unknown (known: {', '.join(ThresholdsDoc.model_fields)})"
        if loc[0] == "xgmi":
            return loc, f"unknown (known: {', '.join(XgmiDoc.model_fields)})"
        return loc, "unknown key"
    if loc[:1] == ("pair",) and len(loc) >= 2:
        # a pair that is not a table, or a bad address in it: the key is its `gpus`
        loc = (*loc[:2], "gpus")
    if kind in ("rocmseat", "string_too_long"):
        return loc, error_words(error)
    if loc in (("gpu",), ("pair",)):
        return loc, f"must be an array of tables ([[{loc[0]}]])"
    if len(loc) == 1:
        return loc, "must be a table" if loc[0] in ("thresholds", "xgmi") else _FIELD_WORDS.get(
            str(loc[0]), error_words(error))
    if len(loc) == 2 and isinstance(loc[1], int):
        return loc, "must be a table"
    if loc[0] == "xgmi":
        return loc, error_words(error)
    if loc[0] == "thresholds":
        why = ("must be a non-negative integer" if kind == "greater_than_equal"
               else f"must be an integer 0..{MAX_THRESHOLD}")
        return loc, why
    return loc, _FIELD_WORDS.get(str(loc[-1]), error_words(error))
