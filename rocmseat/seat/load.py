"""Load a seat file: TOML -> validated Seat, or one ConfigError naming the file, line and key.

Every input is hostile until checked (docs/seat.md, "Hostile input"): the file is read and
parsed by the one TOML loader (rocmseat.tomlio: a regular file of at most SEAT_LIMIT_BYTES,
UTF-8, nesting bounded before tomllib recurses, located errors), the whole document is checked
for control characters, non-finite numbers, dates and sizes before the schema, and every error
names the file, line and key with the values shown through `printable`. A document the schema
refuses is reported with every problem it has, an unknown key first (with the nearest known
key), before the "Field required" a misspelt key causes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rocmseat.cache.envclass import classify_env
from rocmseat.cache.key import normalise_flag
from rocmseat.cache.layout import FORBIDDEN_SEAT_ENV
from rocmseat.errors import ConfigError
from rocmseat.seat.locate import Loc, format_loc, locate, printable, too_deep_line
from rocmseat.seat.model import Seat
from rocmseat.seat.rules import document_problems, seat_problems
from rocmseat.tomlio import MAX_NESTING, TomlDoc, load_toml, parse_toml

# A seat file is a few KiB; 1 MiB leaves room for comments and stops /dev/zero-like input.
SEAT_LIMIT_BYTES = 1 << 20

_SCHEMA_TAG = re.compile(
    r"^(function-(after|before|wrap|plain)\[|constrained-|nullable\[|tagged-union\[|"
    r"lax-or-strict\[|json-or-python\[|is-instance\[)"
)
_COMPILATION_FLAGS = ("--compilation-config", "-cc")
_SPECULATIVE_FLAGS = ("--speculative-config", "-sc")
_REMOVED_WHY = (
    "current vLLM rejects disable_by_batch_size (removed in vllm#35060): use "
    "num_speculative_tokens_per_batch_size"
)
_REMOVED_HINT = (
    "use num_speculative_tokens_per_batch_size in [drafter], e.g. [[1, 8, 3], [9, 1024, 0]] "
    "drafts 3 tokens up to 8 running requests and none above"
)


def load_seat(path: Path) -> Seat:
    """Read, parse and validate the seat file at `path`.

    A FIFO, a device, a directory, a file over SEAT_LIMIT_BYTES or one that is not UTF-8 is a
    one-line ConfigError (exit 2), never a hang or a traceback.
    """
    doc = load_toml(path, what="seat file", limit_bytes=SEAT_LIMIT_BYTES)
    return _validate(doc, path)


def parse_seat(text: str, path: Path) -> Seat:
    """Validate seat TOML `text`; `path` names it in errors and anchors relative paths."""
    return _validate(parse_toml(text, printable(str(path), 4096)), path)


def _validate(doc: TomlDoc, path: Path) -> Seat:
    text, shown, data = doc.text, doc.shown, doc.data

    def fail(loc: Loc, why: str, hint: str | None = None) -> ConfigError:
        line = locate(text, loc)
        where = f"{shown}:{line}" if line is not None else shown
        return ConfigError(f"{where}: key '{format_loc(loc)}': {printable(why, 500)}", hint=hint)

    for loc, why in document_problems(data):
        raise fail(loc, why)
    for loc, why in _deep_engine_args(data):
        raise fail(loc, why)
    for loc, why, hint in _removed_keys(data):
        raise fail(loc, why, hint)
    _default_served_name(data)
    try:
        seat = Seat.model_validate(data, context={"base_dir": path.parent.absolute()})
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        first = errors[0]
        loc = _clean_loc(first["loc"])
        missing = [_clean_loc(e["loc"]) for e in errors if e["type"] == "missing"]
        same_table = all(m[:-1] == loc[:-1] for m in missing)
        if len(missing) > 1 and len(missing) == len(errors) and same_table:
            names = ", ".join(str(m[-1]) for m in missing)
            raise fail(loc, f"Field required (missing required keys: {names})") from None
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise fail(loc, _clean_msg(first["msg"]) + more) from None
    for loc, why in seat_problems(seat):
        raise fail(loc, why)
    for loc, why, hint in cache_escapes(seat):
        raise fail(loc, why, hint)
    # One rule for every command: an unclassified [env] variable is refused when the seat
    # loads, so `systemd render` and `launch --dry-run` refuse what `key` refuses.
    classify_env(
        seat.env, seat_key=seat.env_classes.key, seat_neutral=seat.env_classes.neutral,
        where=lambda name: _where(text, shown, ("env", name)),
    )
    seat._source_path = path.absolute()
    seat._source_text = text
    return seat


def _where(text: str, shown: str, loc: Loc) -> str:
    line = locate(text, loc)
    where = f"{shown}:{line}" if line else shown
    return f"{where}: key '{format_loc(loc)}'"


def _deep_engine_args(data: dict[str, Any]) -> list[tuple[Loc, str]]:
    """An engine argument nested deeper than a seat may nest (JSON of `-cc`, `-sc` ...): the
    engine and rocmseat's own JSON readers would recurse on it."""
    serve = data.get("serve")
    args = serve.get("extra_args") if isinstance(serve, dict) else None
    if not isinstance(args, list):
        return []
    for index, arg in enumerate(args):
        if isinstance(arg, str) and too_deep_line(arg, MAX_NESTING) is not None:
            return [(("serve", "extra_args", index),
                     f"brackets nested more than {MAX_NESTING} levels deep")]
    return []


def _removed_keys(data: dict[str, Any]) -> list[tuple[Loc, str, str]]:
    """Keys current vLLM rejects at startup: refuse them before the engine does."""
    out = _speculative_arg_removed_key(data)
    drafter = data.get("drafter")
    if not isinstance(drafter, dict):
        return out
    why, hint = _REMOVED_WHY, _REMOVED_HINT
    if "disable_by_batch_size" in drafter:
        out.append((("drafter", "disable_by_batch_size"), why, hint))
    extra = drafter.get("extra")
    if isinstance(extra, dict) and "disable_by_batch_size" in extra:
        out.append((("drafter", "extra", "disable_by_batch_size"), why, hint))
    return out


def _speculative_arg_removed_key(data: dict[str, Any]) -> list[tuple[Loc, str, str]]:
    """disable_by_batch_size smuggled in through `--speculative-config`/`-sc` in extra_args."""
    serve = data.get("serve")
    args = serve.get("extra_args") if isinstance(serve, dict) else None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return []
    for index, arg in enumerate(args):
        flag = normalise_flag(arg.partition("=")[0])
        base = flag.partition(".")[0]
        if base in _SPECULATIVE_FLAGS and "disable_by_batch_size" in arg.replace("-", "_"):
            return [(("serve", "extra_args", index), _REMOVED_WHY, _REMOVED_HINT)]
        value = args[index + 1] if "=" not in arg and index + 1 < len(args) else ""
        if flag in _SPECULATIVE_FLAGS and "disable_by_batch_size" in value.replace("-", "_"):
            return [(("serve", "extra_args", index), _REMOVED_WHY, _REMOVED_HINT)]
    return []


def _default_served_name(data: dict[str, Any]) -> None:
    model = data.get("model")
    if isinstance(model, dict) and "served_name" not in model and isinstance(data.get("name"), str):
        model["served_name"] = data["name"]


def cache_escapes(seat: Seat) -> list[tuple[Loc, str, str]]:
    """Settings that put a compiler cache outside the store (docs/architecture.md, incident 3)."""
    out: list[tuple[Loc, str, str]] = []
    hint = (
        "remove it: rocmseat points every compiler cache into <cache_root>/<replica>/ and keys it; "
        "a cache elsewhere is never invalidated"
    )
    for name in seat.env:
        if name in FORBIDDEN_SEAT_ENV:
            out.append((
                ("env", name),
                "points a compiler cache outside the cache store (rocmseat sets it per replica)",
                hint,
            ))
    index = _compilation_cache_dir_arg(seat.serve.extra_args)
    if index is not None:
        out.append((
            ("serve", "extra_args", index),
            "a compilation-config cache_dir bypasses vLLM's cache hash and the cache store",
            hint,
        ))
    return out


def _compilation_cache_dir_arg(args: Sequence[str]) -> int | None:
    """Index of the extra arg that sets compilation_config.cache_dir, if any.

    vLLM accepts `--compilation-config JSON`, `--compilation-config=JSON`, `-cc JSON` and dotted
    keys `-cc.cache_dir DIR` (vllm/engine/arg_utils.py; FlexibleArgumentParser), with dashes in
    keys normalised to underscores.
    """
    for index, arg in enumerate(args):
        flag, _, inline = arg.partition("=")
        flag = normalise_flag(flag)
        for prefix in _COMPILATION_FLAGS:
            if flag in (f"{prefix}.cache_dir", f"{prefix}.cache-dir"):
                return index
            if flag == prefix:
                value = inline if inline else (args[index + 1] if index + 1 < len(args) else "")
                if _json_sets_cache_dir(value):
                    return index
    return None


def _json_sets_cache_dir(value: str) -> bool:
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return "cache_dir" in value or "cache-dir" in value
    return isinstance(parsed, dict) and bool({"cache_dir", "cache-dir"} & set(parsed))


def _clean_loc(loc: Sequence[str | int]) -> Loc:
    # pydantic inserts schema tags such as 'function-after[...]' or 'constrained-int' into
    # locations of wrapped types; the TOML only has the real keys.
    return tuple(p for p in loc if isinstance(p, int) or not _SCHEMA_TAG.match(p))


def _clean_msg(msg: str) -> str:
    return msg.removeprefix("Value error, ")
