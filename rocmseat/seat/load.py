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

import difflib
import json
import re
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rocmseat.errors import ConfigError
from rocmseat.seat.envclass import FORBIDDEN_SEAT_ENV, classify_env, normalise_flag
from rocmseat.seat.model import Seat
from rocmseat.seat.rules import document_problems, seat_problems
from rocmseat.text import printable
from rocmseat.tomlio import MAX_NESTING, TomlDoc, load_toml, parse_toml
from rocmseat.tomllocate import Loc, format_loc, locate, too_deep_line

# A seat file is a few KiB; 1 MiB leaves room for comments and stops /dev/zero-like input.
SEAT_LIMIT_BYTES = 1 << 20
MAX_SHOWN_PROBLEMS = 20  # a file with more is not a seat file: the first twenty say so

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
        problems = schema_problems(exc)
        shown_problems = [str(fail(loc, why)) for loc, why in problems[:MAX_SHOWN_PROBLEMS]]
        if len(problems) > MAX_SHOWN_PROBLEMS:
            shown_problems.append(f"{len(problems) - MAX_SHOWN_PROBLEMS} more problems")
        raise ConfigError("; and ".join(shown_problems)) from None
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


def schema_problems(exc: ValidationError) -> list[tuple[Loc, str]]:
    """Every problem the schema found, an unknown key first (with the nearest known key of its
    table: a misspelt `num_speculative_token` is the unknown key it is, before the "Field
    required" it causes), the missing keys of one table as one problem."""
    errors = exc.errors(include_url=False)
    unknown: list[tuple[Loc, str]] = []
    missing: dict[Loc, list[str]] = {}
    other: list[tuple[Loc, str]] = []
    for error in errors:
        loc = _clean_loc(error["loc"])
        if error["type"] == "extra_forbidden":
            unknown.append((loc, _unknown_key(loc)))
        elif error["type"] == "missing" and loc:
            missing.setdefault(loc[:-1], []).append(str(loc[-1]))
        else:
            other.append((loc, _clean_msg(error["msg"])))
    required: list[tuple[Loc, str]] = []
    for table, names in missing.items():
        why = "Field required" + (f" (missing required keys: {', '.join(names)})"
                                  if len(names) > 1 else "")
        required.append(((*table, names[0]), why))
    return unknown + required + other


def _unknown_key(loc: Loc) -> str:
    known = _table_keys(loc[:-1])
    name = str(loc[-1])
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key (did you mean '{close[0]}'?)"
    return f"unknown key (known here: {', '.join(known)})" if known else "unknown key"


def _table_keys(table: Loc) -> list[str]:
    """The keys the schema knows in the table at `table` ([] where that is not a model)."""
    model: type[BaseModel] | None = Seat
    for part in table:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part) if model is not None else None
        model = _model_in(info.annotation) if info is not None else None
        if model is None:
            return []
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (`Drafter | None`, `tuple[ExpectLog, ...]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _clean_loc(loc: Sequence[str | int]) -> Loc:
    # pydantic inserts schema tags such as 'function-after[...]' or 'constrained-int' into
    # locations of wrapped types; the TOML only has the real keys.
    return tuple(p for p in loc if isinstance(p, int) or not _SCHEMA_TAG.match(p))


def _clean_msg(msg: str) -> str:
    return msg.removeprefix("Value error, ")
