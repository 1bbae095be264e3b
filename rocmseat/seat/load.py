"""Load a seat file: TOML -> validated Seat, or one ConfigError naming the file, line and key."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rocmseat.cache.key import normalise_flag
from rocmseat.cache.layout import FORBIDDEN_SEAT_ENV
from rocmseat.errors import ConfigError
from rocmseat.seat.locate import Loc, format_loc, locate
from rocmseat.seat.model import Seat
from rocmseat.seat.rules import seat_problems

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
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
    """Read, parse and validate the seat file at `path`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the seat file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc.reason}") from None
    return parse_seat(text, path)


def parse_seat(text: str, path: Path) -> Seat:
    """Validate seat TOML `text`; `path` names it in errors and anchors relative paths."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_POSITION.search(message)
        if match is None:
            raise ConfigError(f"{path}: invalid TOML: {message}") from None
        why = message[: match.start()]
        line_no = int(match.group(1))
        key = _key_on_line(text, line_no) if "overwrite" in why or "declare" in why else None
        if key is not None:
            why = f"key {key!r} is set twice ({why})"
        raise ConfigError(
            f"{path}:{line_no}: invalid TOML: {why} (column {match.group(2)})"
        ) from None

    def fail(loc: Loc, why: str, hint: str | None = None) -> ConfigError:
        line = locate(text, loc)
        where = f"{path}:{line}" if line is not None else f"{path}"
        return ConfigError(f"{where}: key '{format_loc(loc)}': {why}", hint=hint)

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
    seat._source_path = path.absolute()
    seat._source_text = text
    return seat


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


def _key_on_line(text: str, line_no: int) -> str | None:
    """The dotted key or table header written on a line (for duplicate-key errors)."""
    lines = text.splitlines()
    if not 0 < line_no <= len(lines):
        return None
    line = lines[line_no - 1].strip().lstrip("[").rstrip("]")
    name = line.split("=", 1)[0].strip() if "=" in line else line.strip()
    return name or None


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
    except ValueError:
        return "cache_dir" in value or "cache-dir" in value
    return isinstance(parsed, dict) and bool({"cache_dir", "cache-dir"} & set(parsed))


def _clean_loc(loc: Sequence[str | int]) -> Loc:
    # pydantic inserts schema tags such as 'function-after[...]' or 'constrained-int' into
    # locations of wrapped types; the TOML only has the real keys.
    return tuple(p for p in loc if isinstance(p, int) or not _SCHEMA_TAG.match(p))


def _clean_msg(msg: str) -> str:
    return msg.removeprefix("Value error, ")
