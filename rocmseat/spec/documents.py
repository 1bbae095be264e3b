"""The JSON documents the speculation room reads back (gate.json, arm.json, result files):
parsed with bounds, so a hostile file is one located error, never an exception of the JSON
library or of float() (docs/architecture.md "Hostile input").

- integers of more than MAX_INT_DIGITS digits are refused at parse time (a 400-digit integer
  once raised OverflowError in float() and math.isfinite(); Python's own limit is 4,300 digits,
  far beyond any counter);
- `NaN`, `Infinity` are refused unless the caller reads them as "no sample" (vLLM's result
  files write NaN for a metric without samples: rocmseat.spec.benchresult);
- nesting is bounded by the JSON library's recursion limit (RecursionError is caught).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

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
