"""Seat files for the gate's arms, and the `[drafter]` schedule edit of `spec advise --write`.

- `dump_toml(data)`: a TOML document from tomllib-shaped data (strings, integers, finite
  floats, booleans, arrays, tables); the gate writes each arm's seat with it.
- `edit_drafter_schedule(text, k, schedule)`: only the `num_speculative_tokens` and
  `num_speculative_tokens_per_batch_size` lines of `[drafter]` change; comments, order and
  layout of everything else stay byte for byte, and the result is checked by parsing both.

Pure: text in, text out.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

from rocmseat.errors import ConfigError
from rocmseat.seat.locate import key_lines, printable, toml_lines, too_deep_line

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
_HEADER = re.compile(r"^\s*\[\[?\s*(?P<name>[^\]]+?)\s*\]\]?\s*(?:#.*)?$")


def _table_name(line: str) -> str | None:
    m = _HEADER.match(line)
    return m.group("name").strip().strip('"').strip("'") if m else None


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name)


def _value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"{where}: a non-finite number cannot be written to a seat file")
        return repr(value)
    if isinstance(value, str):
        # JSON string escapes are valid TOML basic-string escapes (\" \\ \n \t \uXXXX).
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v, where) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_value(v, where)}" for k, v in value.items()) + "}"
    raise ConfigError(f"{where}: cannot write a {type(value).__name__} to a seat file")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)


def dump_toml(data: Mapping[str, Any], header: str = "") -> str:
    lines: list[str] = [f"# {line}" if line else "#" for line in header.splitlines()]

    def table(path: Sequence[str], body: Mapping[str, Any]) -> None:
        scalars = {k: v for k, v in body.items()
                   if not isinstance(v, Mapping) and not _is_table_array(v)}
        if path and (scalars or not body):
            lines.append("")
            lines.append("[" + ".".join(_key(p) for p in path) + "]")
        for key, value in scalars.items():
            lines.append(f"{_key(key)} = {_value(value, '.'.join([*path, key]))}")
        for key, value in body.items():
            if isinstance(value, Mapping):
                table([*path, key], value)
            elif _is_table_array(value):
                for item in value:
                    lines.append("")
                    lines.append("[[" + ".".join(_key(p) for p in [*path, key]) + "]]")
                    for k, v in item.items():
                        lines.append(f"{_key(k)} = {_value(v, '.'.join([*path, key, k]))}")

    table([], data)
    return "\n".join(lines).lstrip("\n") + "\n"


def _value_end(lines: list[str], start: int, column: int) -> int:
    """The index of the last line of a value that starts at lines[start][column:]."""
    depth = 0
    in_string: str | None = None
    for index in range(start, len(lines)):
        line = lines[index]
        pos = column if index == start else 0
        while pos < len(line):
            ch = line[pos]
            if in_string is not None:
                if ch == "\\" and in_string == '"':
                    pos += 2
                    continue
                if ch == in_string:
                    in_string = None
            elif ch in "\"'":
                in_string = ch
            elif ch == "#":
                break
            elif ch in "[{":
                depth += 1
            elif ch in "]}":
                depth -= 1
            pos += 1
        if depth <= 0 and in_string is None:
            return index
    return len(lines) - 1


def _comment_of(line: str) -> str:
    """The trailing comment of a one-line value (`  # ...`), or ''."""
    in_string: str | None = None
    for pos, ch in enumerate(line):
        if in_string is not None:
            if ch == in_string:
                in_string = None
        elif ch in "\"'":
            in_string = ch
        elif ch == "#":
            return "  " + line[pos:].strip()
    return ""


_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")
# Deeper than any seat nests (rocmseat.seat.rules MAX_NESTING is the loader's own limit):
# tomllib parses nested values by recursion.
_MAX_NESTING = 64


def _loads(text: str, where: str) -> dict[str, Any]:
    """tomllib.loads with every failure as one located ConfigError (a seat file handed to
    `--write` is hostile input like any other: docs/architecture.md "Hostile input")."""
    deep = too_deep_line(text, _MAX_NESTING)
    if deep is not None:
        raise ConfigError(f"{where}:{deep}: invalid TOML: arrays and inline tables nested more "
                          f"than {_MAX_NESTING} levels deep")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        m = _TOML_POSITION.search(message)
        if m is None:
            raise ConfigError(f"{where}: invalid TOML: {printable(message)}") from None
        raise ConfigError(f"{where}:{m.group(1)}: invalid TOML: "
                          f"{printable(message[: m.start()].strip())} (column {m.group(2)})"
                          ) from None
    except RecursionError:
        raise ConfigError(f"{where}: invalid TOML: values nested too deeply") from None
    except ValueError:  # int() of more digits than sys.get_int_max_str_digits() (4300)
        line = next((i for i, text_line in enumerate(toml_lines(text), 1)
                     if re.search(r"\d{4000}", text_line)), None)
        raise ConfigError(f"{where}{'' if line is None else f':{line}'}: invalid TOML: a number "
                          "with thousands of digits (TOML integers are 64-bit)") from None


def _line_ends(text: str) -> tuple[list[str], list[str]]:
    """(lines without their ends, the CR each one carries before its LF) of TOML text: the edit
    keeps a CRLF file CRLF, and a file without a final newline without one."""
    raw = text.split("\n")
    return [line.removesuffix("\r") for line in raw], [
        "\r" if line.endswith("\r") else "" for line in raw]


def edit_drafter_schedule(text: str, where: str, k: int,
                          schedule: Sequence[Sequence[int]] | None) -> str:
    """Set [drafter] num_speculative_tokens = k and the per-batch-size schedule (None: remove
    it). ConfigError when the seat is not TOML, has no [drafter] table or keeps it in another
    form. Every other byte stays, line ends included (LF or CRLF, a missing final newline)."""
    data = _loads(text, where)
    if not isinstance(data.get("drafter"), dict):
        raise ConfigError(f"{where}: no [drafter] table: nothing to schedule (a seat without a "
                          "drafter does not speculate)")
    found = key_lines(text)
    table_line = found.get(("drafter",))
    k_line = found.get(("drafter", "num_speculative_tokens"))
    if table_line is None or k_line is None:
        raise ConfigError(f"{where}: [drafter] num_speculative_tokens not found as a line of a "
                          "[drafter] table; edit the seat by hand")
    lines, crs = _line_ends(text)
    # the CR a new line break gets: the file's own style (a CRLF file stays CRLF)
    new_cr = "\r" if "\r\n" in text else ""
    sched_line = found.get(("drafter", "num_speculative_tokens_per_batch_size"))
    new_sched = None if schedule is None else (
        "num_speculative_tokens_per_batch_size = "
        + json.dumps([list(e) for e in schedule]))
    # (first index, last index, replacement lines with their CRs); a replaced value keeps the
    # CR of its last line
    edits: list[tuple[int, int, list[str]]] = []
    last_index = len(lines) - 1
    k_index = k_line - 1
    indent = lines[k_index][: len(lines[k_index]) - len(lines[k_index].lstrip())]
    k_end = _value_end(lines, k_index, lines[k_index].index("=") + 1)
    k_text = f"{indent}num_speculative_tokens = {k}" + _comment_of(lines[k_end])
    if sched_line is not None:
        s_index = sched_line - 1
        s_end = _value_end(lines, s_index, lines[s_index].index("=") + 1)
        replacement = ([] if new_sched is None
                       else [indent + new_sched + _comment_of(lines[s_end]) + crs[s_end]])
        edits.append((s_index, s_end, replacement))
        edits.append((k_index, k_end, [k_text + crs[k_end]]))
    elif new_sched is not None:
        # a line after the value: it ends as the value's line ended; the value's line gets a
        # line break of the file's style when it was the last line
        k_cr = new_cr if k_end == last_index else crs[k_end]
        edits.append((k_index, k_end, [k_text + k_cr, indent + new_sched + crs[k_end]]))
    else:
        edits.append((k_index, k_end, [k_text + crs[k_end]]))
    raw = [line + cr for line, cr in zip(lines, crs, strict=True)]
    for first, last, replacement in sorted(edits, key=lambda e: e[0], reverse=True):
        raw[first : last + 1] = replacement
    if sched_line is not None and new_sched is None and raw and s_end == last_index:
        # the removed schedule was the last line, without a final newline: so is the new last
        raw[-1] = raw[-1].removesuffix("\r")
    edited = "\n".join(raw)
    _check_only_schedule_changed(data, _loads(edited, where), k, schedule, where)
    return edited


def _check_only_schedule_changed(before: dict[str, Any], after: dict[str, Any], k: int,
                                 schedule: Sequence[Sequence[int]] | None, where: str) -> None:
    expected = json.loads(json.dumps(before))
    expected["drafter"]["num_speculative_tokens"] = k
    if schedule is None:
        expected["drafter"].pop("num_speculative_tokens_per_batch_size", None)
    else:
        expected["drafter"]["num_speculative_tokens_per_batch_size"] = [list(e) for e in schedule]
    if json.loads(json.dumps(after)) != expected:
        raise ConfigError(f"{where}: editing the [drafter] schedule would change other keys; "
                          "edit the seat by hand")
