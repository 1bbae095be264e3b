"""Seat files written for the gate's arms, and `spec advise --write`: only the [drafter]
schedule lines change, comments and layout stay (rocmseat/speculation/advise/seatedit.py)."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path

import pytest

from rocmseat.errors import ConfigError
from rocmseat.seat.load import load_seat, parse_seat
from rocmseat.speculation.advise.seatedit import dump_toml, edit_drafter_schedule
from rocmseat.speculation.gate.arms import arm_seat_text
from rocmseat.speculation.gate.settings import load_seat_with_gate
from tests.conftest import REPO

DEMO_SEAT = REPO / "launchers" / "demo-cpu.toml"
ROCM_SEAT = REPO / "launchers" / "r9700-mxfp4-dflash.toml"


def changed_lines(before: str, after: str) -> list[str]:
    return [line for line in difflib.unified_diff(before.splitlines(), after.splitlines(),
                                                  lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_write_changes_only_the_schedule_lines_of_a_real_seat():
    text = DEMO_SEAT.read_text()
    edited = edit_drafter_schedule(text, "demo-cpu.toml", 2, [(1, 2, 2), (3, 4, 0)])
    assert changed_lines(text, edited) == [
        "-num_speculative_tokens = 3",
        "+num_speculative_tokens = 2",
        "+num_speculative_tokens_per_batch_size = [[1, 2, 2], [3, 4, 0]]",
    ]
    data = tomllib.loads(edited)
    assert data["drafter"]["num_speculative_tokens_per_batch_size"] == [[1, 2, 2], [3, 4, 0]]
    parse_seat(edited, DEMO_SEAT)  # still a valid seat for rocmseat's own loader


def test_write_keeps_trailing_comments_and_replaces_a_multiline_schedule():
    text = (
        "name = \"x\"\n\n[drafter]  # the drafter\n"
        "method = \"draft_model\"\npath = \"/m/d\"\n"
        "num_speculative_tokens = 5   # deepest K\n"
        "num_speculative_tokens_per_batch_size = [\n  [1, 8, 5],  # quiet hours\n"
        "  [9, 64, 3],\n]  # busy\n# a comment after\n[serve]\nport_base = 8000\n"
    )
    edited = edit_drafter_schedule(text, "s.toml", 4, [(1, 4, 4), (5, 64, 0)])
    # the replaced line keeps its comment and the spacing before it (tomlkit's trivia)
    assert edited.splitlines()[5] == "num_speculative_tokens = 4   # deepest K"
    assert edited.splitlines()[6] == (
        "num_speculative_tokens_per_batch_size = [[1, 4, 4], [5, 64, 0]]  # busy")
    assert "# a comment after" in edited and "[drafter]  # the drafter" in edited
    assert tomllib.loads(edited)["serve"] == {"port_base": 8000}


def test_write_removes_a_schedule_that_is_no_longer_needed():
    text = ("[drafter]\nmethod = \"ngram\"\nnum_speculative_tokens = 3\n"
            "num_speculative_tokens_per_batch_size = [[1, 4, 3], [5, 8, 0]]\n")
    edited = edit_drafter_schedule(text, "s.toml", 3, None)
    assert tomllib.loads(edited)["drafter"] == {"method": "ngram", "num_speculative_tokens": 3}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name = \"x\"\n", "no \\[drafter\\] table"),
        ("drafter.method = \"ngram\"\ndrafter.num_speculative_tokens = 3\n",
         "edit the seat by hand|not found as a line"),
        ("[drafter]\nmethod = \"ngram\"\n", "not found"),
    ],
)
def test_write_refuses_what_it_cannot_edit_safely(text, message):
    with pytest.raises(ConfigError, match=message):
        edit_drafter_schedule(text, "s.toml", 2, [(1, 4, 2)])


@pytest.mark.parametrize("seat", [DEMO_SEAT, ROCM_SEAT])
def test_dump_toml_round_trips_real_seats(seat):
    data = tomllib.loads(seat.read_text())
    assert tomllib.loads(dump_toml(data, "header\nline two")) == data


def test_dump_toml_refuses_non_finite_numbers():
    with pytest.raises(ConfigError, match="non-finite"):
        dump_toml({"a": float("nan")})


def test_arm_seat_is_a_valid_seat_with_its_own_cache_state_and_port(tmp_path):
    seat_file = tmp_path / "cand.toml"
    seat_file.write_text(DEMO_SEAT.read_text().replace(
        '"/var/tmp/rocmseat-demo/models/drafter"', '"models/drafter"')
        + "\n[gate]\nrepeats = 2\n")
    source = load_seat_with_gate(seat_file)
    arm_dir = tmp_path / "out" / "arms" / "candidate"
    text = arm_seat_text(source, arm_dir=arm_dir, port_base=18500,
                         schedule=((1, 2, 3), (3, 4, 0)))
    arm_file = arm_dir / "seat.toml"
    arm_file.parent.mkdir(parents=True)
    arm_file.write_text(text)
    seat = load_seat(arm_file)
    assert seat.cache_root == arm_dir / "cache" and seat.state_dir == arm_dir / "state"
    assert seat.serve.port_base == 18500
    assert seat.drafter.path == tmp_path / "models" / "drafter"  # resolved against the source
    assert seat.drafter.num_speculative_tokens_per_batch_size == ((1, 2, 3), (3, 4, 0))
    assert seat.model.served_name == "demo"
    assert Path(text.splitlines()[0][2:].split(" from ")[-1].split(":")[0]).name == "cand.toml"


def test_the_api_key_the_benchmark_client_needs(tmp_path):
    from rocmseat.speculation.gate.arms import api_key

    def seat_with(extra: str) -> object:
        path = tmp_path / "s.toml"
        path.write_text(DEMO_SEAT.read_text().replace('dtype = "bfloat16"',
                                                      'dtype = "bfloat16"\n' + extra, 1))
        return load_seat(path)

    assert api_key(seat_with("")) is None
    assert api_key(seat_with('extra_args = ["--api-key", "sk-1"]')) == "sk-1"
    assert api_key(seat_with('extra_args = ["--api-key=sk-2"]')) == "sk-2"


def test_arm_seats_need_an_absolute_directory(tmp_path, monkeypatch):
    # a relative --out once put every arm's cache at out/arms/x/out/arms/x/cache (the seat loader
    # resolves relative paths against the seat file's directory)
    seat_file = tmp_path / "cand.toml"
    seat_file.write_text(DEMO_SEAT.read_text())
    source = load_seat_with_gate(seat_file)
    with pytest.raises(ValueError, match="must be absolute"):
        arm_seat_text(source, arm_dir=Path("out/arms/candidate"), port_base=18500,
                      schedule=None)


def test_write_keeps_crlf_line_endings_byte_for_byte():
    lf = DEMO_SEAT.read_text()
    crlf = lf.replace("\n", "\r\n")
    edited = edit_drafter_schedule(crlf, "demo-cpu.toml", 2, [(1, 2, 2), (3, 4, 0)])
    # exactly the LF edit, in the file's own line endings: nothing else changed
    assert edited == edit_drafter_schedule(lf, "demo-cpu.toml", 2,
                                           [(1, 2, 2), (3, 4, 0)]).replace("\n", "\r\n")
    assert edited.count("\n") == edited.count("\r\n") == crlf.count("\r\n") + 1
    # replacing and removing a schedule keep them too
    again = edit_drafter_schedule(edited, "demo-cpu.toml", 3, [(1, 4, 3), (5, 8, 0)])
    assert again.count("\n") == again.count("\r\n")
    removed = edit_drafter_schedule(again, "demo-cpu.toml", 3, None)
    assert removed == crlf


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_write_keeps_a_missing_final_newline(eol):
    text = eol.join(["[serve]", "port_base = 8000", "", "[drafter]  # last table",
                     'method = "ngram"', "num_speculative_tokens = 3  # K"])
    edited = edit_drafter_schedule(text, "s.toml", 2, [(1, 4, 2), (5, 8, 0)])
    assert edited == eol.join([*text.split(eol)[:-1], "num_speculative_tokens = 2  # K",
                               "num_speculative_tokens_per_batch_size = [[1, 4, 2], [5, 8, 0]]"])
    # the schedule is the last line: removing it leaves no dangling CR or LF at the end
    assert edit_drafter_schedule(edited, "s.toml", 3, None) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[drafter\nnum_speculative_tokens = 3\n", r"^s\.toml:1: invalid TOML: "),
        ("[drafter]\nnum_speculative_tokens = 3\nnum_speculative_tokens = 4\n",
         r"^s\.toml:3: invalid TOML: "),
        # the seat loader's own messages (one TOML parse for the loader and the editor)
        ("[drafter]\nnum_speculative_tokens = " + "1" * 5000 + "\n",
         r"^s\.toml:2: invalid TOML: key 'drafter\.num_speculative_tokens': a number with "
         r"thousands of digits"),
        ("x = " + "[" * 5000 + "\n", r"^s\.toml:1: invalid TOML: nested too deeply: arrays and "
                                      "inline tables nested more than"),
    ],
    ids=["unclosed table", "key set twice", "5000 digits", "nested 5000 deep"],
)
def test_write_refuses_a_seat_that_is_not_toml(text, message):
    # a traceback (TOMLDecodeError, ValueError, RecursionError: exit 3) before
    with pytest.raises(ConfigError, match=message):
        edit_drafter_schedule(text, "s.toml", 2, None)


def test_a_seat_with_a_date_is_edited():
    # TOML dates are values of a seat too: the check of the edit raised TypeError (exit 3)
    text = "stamp = 1979-05-27T07:32:00Z\n[drafter]\nnum_speculative_tokens = 3\n"
    edited = edit_drafter_schedule(text, "s.toml", 2, [(1, 4, 2), (5, 8, 0)])
    assert tomllib.loads(edited)["drafter"]["num_speculative_tokens"] == 2
    assert edited.startswith("stamp = 1979-05-27T07:32:00Z\n")
