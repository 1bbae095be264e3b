"""The documents rocmseat reads back, as strict models (docs/architecture.md, "Documents").

Every document a run writes and a later run reads (a baseline, a cache manifest, a startup
report, a profile ...) is hostile input when it is read back: someone may have edited it, a
disk may have cut it short (docs/architecture.md, "Hostile input"). Each is a pydantic model
built on `StrictDoc`: strict types (no "1" for 1, no true for 1), unknown keys refused, integers
bounded, floats finite, timestamps inside 2000..2200. The constrained types every model shares:

- integers as `Annotated[int, Field(ge=..., le=...)]` (strict: a bool is not one), `Counter`
  (0 .. 2**64-1);
- `Finite` / `NonNegative`: a finite float (an integer is taken as one);
- `EpochSeconds`: seconds since 1970 from 2000-01-01 to 2200-01-01 (a -1e11 or a year-10000
  stamp is a broken clock or a forgery, never a time to compute a window from);
- `UtcStamp`: "YYYY-MM-DDTHH:MM:SSZ", inside the same span;
- `Line`: a string without control characters (bounded where used, `Field(max_length=...)`);
- `JsonTree`: any JSON value of bounded depth whose numbers are finite.

`parse_doc(model, value, shown)` validates parsed JSON or TOML, the first wrong key named through
the one located error (rocmseat.located); `load_json_doc(model, text, shown)` parses JSON text
first (rocmseat.located.load_json); `strict(model)` is that as the parser a state document
declares (rocmseat.statedir.Document). `first_problem(exc)` turns a pydantic ValidationError into
the (key path, words) that builder takes.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import PydanticCustomError

from rocmseat.located import DocumentInvalid, epoch_problem, kind_of, load_json, stamp_problem
from rocmseat.text import CONTROL_CHARS
from rocmseat.tomllocate import Loc

MAX_U64 = (1 << 64) - 1
MAX_JSON_DEPTH = 32  # every document of the house nests fewer than 8 levels


# --- pydantic errors as words --------------------------------------------------------------
# pydantic inserts schema tags into the locations of wrapped types ('function-after[...]',
# 'constrained-int', 'nullable[...]', a union's member name); a document has only its keys.
_SCHEMA_TAG = re.compile(
    r"^(function-(after|before|wrap|plain)\[|constrained-|nullable\[|tagged-union\[|"
    r"lax-or-strict\[|json-or-python\[|is-instance\[|union\[|literal\[|list\[|dict\[)"
)
_UNION_MEMBERS = frozenset({"int", "float", "str", "bool", "none", "list", "dict"})
_TYPE_WORDS = {"model_type": "an object", "dict_type": "an object", "model_attributes_type":
               "an object", "list_type": "a list", "tuple_type": "a list",
               "string_type": "a string", "bool_type": "true/false", "int_type": "a whole number",
               "float_type": "a number", "none_required": "null"}


def clean_loc(loc: Sequence[str | int]) -> Loc:
    """A pydantic error location as the document's key path (schema tags dropped)."""
    return tuple(p for p in loc if isinstance(p, int) or not (
        _SCHEMA_TAG.match(p) or p in _UNION_MEMBERS))


_BOUND_WORDS = {
    "less_than_equal": "expected at most {le}",
    "less_than": "expected less than {lt}",
    "greater_than_equal": "expected at least {ge}",
    "greater_than": "expected more than {gt}",
    "string_too_long": "longer than {max_length} characters",
    "string_too_short": "shorter than {min_length} characters",
    "too_long": "more than {max_length} items",
    "too_short": "fewer than {min_length} items",
    "string_pattern_mismatch": "not of the form {pattern}",
}


def error_words(error: Any) -> str:
    """One pydantic error (an item of ValidationError.errors()) in words."""
    kind = str(error["type"])
    if kind in _TYPE_WORDS:
        return f"expected {_TYPE_WORDS[kind]}, not {kind_of(error.get('input'))}"
    if kind == "extra_forbidden":
        return "unknown key"
    if kind == "missing":
        return "missing"
    if kind == "literal_error":
        return f"expected {error['ctx']['expected']}"
    if kind == "finite_number":
        return "expected a finite number"
    ctx = error.get("ctx") or {}
    if kind in _BOUND_WORDS:
        try:
            return _BOUND_WORDS[kind].format(**ctx)
        except (KeyError, IndexError):
            pass
    return str(error["msg"]).removeprefix("Value error, ")


def first_problem(exc: ValidationError) -> tuple[Loc, str]:
    """The (key path, words) of the first error, an unknown key before anything else."""
    errors = exc.errors(include_url=False)
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    return clean_loc(first["loc"]), error_words(first)


M = TypeVar("M", bound=BaseModel)


def parse_doc(model: type[M], value: Any, shown: str, *, text: str | None = None) -> M:
    """`value` (parsed JSON or TOML) as `model`, or DocumentInvalid naming the first wrong key
    (`text`: the TOML text, for the key's line)."""
    if not isinstance(value, dict):
        raise DocumentInvalid(shown, (), f"expected an object, not {kind_of(value)}")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        loc, why = first_problem(exc)
        raise DocumentInvalid(shown, loc, why, text=text) from None
    except RecursionError:
        raise DocumentInvalid(shown, (), "nested too deeply") from None


def load_json_doc(model: type[M], text: str, shown: str) -> M:
    """JSON text straight to `model` (load_json, then parse_doc)."""
    return parse_doc(model, load_json(text, shown), shown)


def strict(model: type[M]) -> Callable[[str, str], M]:
    """The parser a state document declares (rocmseat.statedir.Document): its JSON text as
    `model`, DocumentInvalid naming the file and the first wrong key."""
    return functools.partial(load_json_doc, model)


# --- the shared constrained types -------------------------------------------------------------
class StrictDoc(BaseModel):
    """The base of every document read back: strict types, unknown keys refused, frozen."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False,
                              populate_by_name=True)


def refuse(why: str) -> PydanticCustomError:
    """The error a validator raises: its words are the message as it is."""
    return PydanticCustomError("rocmseat", "{why}", {"why": why})


Finite = Annotated[float, Field(allow_inf_nan=False)]
NonNegative = Annotated[float, Field(allow_inf_nan=False, ge=0)]
Counter = Annotated[int, Field(ge=0, le=MAX_U64)]


def _epoch(value: float) -> float:
    why = epoch_problem(value)
    if why is not None:
        raise refuse(why)
    return value


EpochSeconds = Annotated[float, Field(allow_inf_nan=False), AfterValidator(_epoch)]


def _stamp(value: str) -> str:
    why = stamp_problem(value)
    if why is not None:
        raise refuse(why)
    return value


UtcStamp = Annotated[str, AfterValidator(_stamp)]  # the pattern bounds the length


def _no_control(value: str) -> str:
    match = CONTROL_CHARS.search(value)
    if match is not None:
        raise refuse(f"control character U+{ord(match.group()):04X} in the value")
    return value


# A string without control characters (it reaches a terminal, a log line, a unit file); bound
# its length where it is used: Annotated[Line, Field(max_length=200)].
Line = Annotated[str, AfterValidator(_no_control)]


def _tree(value: Any, depth: int = 0) -> Any:
    if depth > MAX_JSON_DEPTH:
        raise refuse(f"nested more than {MAX_JSON_DEPTH} levels deep")
    if isinstance(value, float) and not math.isfinite(value):
        raise refuse("expected a finite number")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_U64:
        raise refuse("an integer beyond 64 bits")
    if isinstance(value, dict):
        for item in value.values():
            _tree(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _tree(item, depth + 1)
    elif value is not None and not isinstance(value, str | int | float | bool):
        raise refuse(f"not a JSON value ({type(value).__name__})")
    return value


JsonTree = Annotated[Any, BeforeValidator(_tree)]
