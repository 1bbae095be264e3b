"""The JSON documents the speculation room reads back (gate.json, arm.json, result files):
parsed with bounds, so a hostile file is one located error, never an exception of the JSON
library or of float() (docs/architecture.md "Hostile input").

- integers of more than MAX_INT_DIGITS digits are refused at parse time (a 400-digit integer
  once raised OverflowError in float() and math.isfinite(); Python's own limit is 4,300 digits,
  far beyond any counter);
- `NaN`, `Infinity` are refused unless the caller reads them as "no sample" (vLLM's result
  files write NaN for a metric without samples: rocmseat.speculation.gate.benchresult);
- nesting is bounded by the JSON library's recursion limit (RecursionError is caught).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from rocmseat.speculation.advise.schedule import Schedule, ScheduleError, validate
from rocmseat.text import printable

# 2**63 has 19 digits: every counter, size and count rocmseat writes fits.
MAX_INT_DIGITS = 20


class DocumentError(ValueError):
    """Text that is not a bounded JSON document (the message says where)."""


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise DocumentError(f"an integer of {len(text.lstrip('-'))} digits (at most "
                            f"{MAX_INT_DIGITS})")
    return int(text)


def _no_constant(name: str) -> float:
    raise DocumentError(f"{name} is not a JSON number")


def load_document(text: str, *,
                  parse_constant: Callable[[str], float] = _no_constant) -> Any:
    """`text` as JSON with bounded integers; DocumentError (one line) otherwise."""
    try:
        return json.loads(text, parse_int=_bounded_int, parse_constant=parse_constant)
    except DocumentError:
        raise
    except RecursionError:
        raise DocumentError("nested too deeply") from None
    except ValueError as exc:  # json.JSONDecodeError, an int beyond Python's digit limit
        raise DocumentError(str(exc)) from None


# --- the documents, as pydantic strict models ----------------------------------------------
# One model per document the room reads back: a hostile value is one error naming the file
# and the key (`FILE: key 'runs[2].concurrency': expected ...`), never a KeyError or a
# TypeError deeper in. Unknown keys are ignored (a newer writer may add some).

MAX_CONCURRENCY = 65_536  # the [gate] schema's bound (rocmseat.seat.model Gate.concurrency)
MAX_DRAFT_TOKENS = 64
MAX_COUNT = float(2**53)  # a float counts exactly up to here (rocmseat.watch.metrics MAX_VALUE)
MAX_SECONDS = 1e9
_ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    return {dict: "an object", list: "a list", str: "a string", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def _refuse(why: str) -> PydanticCustomError:
    return PydanticCustomError("rocmseat", "{why}", {"why": why})


def _whole(low: int, high: int) -> Any:
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _refuse(f"expected a whole number from {low} to {high}")
        return value
    return BeforeValidator(check)


def _number(value: Any) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or value < 0):
        raise _refuse("expected a finite number >= 0")
    return float(value)


def _count(value: Any) -> float:
    number = _number(value)
    if number != math.floor(number) or number > MAX_COUNT:
        raise _refuse(f"expected a whole count from 0 to {MAX_COUNT:.0f}")
    return number


def _seconds(value: Any) -> float:
    number = _number(value)
    if number > MAX_SECONDS:
        raise _refuse(f"expected seconds from 0 to {MAX_SECONDS:g}")
    return number


def _arm_name(value: Any) -> str:
    if not isinstance(value, str) or not _ARM_NAME.fullmatch(value):
        raise _refuse("not an arm name (letters, digits, - and _)")
    return value


def _schedule(value: Any) -> Schedule | None:
    if value is None or value == []:
        return None
    try:
        return validate(value)
    except ScheduleError as exc:
        raise _refuse(str(exc)) from None


Count = Annotated[float, BeforeValidator(_count)]
Seconds = Annotated[float, BeforeValidator(_seconds)]
ArmName = Annotated[str, BeforeValidator(_arm_name)]
ScheduleField = Annotated[Schedule | None, BeforeValidator(_schedule)]


class _Doc(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class WindowDoc(_Doc):
    """A run's /metrics deltas (rocmseat.speculation.gate.arms window_json)."""

    duration_s: Seconds
    spec_present: bool
    drafts: Count
    draft_tokens: Count
    accepted_tokens: Count
    accepted_per_position: list[Count]
    generation_tokens: Count | None = None
    prompt_tokens: Count | None = None
    prefix_queries: Count | None = None
    prefix_hits: Count | None = None
    preemptions: Count | None = None


class RunDoc(_Doc):
    name: str
    phase: str
    concurrency: Annotated[int, _whole(1, MAX_CONCURRENCY)]
    repeat: Annotated[int, _whole(0, 1_000_000)]
    result_file: str | None = None
    seconds: Seconds
    error: str | None = None
    metrics_window: WindowDoc | None = None


class ArmDoc(_Doc):
    """arms/<arm>/arm.json (rocmseat.speculation.gate.arms arm_json)."""

    name: ArmName
    run_id: str | None = None  # absent in gates written before runs had an identity
    source_seat: str
    num_speculative_tokens: Annotated[int, _whole(0, MAX_DRAFT_TOKENS)] | None = None
    schedule: ScheduleField = None
    ready_after_s: Seconds | None = None
    memory_plan: dict[str, Any] | None = None
    runs: list[RunDoc] = Field(default_factory=list)
    hangs: list[str] = Field(default_factory=list)
    alerts: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)
    watch_gaps: list[str] = Field(default_factory=list)

    @property
    def k(self) -> int:
        return self.num_speculative_tokens or 0


class GateArmDoc(_Doc):
    name: ArmName


class BatteryDoc(_Doc):
    concurrency: list[Annotated[int, _whole(1, MAX_CONCURRENCY)]]
    repeats: Annotated[int, _whole(1, 1000)]
    prompts: Annotated[int, _whole(1, 1_000_000)]
    output_tokens: Annotated[int, _whole(1, 10_000_000)]
    long_prompt_tokens: Annotated[int, _whole(1, 10_000_000)] | None = None
    warm_ttft_samples: Annotated[int, _whole(0, 1000)] = 5
    stall_after_s: Seconds = 30.0
    run_timeout_s: Seconds = 1800.0


class GateConfigDoc(_Doc):
    aggregate_min_ratio: Annotated[float, BeforeValidator(_number)]
    cold_ttft_max_ratio: Annotated[float, BeforeValidator(_number)]
    prefix_hit_max_drop: Annotated[float, BeforeValidator(_number)]
    kv_pool_min_ratio: Annotated[float, BeforeValidator(_number)]
    max_failed_requests: Annotated[int, _whole(0, 1_000_000)]
    noise_floor: Annotated[float, BeforeValidator(_number)]
    drift: Annotated[float, BeforeValidator(_number)] | None = None  # older gates: absent


class GateDoc(_Doc):
    """gate.json (rocmseat.speculation.gate.flow _document)."""

    schema_: Literal["rocmseat.gate/v1"] = Field(alias="schema")
    run_id: str | None = None
    error: str | None = None
    base_seat: str
    candidate_seat: str
    replica: str = "r0"
    aa: bool = False
    aba: bool = False
    arms: list[GateArmDoc] = Field(default_factory=list)
    battery: BatteryDoc
    config: GateConfigDoc


class DocumentInvalid(ValueError):
    """A document of the right JSON but the wrong shape: `shown: key 'k': why`."""

    def __init__(self, shown: str, key: str, why: str) -> None:
        super().__init__(f"{shown}: key '{key}': {why}" if key else f"{shown}: {why}")
        self.key = key
        self.why = why


M = TypeVar("M", bound=_Doc)

_TYPE_WORDS = {"model_type": "an object", "dict_type": "an object", "model_attributes_type":
               "an object", "list_type": "a list", "tuple_type": "a list",
               "string_type": "a string", "bool_type": "true/false", "int_type": "a whole number",
               "float_type": "a number"}


def _key(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-before", "nullable") or part.startswith(
                ("function-", "nullable[")):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out


def parse(model: type[M], value: Any, shown: str) -> M:
    """`value` (loaded JSON) as `model`, or DocumentInvalid naming the first wrong key."""
    if not isinstance(value, dict):
        raise DocumentInvalid(shown, "", f"expected a JSON object, not {_kind(value)}")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = [p for p in first["loc"] if not (isinstance(p, str) and (
            p.startswith(("function-", "nullable", "union")) or p in ("int", "float", "str")))]
        kind = str(first["type"])
        if kind in _TYPE_WORDS:
            why = f"expected {_TYPE_WORDS[kind]}, not {_kind(first.get('input'))}"
        elif kind == "missing":
            why = "missing"
        elif kind == "literal_error" and loc == ["schema"]:
            expected = str(first["ctx"]["expected"]).strip("'")
            raise DocumentInvalid(shown, "", f"not a {expected} document") from None
        elif kind == "literal_error":
            why = f"expected {first['ctx']['expected']}"
        else:
            why = str(first["msg"])
        raise DocumentInvalid(shown, _key(loc), printable(why, 300)) from None


class WatchAlertDoc(_Doc):
    """One `rocmseat.watch-alert/v1` document (rocmseat/watch/alerts.py Transition.to_json),
    as the watchdog's command hook hands it to the gate."""

    schema_: Literal["rocmseat.watch-alert/v1"] = Field(alias="schema")
    replica: str
    alert: str
    state: Literal["firing", "resolved"]
    details: dict[str, str] = Field(default_factory=dict)
