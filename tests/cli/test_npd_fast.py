"""The cached NPD answer without click (rocmseat.cli.npd_fast, issue 32 "Speed: preflight's
start"): every command line of the table gives the same stdout, stderr and exit code through
the fast path as through click, and goes the way the table says (answered without click, or
handed to click)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import click
import pytest

from rocmseat.cli import npd_fast
from rocmseat.cli.main import main
from rocmseat.preflight.verdict_doc import verdict_path
from tests.conftest import REPO
from tests.preflight.test_verdict_doc import BOOT_A, BOOT_B, _proc
from tests.sysfs.conftest import SYSFS_FIXTURES

X99 = SYSFS_FIXTURES / "x99-r9700"
PROFILE = REPO / "checks" / "x99-r9700.toml"

# (name, args after `preflight` ({x99}, {state}, {tmp} filled in), answered without click)
CASES = [
    ("fresh", "--format npd --cached", True),
    ("fresh, = forms", "--format=npd --cached --sysfs-root={x99} --state-dir={state}", True),
    ("options in any order", "--cached --only pcie --format npd --strict", True),
    ("two families", "--format npd --cached --only pcie --only xgmi", True),
    ("max-age", "--format npd --cached --max-age 60", True),
    ("max-age=", "--format npd --cached --max-age=900.5", True),
    ("stale", "--format npd --cached --max-age 1 {stale}", True),
    ("profile not in the run", f"--format npd --cached --profile {PROFILE}", True),
    ("profile missing", "--format npd --cached --profile {tmp}/nope.toml", True),
    ("strict", "--format npd --cached --strict", True),
    # handed to click: its own errors, or conversions this path does not repeat
    ("help", "--format npd --cached --help", False),
    ("no --format", "--cached", False),
    ("other format", "--format json --cached", False),
    ("--json too", "--json --format npd --cached", False),
    ("a pair", "--format npd --cached --pair 05:00.0,09:00.0", False),
    ("max-age out of range", "--format npd --cached --max-age 0", False),
    ("max-age as click reads it", "--format npd --cached --max-age 1e3", False),
    ("max-age not a number", "--format npd --cached --max-age soon", False),
    ("unknown family", "--format npd --cached --only gpu", False),
    ("a family's other case", "--format npd --cached --only PCIE", False),
    ("a value like an option", "--format npd --cached --profile --strict", False),
    ("a flag with a value", "--format npd --cached=yes", False),
    ("twice", "--format npd --cached --cached", False),
    ("profile a directory", "--format npd --cached --profile {tmp}", False),
    ("state dir a file", "--format npd --cached --state-dir {tmp}/afile", False),
    ("no value", "--format npd --cached --profile", False),
    ("an argument", "--format npd --cached extra", False),
    ("unknown option", "--format npd --cached --no-hip", False),
]


def _run(args: list[str], *, fast: bool, capsys: pytest.CaptureFixture[str],
         monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str, bool]:
    """(exit code, stdout, stderr, answered without click) of `rocmseat ARGS`, with the fast
    path, or with it turned off (click answers everything)."""
    answered: list[bool] = []
    real = npd_fast.answer

    def spy(argv: list[str]) -> int | None:
        try:
            code = real(argv) if fast else None
        except BaseException:  # answered: its error goes to the boundary, as click's would
            answered.append(True)
            raise
        answered.append(code is not None)
        return code

    with monkeypatch.context() as patch:
        patch.setattr(npd_fast, "answer", spy)
        capsys.readouterr()
        code = main(args)
        out, err = capsys.readouterr()
    assert answered, "the console entry did not ask the fast path"
    return code, out, err, answered[0]


@pytest.fixture
def verdict(tmp_path, capsys, monkeypatch):
    """A state dir holding the fixture's verdict, this boot's (a proc root of its own)."""
    monkeypatch.setenv("ROCMSEAT_PROC_ROOT", str(_proc(tmp_path, BOOT_A)))
    state = tmp_path / "state"
    assert main(["preflight", "--sysfs-root", str(X99), "--state-dir", str(state)]) == 0
    capsys.readouterr()
    (tmp_path / "afile").write_text("")
    return state


def _args(text: str, tmp_path, state) -> list[str]:
    text = text.replace("{stale}", "")
    filled = text.format(x99=X99, state=state, tmp=tmp_path).split()
    given = " ".join(filled)
    if "--sysfs-root" not in given:
        filled += ["--sysfs-root", str(X99)]
    if "--state-dir" not in given:
        filled += ["--state-dir", str(state)]
    return ["preflight", *filled]


@pytest.mark.parametrize(("name", "text", "fast"), CASES, ids=[case[0] for case in CASES])
def test_both_paths_print_the_same_bytes(name, text, fast, verdict, tmp_path, capsys,
                                         monkeypatch):
    args = _args(text, tmp_path, verdict)
    if "{stale}" in text:
        later = time.time() + 30
        monkeypatch.setattr(time, "time", lambda: later)
    with_fast = _run(args, fast=True, capsys=capsys, monkeypatch=monkeypatch)
    with_click = _run(args, fast=False, capsys=capsys, monkeypatch=monkeypatch)
    assert with_fast[3] is fast, with_fast
    assert with_fast[:3] == with_click[:3]
    assert with_click[3] is False


def test_the_states_of_the_verdict_print_the_same_bytes(verdict, tmp_path, capsys, monkeypatch):
    """Missing, untrusted, another boot, another host, torn, a run that judged nothing: each
    answered by the fast path, each the bytes click prints."""
    args = _args("--format npd --cached", tmp_path, verdict)
    seen: dict[str, tuple[int, str, str, bool]] = {}

    def both(label: str) -> None:
        fast = _run(args, fast=True, capsys=capsys, monkeypatch=monkeypatch)
        assert fast[3], label
        assert fast[:3] == _run(args, fast=False, capsys=capsys, monkeypatch=monkeypatch)[:3]
        seen[label] = fast

    both("fresh")
    _proc(tmp_path, BOOT_B)
    both("another boot")
    _proc(tmp_path, BOOT_A, host="gpu08")
    both("another host")
    _proc(tmp_path, BOOT_A)
    path = verdict_path(verdict)
    good = path.read_text()
    path.write_text(good[: len(good) // 2])
    both("torn")
    doc = json.loads(good)
    doc["findings"][0]["message"] = "two\nlines"
    path.write_text(json.dumps(doc))
    both("hostile text")
    path.write_text(good)
    os.chmod(path.parent, 0o777)
    both("untrusted")
    os.chmod(path.parent, 0o700)
    path.unlink()
    both("missing")
    assert seen["fresh"][1].startswith("OK: ")
    assert {label: result[0] for label, result in seen.items()} == {
        "fresh": 0, "another boot": 2, "another host": 2, "torn": 2, "hostile text": 2,
        "untrusted": 2, "missing": 2}
    assert len({result[1] for result in seen.values()}) == len(seen)  # each its own line


def test_the_environment_variables_are_read_as_click_reads_them(verdict, tmp_path, capsys,
                                                                monkeypatch):
    monkeypatch.setenv("ROCMSEAT_SYSFS_ROOT", str(X99))
    monkeypatch.setenv("ROCMSEAT_STATE_DIR", str(verdict))
    args = ["preflight", "--format", "npd", "--cached"]
    fast = _run(args, fast=True, capsys=capsys, monkeypatch=monkeypatch)
    assert fast[3] and fast[0] == 0
    assert fast[:3] == _run(args, fast=False, capsys=capsys, monkeypatch=monkeypatch)[:3]
    # an empty variable is unset to click: the option decides; a variable naming a file is
    # click's error
    monkeypatch.setenv("ROCMSEAT_STATE_DIR", "")
    given = [*args, "--state-dir", str(verdict)]
    fast = _run(given, fast=True, capsys=capsys, monkeypatch=monkeypatch)
    assert fast[3] and fast[:3] == _run(given, fast=False, capsys=capsys,
                                        monkeypatch=monkeypatch)[:3]
    monkeypatch.setenv("ROCMSEAT_STATE_DIR", str(tmp_path / "afile"))
    fast = _run(args, fast=True, capsys=capsys, monkeypatch=monkeypatch)
    assert not fast[3] and fast[0] == 2
    assert fast[:3] == _run(args, fast=False, capsys=capsys, monkeypatch=monkeypatch)[:3]


def test_the_table_of_options_is_the_commands():
    from rocmseat.cli.preflight import preflight

    params = {param.name: param for param in preflight.params}
    only = params["only"].type
    assert isinstance(only, click.Choice)
    assert set(only.choices) == npd_fast.FAMILIES
    max_age = params["max_age_s"].type
    assert isinstance(max_age, click.FloatRange)
    assert (max_age.min, max_age.max) == npd_fast.MAX_AGE_RANGE_S
    from rocmseat.preflight.verdict_doc import DEFAULT_MAX_AGE_S

    assert params["max_age_s"].default == DEFAULT_MAX_AGE_S  # the one npd_fast reads
    assert {params["sysfs_root"].envvar, params["state_dir"].envvar} == {
        "ROCMSEAT_SYSFS_ROOT", "ROCMSEAT_STATE_DIR"}
    taken = {opt for param in preflight.params for opt in getattr(param, "opts", ())
             if param.name in ("output_format", "cached", "sysfs_root", "state_dir", "profile",
                               "max_age_s", "only", "strict")}
    assert taken == set(npd_fast._VALUED) | set(npd_fast._FLAGS)


def test_the_console_script_answers_without_click_or_pydantic_core(verdict, tmp_path):
    code = ("import sys; from rocmseat.cli.main import main; rc = main(sys.argv[1:]); "
            "print(rc, sorted(m for m in ('click', 'pydantic', 'pydantic_core', 'rich') "
            "if m in sys.modules), file=sys.stderr)")
    args = ["preflight", "--sysfs-root", str(X99), "--state-dir", str(verdict), "--format",
            "npd", "--cached"]
    env = {**os.environ, "ROCMSEAT_PROC_ROOT": str(tmp_path / "proc")}
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env=env)
    assert proc.stdout.startswith("OK: "), proc.stderr
    assert proc.stderr.splitlines()[-1] == "0 []"
    # the check can fail: a command line the fast path does not take imports click
    proc = subprocess.run([sys.executable, "-c", code, *args, "--max-age", "1e3"],
                          capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert proc.stderr.splitlines()[-1] == "0 ['click']"
