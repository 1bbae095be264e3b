"""The one JSON serialiser of rocmseat: every writer and every `--json` goes through `dumps`.

Strict JSON only (docs/architecture.md, "JSON"): `allow_nan=False`, so a NaN or an infinity
that reached a document is a bug raised here, never a `NaN` token that other parsers refuse.
Keys sorted, so goldens and state files compare by eye.
"""

from __future__ import annotations

import json
from typing import Any


def dumps(value: Any, *, indent: int | None = 2) -> str:
    """`value` as strict JSON text (no trailing newline); ValueError on NaN/Infinity."""
    return json.dumps(value, indent=indent, sort_keys=True, allow_nan=False)


def dumps_line(value: Any) -> str:
    """`value` as one line of strict JSON (logs, NDJSON)."""
    return json.dumps(value, sort_keys=True, allow_nan=False, separators=(",", ":"))
