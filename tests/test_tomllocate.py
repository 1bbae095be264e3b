"""The TOML key locator: tables of real layouts, and hypothesis over generated documents."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmseat.tomllocate import format_loc, key_lines, locate

DOC = """\
name = "x"   # a comment with key = "y"
tp = 2

[engine]
command = [
  "vllm",
  "serve = not a key",
]
python = "/p"

[drafter]
extra = { draft_tensor_parallel_size = 1, nested = { deep = 2 } }
"dotted.quoted" = 1
a.b = 3
text = \"\"\"
fake = 1
[not_a_table]
\"\"\"

[[expect_log]]
pattern = "a"

[[expect_log]]
pattern = "b"
when = "must_appear"

[env]
RADIANCE_X = "1"
"""


@pytest.mark.parametrize(
    ("loc", "line"),
    [
        (("name",), 1),
        (("tp",), 2),
        (("engine",), 4),
        (("engine", "command"), 5),
        (("engine", "command", 1), 5),
        (("engine", "python"), 9),
        (("drafter", "extra", "draft_tensor_parallel_size"), 12),
        (("drafter", "extra", "nested", "deep"), 12),
        (("drafter", "dotted.quoted"), 13),
        (("drafter", "a", "b"), 14),
        (("drafter", "text"), 15),
        (("drafter", "missing_key"), 11),
        (("expect_log", 0, "pattern"), 21),
        (("expect_log", 1, "pattern"), 24),
        (("expect_log", 1, "when"), 25),
        (("expect_log", 1), 23),
        (("env", "RADIANCE_X"), 28),
    ],
)
def test_locate_table(loc: tuple[str | int, ...], line: int) -> None:
    assert locate(DOC, loc) == line


def test_keys_inside_strings_and_arrays_are_not_keys() -> None:
    lines = key_lines(DOC)
    assert ("fake",) not in lines and ("drafter", "fake") not in lines
    assert ("not_a_table",) not in lines
    assert ("engine", '"serve') not in lines


def test_absent_table_is_none() -> None:
    assert locate(DOC, ("watch", "interval_s")) is None


def test_format_loc() -> None:
    assert format_loc(("expect_log", 1, "pattern")) == "expect_log[1].pattern"
    assert format_loc(("replicas", "pairs", 0, 1)) == "replicas.pairs[0][1]"


_names = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
_values = st.one_of(
    st.integers(-5, 5).map(str),
    st.text(alphabet="ab =[]#{}", max_size=6).map(lambda t: '"' + t + '"'),
    st.just("[\n  1,\n  2,\n]"),
)


@settings(max_examples=150, deadline=None)
@given(
    tables=st.dictionaries(
        _names, st.dictionaries(_names, _values, min_size=1, max_size=4), min_size=1, max_size=4
    )
)
def test_generated_documents(tables: dict[str, dict[str, str]]) -> None:
    lines: list[str] = []
    expected: dict[tuple[str, ...], int] = {}
    for table, keys in tables.items():
        lines.append(f"[{table}]")
        expected[(table,)] = len(lines)
        for key, value in keys.items():
            first, *rest = value.split("\n")
            lines.append(f"{key} = {first}  # {key} = 0")
            expected[(table, key)] = len(lines)
            lines.extend(rest)
        lines.append("")
    text = "\n".join(lines)
    tomllib.loads(text)  # the generated document is valid TOML
    for loc, line in expected.items():
        assert locate(text, loc) == line, (loc, text)


def test_lines_are_toml_lines() -> None:
    """TOML ends a line at LF only; str.splitlines() also splits at U+0085, U+2028, U+2029, VT and
    FF, which TOML allows raw in strings and comments, and shifted every later line number."""
    text = 'name = "a\x85b\u2028c"  # d\u2029e\ntp = 2\r\n[serve]\nport_base = 1\n'
    assert tomllib.loads(text)["tp"] == 2
    assert locate(text, ("tp",)) == 2
    assert locate(text, ("serve", "port_base")) == 4


def test_seat_error_after_a_line_separator_names_the_right_line() -> None:
    from pathlib import Path

    from rocmseat.errors import ConfigError
    from rocmseat.seat.load import parse_seat
    from tests.conftest import REPO

    demo = (REPO / "launchers" / "demo-cpu.toml").read_text()
    text = "# a comment with \u2028 and \x85 in it\n" + demo.replace("tp = 1", 'tp = "one"')
    line = 1 + next(n for n, ln in enumerate(demo.split("\n"), 1) if ln.startswith("tp = "))
    expected = rf"^x\.toml:{line}: key 'tp': Input should be a valid integer"
    with pytest.raises(ConfigError, match=expected):
        parse_seat(text, Path("x.toml"))


def test_dotted_keys_define_their_tables_on_their_line() -> None:
    text = "[drafter]\nmethod = 'x'\nextra.a.b = 1\n"
    assert locate(text, ("drafter", "extra", "a", "b", "c")) == 3
    assert locate(text, ("drafter", "extra", "a")) == 3
    assert locate(text, ("drafter", "extra")) == 3


def test_format_loc_escapes_control_characters() -> None:
    assert format_loc(("env", "A\nB")) == "env.A\\nB"
    assert format_loc(("env", "A\x00\u2028")) == "env.A\\x00\\u2028"


@pytest.mark.parametrize(("text", "line"), [
    ("a = " + "[" * 17 + "]" * 17, 1),
    ("a = " + "[" * 16 + "]" * 16, None),
    ("a = 1\nb = [\n" + "[\n" * 20 + "]\n" * 21, 18),
    ("a = '" + "[" * 40 + "'\nb = \"" + "{\\\"" * 40 + "\"\n# " + "[" * 40, None),
    ('a = """\n' + "[" * 40 + '\n"""\nb = ' + "[" * 17 + "]" * 17, 4),
    ("[" * 5000, 1),
    ("a = [\n" * 17 + "]", 17),
])
def test_too_deep_line(text: str, line: int | None) -> None:
    from rocmseat.tomllocate import too_deep_line

    assert too_deep_line(text, 16) == line
