"""Map a key path (a pydantic error location) to its line in TOML text.

tomllib keeps no positions, so this scans the text: table headers, array-of-tables headers
(counted, so `expect_log[1].pattern` finds the second `[[expect_log]]`), dotted and quoted keys,
and skips multi-line strings and arrays so a value that looks like a key is not taken for one.
Lines are TOML lines: split at LF only (a CR before it is dropped). `str.splitlines()` also
splits at U+0085, U+2028, VT, FF ..., which TOML allows inside strings, and would shift every
line number after such a string.

The one TOML loader (rocmseat.tomlio) uses it to name the line of a key; the seat loader and the
config key's errors too. Pure: text in, line number or text out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rocmseat.text import printable

Loc = tuple[str | int, ...]

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_MAX_DOTTED_PREFIXES = 64

def toml_lines(text: str) -> list[str]:
    """The lines of TOML text as TOML counts them (LF or CRLF ends a line)."""
    return [line.removesuffix("\r") for line in text.split("\n")]


# What matters to nesting: string delimiters, escapes, comments, brackets, line ends.
_NESTING_TOKEN = re.compile(r'"""|' + r"'''|" + r"""["'#\[\]{}\n\\]""")


def too_deep_line(text: str, limit: int) -> int | None:
    """The line where arrays and inline tables nest deeper than `limit`, or None.

    Run before tomllib, which parses nested values by recursion and dies with RecursionError a
    few hundred levels down. Strings and comments are skipped; a table header counts one or two
    levels on its own line. Malformed text still gets an answer in linear time (tomllib then
    names what is malformed).
    """
    depth, line, pos = 0, 1, 0
    in_string: str | None = None  # the open delimiter
    in_comment = False
    while True:
        match = _NESTING_TOKEN.search(text, pos)
        if match is None:
            return None
        token = match.group()
        pos = match.end()
        if token == "\n":
            line += 1
            in_comment = False
            if in_string in ('"', "'"):
                in_string = None  # a one-line string never spans lines: malformed, go on
        elif in_comment:
            continue
        elif in_string is not None:
            pos, in_string = _string_token(text, pos, token, in_string)
        elif token in ('"', "'", '"""', "'''"):
            in_string = token
        elif token == "#":
            in_comment = True
        elif token in "[{":
            depth += 1
            if depth > limit:
                return line
        elif token in "]}":
            depth = max(0, depth - 1)


def _string_token(text: str, pos: int, token: str, in_string: str) -> tuple[int, str | None]:
    """A token inside an open string: an escape skips the next character (in the basic
    strings); the string's own delimiter closes it. Returns the new position and string."""
    if token == "\\" and in_string in ('"', '"""'):
        return pos + (1 if text[pos : pos + 1] != "\n" else 0), in_string  # skip the escaped
    if token == in_string:
        return pos, None
    return pos, in_string


def key_lines(text: str) -> dict[Loc, int]:
    """Every table header and key of `text` -> its 1-based line (the first one wins)."""
    found: dict[Loc, int] = {}
    aot_counts: dict[Loc, int] = {}
    current: Loc = ()
    depth = 0  # open [ / { of a value that spans lines
    in_string: str | None = None  # the open multi-line string delimiter
    for number, line in enumerate(toml_lines(text), start=1):
        if in_string is not None or depth > 0:
            depth, in_string = _scan_value(line, 0, depth, in_string)
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("["):
            is_aot = stripped.startswith("[[")
            inner = stripped[2:] if is_aot else stripped[1:]
            parts, _ = _parse_key(inner, 0)
            if not parts:
                continue
            path = _with_aot_indices(tuple(parts), aot_counts)
            if is_aot:
                index = aot_counts.get(path, -1) + 1
                aot_counts[path] = index
                path = (*path, index)
            current = path
            found.setdefault(current, number)
            continue
        parts, pos = _parse_key(line, 0)
        if not parts or pos >= len(line) or line[pos] != "=":
            continue
        full = (*current, *parts)
        # `a.b.c = 1` defines the tables a and a.b on this line too (bounded: a hostile dotted
        # key of thousands of parts must not cost quadratic time)
        for end in range(1, min(len(parts), _MAX_DOTTED_PREFIXES)):
            found.setdefault((*current, *parts[:end]), number)
        found.setdefault(full, number)
        _inline_keys(line, pos + 1, full, number, found)
        depth, in_string = _scan_value(line, pos + 1, 0, None)
    return found


def locate(text: str, loc: Sequence[str | int]) -> int | None:
    """The line of the longest prefix of `loc` present in `text` (None: not even the table)."""
    lines = key_lines(text)
    path = tuple(loc)
    while path:
        if path in lines:
            return lines[path]
        path = path[:-1]
    return None


def _with_aot_indices(path: Loc, aot_counts: dict[Loc, int]) -> Loc:
    """`[expect_log.sub]` under the latest `[[expect_log]]` belongs to that element."""
    out: list[str | int] = []
    for part in path:
        out.append(part)
        key = tuple(out)
        if key in aot_counts and len(out) < len(path):
            out.append(aot_counts[key])
    return tuple(out)


def _parse_key(line: str, pos: int) -> tuple[list[str], int]:
    """Parse `a."b c".d` starting at pos; return the parts and the position after them."""
    parts: list[str] = []
    while True:
        pos = _skip_space(line, pos)
        if pos >= len(line):
            return parts, pos
        char = line[pos]
        if char in "\"'":
            end = line.find(char, pos + 1)
            if end < 0:
                return [], pos
            parts.append(line[pos + 1 : end])
            pos = end + 1
        else:
            match = _BARE.match(line, pos)
            if match is None:
                return parts, pos
            parts.append(match.group())
            pos = match.end()
        pos = _skip_space(line, pos)
        if pos < len(line) and line[pos] == ".":
            pos += 1
            continue
        return parts, pos


def _inline_keys(line: str, pos: int, prefix: Loc, number: int, found: dict[Loc, int]) -> None:
    """Record the keys of an inline table `{ a = 1, b = { c = 2 } }` on this line."""
    pos = _skip_space(line, pos)
    if pos >= len(line) or line[pos] != "{":
        return
    stack: list[Loc] = [prefix]
    pos += 1
    expect_key = True
    while pos < len(line) and stack:
        pos = _skip_space(line, pos)
        if pos >= len(line):
            break
        char = line[pos]
        if char == "}":
            stack.pop()
            pos += 1
            expect_key = False
        elif char == ",":
            pos += 1
            expect_key = True
        elif expect_key:
            parts, pos = _parse_key(line, pos)
            if not parts or pos >= len(line) or line[pos] != "=":
                return
            full = (*stack[-1], *parts)
            found.setdefault(full, number)
            pos = _skip_space(line, pos + 1)
            if pos < len(line) and line[pos] == "{":
                stack.append(full)
                pos += 1
                expect_key = True
            else:
                expect_key = False
        else:
            pos = _skip_scalar(line, pos)


def _skip_scalar(line: str, pos: int) -> int:
    """Skip one value (string, array or bare scalar) inside an inline table."""
    char = line[pos]
    if char in "\"'":
        end = pos + 1
        while end < len(line) and line[end] != char:
            end += 2 if char == '"' and line[end] == "\\" else 1
        return end + 1
    if char == "[":
        depth = 0
        while pos < len(line):
            if line[pos] == "[":
                depth += 1
            elif line[pos] == "]":
                depth -= 1
                if depth == 0:
                    return pos + 1
            pos += 1
        return pos
    while pos < len(line) and line[pos] not in ",}":
        pos += 1
    return pos


def _scan_value(line: str, pos: int, depth: int, in_string: str | None) -> tuple[int, str | None]:
    """Track open brackets and multi-line strings across lines (comments end the line)."""
    while pos < len(line):
        if in_string is not None:
            end = line.find(in_string, pos)
            if end < 0:
                return depth, in_string
            pos = end + 3
            in_string = None
            continue
        char = line[pos]
        if line.startswith('"""', pos) or line.startswith("'''", pos):
            in_string = line[pos : pos + 3]
            pos += 3
        elif char in "\"'":
            pos += 1
            while pos < len(line) and line[pos] != char:
                pos += 2 if char == '"' and line[pos] == "\\" else 1
            pos += 1
        elif char == "#":
            break
        elif char in "[{":
            depth += 1
            pos += 1
        elif char in "]}":
            depth = max(0, depth - 1)
            pos += 1
        else:
            pos += 1
    return depth, in_string


def _skip_space(line: str, pos: int) -> int:
    while pos < len(line) and line[pos] in " \t":
        pos += 1
    return pos


def format_loc(loc: Sequence[str | int]) -> str:
    """('expect_log', 1, 'pattern') -> 'expect_log[1].pattern' (control characters escaped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return printable(out)
