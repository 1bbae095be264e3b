"""The one located error of the house, for TOML and JSON documents alike, and the bounded JSON
parse of a document read back (pure, no pydantic: the preflight run imports this and must start
fast; the models live in rocmseat.docmodel).

`located(shown, loc, why, text=...)` is the one builder of "FILE:LINE: key 'a.b[0].c': why": the
line comes from the TOML key locator when the document is TOML text; a JSON document is named by
key alone. `DocumentInvalid` is that line as the error a reader raises (exit 2, could not check).
`load_json(text, shown)` parses JSON text: an integer of more than 4,300 digits, a nesting the
parser cannot take, a truncated document is one DocumentInvalid, never a traceback.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Sequence
from typing import Any

from rocmseat.errors import ConfigError
from rocmseat.text import printable
from rocmseat.tomllocate import Loc, format_loc, locate


class DocumentInvalid(ConfigError):
    """A document read back that is not what the house writes: one line naming the file and,
    where there is one, the key (exit 2: could not check)."""

    def __init__(self, shown: str, loc: Loc, why: str, *, text: str | None = None) -> None:
        super().__init__(located(shown, loc, why, text=text))
        self.shown = shown
        self.loc = tuple(loc)
        self.key = format_loc(loc)
        self.why = why

    @property
    def detail(self) -> str:
        """The line without the file: "key 'a.b': why" (or the why alone)."""
        return f"key '{self.key}': {printable(self.why, 500)}" if self.loc else \
            printable(self.why, 500)


def where_key(shown: str | None, loc: Sequence[str | int], *, text: str | None = None) -> str:
    """"FILE:LINE: key 'a.b[0]'" ("FILE: key ...": no line known; "key ...": no file known;
    "FILE": no key). `text`: the document's TOML text, for the key's line."""
    line = locate(text, loc) if text is not None and loc else None
    where = shown if line is None or shown is None else f"{shown}:{line}"
    key = f"key '{format_loc(loc)}'" if loc else ""
    return ": ".join(part for part in (where, key) if part)


def located(shown: str, loc: Sequence[str | int], why: str, *, text: str | None = None) -> str:
    """The one located line: "FILE:LINE: key 'a.b[0]': why" (`where_key`, then why)."""
    return f"{where_key(shown, loc, text=text)}: {printable(why, 500)}"


def located_error(shown: str, loc: Sequence[str | int], why: str, *, text: str | None = None,
                  hint: str | None = None) -> ConfigError:
    """`located` as the ConfigError (exit 2) a loader raises."""
    return ConfigError(located(shown, loc, why, text=text), hint=hint)


def load_json(text: str, shown: str) -> Any:
    """JSON text -> values; one DocumentInvalid naming `shown` for text that is not JSON (NaN
    and Infinity parse as floats: the model refuses them with their key)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise DocumentInvalid(shown, (), "not JSON: nested too deeply") from None
    except ValueError as exc:
        # json.JSONDecodeError (truncated, not JSON at all), or int() of more than 4,300 digits
        # (sys.get_int_max_str_digits); an integer below that the model bounds, with its key
        raise DocumentInvalid(shown, (), f"not JSON: {exc}") from None


# --- the time rules of every document (pure; rocmseat.docmodel's types use them too) ----------
EPOCH_LOW_S = 946_684_800  # 2000-01-01T00:00:00Z
EPOCH_HIGH_S = 7_258_118_400  # 2200-01-01T00:00:00Z
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


def epoch_problem(value: float) -> str | None:
    """Why `value` is no time a document may hold (None: seconds from 2000 to 2200): a -1e11 or
    a year-10000 stamp is a broken clock or a forgery, never a time to compute a window from."""
    if not EPOCH_LOW_S <= value <= EPOCH_HIGH_S:
        return "expected seconds since 1970 between 2000-01-01 and 2200-01-01"
    return None


def stamp_problem(value: str) -> str | None:
    """Why `value` is no "YYYY-MM-DDTHH:MM:SSZ" stamp inside 2000..2200 (None: it is one)."""
    if not _STAMP.fullmatch(value):
        return "expected a UTC stamp YYYY-MM-DDTHH:MM:SSZ"
    try:
        when = dt.datetime.fromisoformat(value[:-1]).replace(tzinfo=dt.UTC)
    except ValueError:
        return "expected a UTC stamp YYYY-MM-DDTHH:MM:SSZ (no such date)"
    return epoch_problem(when.timestamp())


def kind_of(value: Any) -> str:
    """A JSON/TOML value's kind in words ("a string", "a list" ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, float) and not math.isfinite(value):
        return "a non-finite number"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "a string" if isinstance(value, str) else type(value).__name__
