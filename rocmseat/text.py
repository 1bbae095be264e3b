"""Text for one-line messages: the control-character rule (docs/seat.md, "Hostile input") and
`printable`, which every error message uses to show a key, a value or a path on one line.

A foundation module (docs/architecture.md, "The house"): every room uses it, it imports nothing
of rocmseat. Pure: text in, text out.
"""

from __future__ import annotations

import re

# C0 (NUL ... US, which holds TAB, LF and CR), DEL and C1 (U+0080 ... U+009F): systemd reads NUL,
# CR and LF as line ends, so one of them in a path or a value written into a unit adds a line
# (an `ExecStartPre=+`, a `User=root`); NUL truncates a C string (execve, environ). U+2028 and
# U+2029 are line ends to Python's str.splitlines and to log viewers.
# The rule, once: CONTROL_CLASS is the body of a character class in escape text, for patterns
# built on it (a schema's `pattern`, a class with a few more characters); everything else uses
# CONTROL_CHARS, `control_char`, `replace_controls` or `printable`.
CONTROL_CLASS = r"\x00-\x1f\x7f-\x9f\u2028\u2029"
CONTROL_CHARS = re.compile(f"[{CONTROL_CLASS}]")
_CHAR_NAMES = {0x00: "NUL", 0x09: "TAB", 0x0A: "LF", 0x0D: "CR", 0x1B: "ESC", 0x7F: "DEL",
               0x85: "NEL", 0x2028: "LINE SEPARATOR", 0x2029: "PARAGRAPH SEPARATOR"}


def control_char(text: str, allowed: str = "") -> tuple[int, str] | None:
    """(offset, name) of the first control character of `text` not in `allowed`, or None."""
    for match in CONTROL_CHARS.finditer(text):
        if match.group() not in allowed:
            code = ord(match.group())
            name = _CHAR_NAMES.get(code)
            return match.start(), f"U+{code:04X}" + (f" ({name})" if name else "")
    return None


def replace_controls(text: str, replacement: str = "?") -> str:
    """`text` with every control character replaced (one line, nothing a terminal acts on)."""
    return CONTROL_CHARS.sub(replacement, text)


def printable(text: str, limit: int = 200) -> str:
    """`text` for a one-line message: control characters escaped, cut to `limit` characters."""
    shown = CONTROL_CHARS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."
