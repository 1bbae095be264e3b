"""Render a replica's config key: one digest line, every factor (--explain), or JSON."""

from __future__ import annotations

from typing import Any

from rocmseat.cache.current import CurrentKey
from rocmseat.cache.key import canonical_json, flatten
from rocmseat.redact import redact_env

KEY_SCHEMA = "rocmseat.key/v1"


def key_json(current: CurrentKey, seat_file: str) -> dict[str, Any]:
    key = current.key
    return {
        "schema": KEY_SCHEMA,
        "seat": current.seat,
        "seat_file": seat_file,
        "replica": current.replica,
        "key": key.digest if key is not None else None,
        "factors": current.factors,
        "unknown": dict(sorted(current.unknown.items())),
        "env_classes": {
            c.name: {"class": c.env_class.value, "rule": c.rule} for c in current.classified
        },
    }


def explain_text(current: CurrentKey, seat_file: str) -> str:
    """Every factor on its own line, flattened (`engine.vllm`), then the key."""
    rows: list[tuple[str, str]] = [
        (name, value if isinstance(value, str) else canonical_json(value))
        for name, value in flatten(current.factors).items()
    ]
    rows.extend((name, f"UNKNOWN: {why}") for name, why in sorted(current.unknown.items()))
    rows.sort(key=lambda row: row[0])
    width = max(len(name) for name, _ in rows)
    lines = [
        f"seat {current.seat} ({seat_file}), replica {current.replica}",
        f"{'FACTOR'.ljust(width)}  VALUE",
        *(f"{name.ljust(width)}  {value}" for name, value in rows),
    ]
    if current.classified:
        # the values leave the process: credentials are shown redacted (rocmseat.redact)
        shown = redact_env({c.name: c.value for c in current.classified})
        lines += ["", "environment ([env]; only key variables enter the key):"]
        lines += [
            f"  {c.name}={shown[c.name]}  {c.env_class.value} ({c.rule})"
            for c in current.classified
        ]
    lines += ["", key_line(current)]
    return "\n".join(lines) + "\n"


def key_line(current: CurrentKey) -> str:
    key = current.key
    if key is not None:
        return f"key {key.digest}"
    names = ", ".join(sorted(current.unknown))
    return f"key unknown: {len(current.unknown)} factor(s) could not be computed ({names})"
