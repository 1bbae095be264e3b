"""The one hostile-input TOML loader: seat files, expectation profiles and the seat edits of the
speculation room read their TOML here (docs/seat.md, "Hostile input").

A file is read only when it is a regular file of at most `limit_bytes` (rocmseat.safeio: never
a FIFO, a device or /dev/zero), decoded as UTF-8 (TOML's only encoding) with the line of a bad
byte named, checked for nesting deeper than MAX_NESTING before tomllib recurses, and parsed
with every failure one located ConfigError, exit 2: the file, the line and, where there is
one, the key. tomllib raises TOMLDecodeError for syntax, RecursionError for deep nesting and
ValueError (not a TOMLDecodeError) for an integer of more than 4,300 digits; each becomes such a
line, never a traceback.

`TomlDoc.error(loc, why)` locates a key of the parsed document in its text (the locator of
rocmseat.tomllocate: table headers, arrays of tables, dotted and inline keys), so a later
check names the same file, line and key. Pure past the read: `parse_toml` takes text.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.errors import ConfigError, ReadError
from rocmseat.safeio import DEFAULT_LIMIT_BYTES, read_regular_bytes
from rocmseat.text import printable
from rocmseat.tomllocate import Loc, format_loc, locate, toml_lines, too_deep_line

# Tables, arrays and inline tables, counted from the top of the document: the one limit of the
# house (a seat needs 4; [drafter] extra and profiles a few more).
MAX_NESTING = 16
INVALID = "invalid TOML"

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_LONG_NUMBER = re.compile(r"[0-9A-Fa-f_]{1000,}")


@dataclass(frozen=True, slots=True)
class TomlDoc:
    data: dict[str, Any]
    text: str
    shown: str  # the path as errors show it (control characters escaped)
    sha256: str  # of the file's bytes (a cached verdict names the profile it used)

    def line_of(self, loc: Loc) -> int | None:
        """The line of the longest prefix of `loc` written in the text (None: not even that)."""
        return locate(self.text, loc)

    def error(self, loc: Loc, why: str, hint: str | None = None) -> ConfigError:
        """"FILE:LINE: key 'a.b[0].c': why" (the line left out when the key is not written)."""
        line = self.line_of(loc)
        where = f"{self.shown}:{line}" if line is not None else self.shown
        return ConfigError(f"{where}: key '{format_loc(loc)}': {printable(why, 500)}", hint=hint)


def load_toml(path: Path, *, what: str, limit_bytes: int = DEFAULT_LIMIT_BYTES,
              invalid: str = INVALID) -> TomlDoc:
    """Read and parse the TOML file at `path` (`what` names it in errors: "seat file",
    "profile"); `invalid` is the words of a syntax error ("invalid TOML")."""
    shown = printable(str(path), 4096)
    try:
        raw = read_regular_bytes(path, limit_bytes=limit_bytes)
    except ReadError as exc:
        raise ConfigError(f"{shown}: cannot read the {what}: {printable(exc.cause)}") from None
    try:
        text = raw.decode("utf-8")  # TOML is UTF-8 (toml.io, v1.0.0 "Spec")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{shown}:{line}: not UTF-8 text (byte {exc.start})") from None
    return parse_toml(text, shown, invalid=invalid, sha256=hashlib.sha256(raw).hexdigest())


def parse_toml(text: str, shown: str, *, invalid: str = INVALID, sha256: str = "") -> TomlDoc:
    """`text` parsed, every failure one located ConfigError (`shown` names the file)."""
    deep = too_deep_line(text, MAX_NESTING)
    if deep is not None:
        raise ConfigError(f"{shown}:{deep}: {invalid}: nested too deeply: arrays and inline "
                          f"tables nested more than {MAX_NESTING} levels deep")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _TOML_POSITION.search(message)
        if match is None:  # "(at end of document)": the last line
            last = len(toml_lines(text.rstrip("\n")))
            raise ConfigError(f"{shown}:{last}: {invalid}: {printable(message)}") from None
        why = message[: match.start()]
        line_no = int(match.group(1))
        key = key_on_line(text, line_no) if "overwrite" in why or "declare" in why else None
        if key is not None:
            why = f"key '{printable(key, 80)}' is set twice ({why})"
        raise ConfigError(
            f"{shown}:{line_no}: {invalid}: {printable(why)} (column {match.group(2)})"
        ) from None
    except RecursionError:
        raise ConfigError(f"{shown}: {invalid}: nested too deeply") from None
    except ValueError:
        # int() of more than sys.get_int_max_str_digits() digits (4300)
        run = _LONG_NUMBER.search(text)
        line = text.count("\n", 0, run.start()) + 1 if run is not None else None
        key = key_on_line(text, line) if line is not None else None
        where = shown if line is None else f"{shown}:{line}"
        named = f"key '{printable(key, 80)}': " if key is not None else ""
        raise ConfigError(f"{where}: {invalid}: {named}a number with thousands of digits (TOML "
                          "integers are 64-bit)") from None
    return TomlDoc(data, text, shown, sha256)


def key_on_line(text: str, line_no: int) -> str | None:
    """The dotted key, with the table it sits in, or the table header written on a line."""
    lines = toml_lines(text)
    if not 0 < line_no <= len(lines):
        return None
    line = lines[line_no - 1].strip()
    if line.startswith("["):
        return line.strip("[]").strip() or None
    name = line.split("=", 1)[0].strip() if "=" in line else line
    if not name:
        return None
    table = next((t.strip().strip("[]").strip() for t in reversed(lines[: line_no - 1])
                  if t.strip().startswith("[")), "")
    return f"{table}.{name}" if table and "=" in line else name
