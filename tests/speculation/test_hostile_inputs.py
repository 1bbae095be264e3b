"""Issue 18 (hostile round 3), the speculation room's items: each test is the issue's command,
before (in the comment) and after. Items 1 (writes into a handed directory), 4 (credentials of
--target), 10 (crashes), 11 (inconsistent inputs) and 12 (flags)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.speculation.test_advice import Pages
from tests.speculation.test_cli_spec import _seat

GATE = FIXTURES / "spec" / "gate-cpu-deep"
CAND_ARM = "arms/candidate/arm.json"


@pytest.fixture
def gate_dir(tmp_path):
    """A copy of the shipped gate without the pictures it carries (these tests plant things at
    their names, or list the directory)."""
    copy = tmp_path / "gate"
    shutil.copytree(GATE, copy)
    for picture in ("gate.png", "advise.png"):
        (copy / picture).unlink()
    return copy


def _edit(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _decode(doc, index=0):
    return [r for r in doc["runs"] if r["phase"] == "decode"][index]


def _advise(cli, gate_dir, *more):
    return cli("spec", "advise", "--from-gate", str(gate_dir), *more)


def _one_line_error(result, *, code=2):
    assert result.exit_code == code, (result.exit_code, result.stderr, result.stdout[-300:])
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert lines and lines[0].startswith("rocmseat: error: ")
    assert len(lines) <= 2
    return lines[0]


# --- item 1: writes follow links out of the gate directory -------------------------------

def test_a_link_at_advise_png_is_not_written_through(rocmseat_cli, gate_dir, tmp_path):
    # before: exit 1 with advice, and notes.txt was a PNG (savefig followed the link)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    (gate_dir / "advise.png").symlink_to(notes)
    result = _advise(rocmseat_cli, gate_dir, "--json")
    assert result.exit_code == 2, result.stderr  # the gate could not decide (one answer)
    doc = json.loads(result.stdout)
    assert notes.read_text() == "my notes\n" and (gate_dir / "advise.png").is_symlink()
    assert doc["picture"] is None
    assert doc["picture_note"] == (f"{gate_dir / 'advise.png'}: not written: is a symlink; "
                                   "rocmseat never writes through a link (someone else may have "
                                   "planted it)")
    assert doc["proposal"]["num_speculative_tokens"] == 3  # the advice is still there


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_fifo_or_directory_at_advise_png_is_a_note(rocmseat_cli, gate_dir, kind):
    # before: exit 3 (`not seekable` for the FIFO, IsADirectoryError for the directory)
    target = gate_dir / "advise.png"
    if kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    result = _advise(rocmseat_cli, gate_dir)
    assert result.exit_code == 2, result.stderr  # the gate could not decide (one answer)
    shown = "a FIFO" if kind == "fifo" else "a directory"
    assert result.stdout.splitlines()[-1] == (
        f"picture: {target}: not written: is {shown}, not a regular file")


def test_an_immutable_gate_directory_keeps_the_advice(rocmseat_cli, gate_dir):
    # before: PermissionError on advise.png (exit 3), the advice lost
    if subprocess.run(["chattr", "+i", str(gate_dir)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not available here")
    try:
        result = _advise(rocmseat_cli, gate_dir)
    finally:
        subprocess.run(["chattr", "-i", str(gate_dir)], check=True)
    assert result.exit_code == 2, result.stderr  # the gate could not decide (one answer)
    assert any(line.startswith("proposal: num_speculative_tokens = 3")
               for line in result.stdout.splitlines())
    assert result.stdout.splitlines()[-1] == (
        f"picture: {gate_dir / 'advise.png'}: not written: Operation not permitted")


# --- item 4: --target prints credentials ---------------------------------------------------

def test_target_credentials_never_reach_the_error(rocmseat_cli):
    # before: the raw URL (admin:hunter2) came first on the error line
    result = rocmseat_cli("spec", "advise", "--target",
                          "http://admin:hunter2@127.0.0.1:1/metrics?token=abc", "--window", "1")
    first = _one_line_error(result)
    assert "hunter2" not in result.stderr and "abc" not in result.stderr
    assert first.startswith("rocmseat: error: http://<redacted>@127.0.0.1:1/metrics?token="
                            "<redacted>: ")


def test_target_credentials_never_reach_the_advice(rocmseat_cli):
    # before: `source:` and the JSON `where` carried the password
    before = (FIXTURES / "spec" / "metrics-window-before.txt").read_text()
    after = (FIXTURES / "spec" / "metrics-window-after.txt").read_text()
    pages = Pages([before, after])
    try:
        url = pages.url.replace("http://", "http://admin:hunter2@")
        log = FIXTURES / "spec" / "iteration-deep-base.log"
        k3 = FIXTURES / "spec" / "iteration-deep-k3.log"
        result = rocmseat_cli("spec", "advise", "--target", url, "--window", "0.2",
                              "--iteration-log", str(log), "--iteration-log", str(k3), "--json")
    finally:
        pages.close()
    assert result.exit_code in (0, 1), result.stderr
    assert "hunter2" not in result.stdout + result.stderr
    doc = json.loads(result.stdout)
    assert doc["source"]["where"].startswith("http://<redacted>@127.0.0.1:")


# --- item 10: crashes on bad input ---------------------------------------------------------

def test_a_nul_in_result_file(rocmseat_cli, gate_dir):
    # before: ValueError: embedded null byte (exit 3)
    _edit(gate_dir / CAND_ARM, lambda d: _decode(d).update(result_file="arms/x\u0000y.json"))
    first = _one_line_error(_advise(rocmseat_cli, gate_dir))
    assert "key 'runs[2].result_file': arms/x\\x00y.json is not a path (it holds a NUL" in first


def test_a_400_digit_integer_in_a_result_file(rocmseat_cli, gate_dir):
    # before: OverflowError (exit 3)
    result_file = gate_dir / "arms/candidate/results/decode-c1-r0.json"
    text = result_file.read_text().replace('"total_output_tokens": ', '"total_output_tokens": '
                                           + "9" * 400 + ", \"x\": ", 1)
    result_file.write_text(text)
    first = _one_line_error(_advise(rocmseat_cli, gate_dir))
    assert "an integer of 400 digits (at most 20)" in first and str(result_file) in first


def test_a_400_digit_integer_in_a_metrics_window(rocmseat_cli, gate_dir):
    arm = gate_dir / CAND_ARM
    arm.write_text(arm.read_text().replace('"drafts": 206.0', '"drafts": ' + "7" * 400, 1))
    first = _one_line_error(_advise(rocmseat_cli, gate_dir))
    assert f"{arm}: not JSON (an integer of 400 digits (at most 20))" in first


def test_a_mean_itl_beyond_any_run(rocmseat_cli, gate_dir):
    # before: OverflowError in stats.sample_sd (exit 3)
    _edit(gate_dir / "arms/base/results/decode-c1-r0.json", lambda d: d.update(mean_itl_ms=1e308))
    first = _one_line_error(_advise(rocmseat_cli, gate_dir))
    assert "key 'mean_itl_ms': 1e+308 is beyond any figure of a benchmark run" in first


def test_sample_sd_of_huge_values_is_finite():
    from rocmseat.speculation.stats import sample_sd

    assert sample_sd([1e308, 1e308]) == 0.0  # OverflowError before
    assert sample_sd([1e307, 3e307]) == pytest.approx(1.4142135e307)


@pytest.mark.parametrize(("out", "why"), [
    ("/dev/null", "--out /dev/null: is a character device, not a directory"),
    ("/etc/passwd/sub", "--out /etc/passwd/sub: Not a directory"),
    ("/proc/x", "--out /proc/x: cannot create the directory: "),
])
def test_gate_out_that_cannot_be_a_directory(rocmseat_cli, tmp_path, out, why):
    # before: FileExistsError, NotADirectoryError, FileNotFoundError (exit 3)
    base = _seat(tmp_path, "base", drafter=False)
    cand = _seat(tmp_path, "cand")
    first = _one_line_error(rocmseat_cli("spec", "gate", base, cand, "--out", out))
    assert first.startswith(f"rocmseat: error: {why}"), first


# --- item 11: inconsistent inputs ----------------------------------------------------------

INCONSISTENT = [
    ("K 7 with three positions", lambda d: d.update(num_speculative_tokens=7),
     "key 'runs[2].metrics_window.accepted_per_position': 3 positions, but the arm drafts "
     "num_speculative_tokens = 7"),
    ("draft tokens above K x drafts",
     lambda d: _decode(d)["metrics_window"].update(draft_tokens=6180.0),
     "key 'runs[2].metrics_window': impossible counters: 6180 draft tokens in 206 drafts of at "
     "most 3 tokens"),
    ("concurrency against max_concurrency", lambda d: _decode(d).update(concurrency=4),
     "key 'runs[2].concurrency': 4, but its result file ran max_concurrency 1"),
    ("a fraction of a draft", lambda d: _decode(d)["metrics_window"].update(drafts=1e-300),
     "key 'runs[2].metrics_window.drafts': expected a whole count"),
    ("K false", lambda d: d.update(num_speculative_tokens=False),
     "key 'num_speculative_tokens': expected a whole number from 0 to 64"),
    ("another run's arm record", lambda d: d.update(run_id="20261130T000000Z-0123456789ab"),
     "key 'run_id': 20261130T000000Z-0123456789ab is not the run of gate.json (None)"),
]


@pytest.mark.parametrize(("what", "change", "message"), INCONSISTENT,
                         ids=[w for w, _, _ in INCONSISTENT])
def test_inconsistent_gate_records_are_refused(rocmseat_cli, gate_dir, what, change, message):
    # before: each was accepted without a word (advice, exit 1; `drafts = 1e-300`: "do not
    # speculate")
    _edit(gate_dir / CAND_ARM, change)
    first = _one_line_error(_advise(rocmseat_cli, gate_dir))
    assert f"{gate_dir / CAND_ARM}: {message}" in first, first


def test_a_gate_that_fails_before_its_first_arm_leaves_no_older_verdict(rocmseat_cli, tmp_path,
                                                                          gate_dir):
    # before: the older run's gate.json stayed in --out and advise advised from it
    base = _seat(tmp_path, "base", drafter=False, python=sys.executable)
    cand = _seat(tmp_path, "cand", python=sys.executable)
    old = json.loads((gate_dir / "gate.json").read_text())
    old.update(base_seat=base, candidate_seat=cand)  # a finished gate of the same seats
    (gate_dir / "gate.json").write_text(json.dumps(old))
    result = rocmseat_cli("spec", "gate", base, cand, "--out", str(gate_dir), "--no-progress")
    assert result.exit_code == 2  # no benchmark client: before the first arm
    doc = json.loads((gate_dir / "gate.json").read_text())
    assert doc["error"] == "the gate run did not finish" and doc["run_id"]
    first = _one_line_error(_advise(rocmseat_cli, gate_dir))
    assert "the gate could not measure (the gate run did not finish)" in first


def test_a_gate_run_owns_its_out(rocmseat_cli, tmp_path, gate_dir):
    base = _seat(tmp_path, "base", drafter=False)
    cand = _seat(tmp_path, "cand")
    # a finished gate of other seats
    first = _one_line_error(rocmseat_cli("spec", "gate", base, cand, "--out", str(gate_dir)))
    assert first == (f"rocmseat: error: --out {gate_dir}: holds arms, gate.json, gate.txt, "
                     "a gate of other seats: a gate run owns its directory")
    # any other non-empty directory
    other = tmp_path / "other"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    first = _one_line_error(rocmseat_cli("spec", "gate", base, cand, "--out", str(other)))
    assert first.startswith(f"rocmseat: error: --out {other}: holds thesis.tex, and its "
                            "gate.json cannot be read")
    assert sorted(p.name for p in other.iterdir()) == [".gate.lock", "thesis.tex"]


# --- item 12: flags ------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["\u0661\u0662", "1_000", "1,,4", "1,4,", " ", "+4", "0x10"])
def test_concurrency_takes_ascii_digits_and_single_commas(rocmseat_cli, tmp_path, value):
    # before: `١٢` ran 12, `1_000` ran 1000, `1,,4` ran 1,4
    base = _seat(tmp_path, "base", drafter=False)
    cand = _seat(tmp_path, "cand")
    first = _one_line_error(rocmseat_cli("spec", "gate", base, cand, "--concurrency", value,
                                         "--out", str(tmp_path / "out")))
    assert "expected whole numbers (ASCII digits) separated by single commas" in first
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("flag", "message"), [
    ("--output-tokens", "--output-tokens: 100000 output tokens do not fit max_model_len 256 "
                        "(at most 160"),
    ("--long-prompt-tokens", "--long-prompt-tokens: 100000 prompt tokens do not fit "
                             "max_model_len 256 (at most 240"),
])
def test_oversized_sizes_are_not_clamped(rocmseat_cli, tmp_path, flag, message):
    # before: clamped to what fits, silently
    base = _seat(tmp_path, "base", drafter=False)
    cand = _seat(tmp_path, "cand")
    first = _one_line_error(rocmseat_cli("spec", "gate", base, cand, flag, "100000",
                                         "--out", str(tmp_path / "out")))
    assert first.startswith(f"rocmseat: error: {message}"), first
    assert not (tmp_path / "out").exists()


def test_replica_is_checked_before_out_is_created(rocmseat_cli, tmp_path):
    # before: --out was created, then `--replica ../../x` refused
    base = _seat(tmp_path, "base", drafter=False)
    cand = _seat(tmp_path, "cand")
    first = _one_line_error(rocmseat_cli("spec", "gate", base, cand, "--replica", "../../x",
                                         "--out", str(tmp_path / "out")))
    assert first == "rocmseat: error: --replica '../../x': not a replica of seat base"
    assert not (tmp_path / "out").exists()


def test_an_empty_out_is_refused(rocmseat_cli, tmp_path, monkeypatch):
    # before: `--out ""` put .gate.lock (and the gate) in the working directory
    monkeypatch.chdir(tmp_path)
    base = _seat(tmp_path, "base", drafter=False)
    cand = _seat(tmp_path, "cand")
    before = sorted(p.name for p in tmp_path.iterdir())
    result = rocmseat_cli("spec", "gate", base, cand, "--out", "")
    assert result.exit_code == 2
    assert "--out '': an empty path names no directory" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_fifo_at_the_gate_lock_is_refused(rocmseat_cli, tmp_path):
    # a FIFO planted at --out/.gate.lock: opened and flocked before (a lock on a FIFO), now
    # refused by name
    base = _seat(tmp_path, "base", drafter=False)
    cand = _seat(tmp_path, "cand")
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / ".gate.lock")
    first = _one_line_error(rocmseat_cli("spec", "gate", base, cand, "--out", str(out)))
    assert first == f"rocmseat: error: {out / '.gate.lock'}: is a FIFO, not a lock file"


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_childs_log_is_never_written_through_a_link(tmp_path, kind):
    from rocmseat.speculation.gate.procs import ChildError, open_log

    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n")
    log = tmp_path / "launch.log"
    if kind == "link":
        log.symlink_to(outside)
    else:
        os.mkfifo(log)
    with pytest.raises(ChildError, match=r"symlink|not a regular file"):
        open_log(log)
    assert outside.read_text() == "mine\n"


def _k2(page: str) -> str:
    """A replica of the same traffic at K=2: no position 2, draft and accepted tokens to match."""
    lines = [line for line in page.splitlines() if 'position="2"' not in line]
    page = "\n".join(lines) + "\n"
    return (page.replace('model_name="demo"} 1068.0', 'model_name="demo"} 712.0')
            .replace('model_name="demo"} 668.0', 'model_name="demo"} 495.0'))


def test_live_replicas_of_other_k_are_not_mixed(rocmseat_cli):
    # before: the counters of a K=3 and a K=2 replica were added (the K=2 one padded with a
    # zero position 2): an advice from mixed K, without a word
    before = (FIXTURES / "spec" / "metrics-window-before.txt").read_text()
    after = (FIXTURES / "spec" / "metrics-window-after.txt").read_text()
    k3, k2 = Pages([before, after]), Pages([_k2(before), _k2(after)])
    try:
        result = rocmseat_cli("spec", "advise", "--target", k3.url, "--target", k2.url,
                              "--window", "0.2")
    finally:
        k3.close()
        k2.close()
    first = _one_line_error(result)
    assert first == (f"rocmseat: error: {k2.url}: 2 per-position counters, the replicas before "
                     "it 3: a window of mixed K")


def test_the_advice_names_the_gate_run_it_came_from(rocmseat_cli, gate_dir):
    run = "20261201T091500Z-a1b2c3d4e5f6"
    for name in ("gate.json", "arms/base/arm.json", CAND_ARM):
        _edit(gate_dir / name, lambda d: d.update(run_id=run))
    result = _advise(rocmseat_cli, gate_dir, "--json")
    assert result.exit_code == 2, result.stderr  # the gate could not decide
    assert json.loads(result.stdout)["source"] == {"kind": "gate", "where": str(gate_dir),
                                                   "run_id": run}
    # one arm of another run is refused (the run was the same for all three before)
    _edit(gate_dir / "arms/base/arm.json", lambda d: d.update(run_id=run[:-1] + "0"))
    first = _one_line_error(_advise(rocmseat_cli, gate_dir))
    assert "arms/base/arm.json: key 'run_id': 20261201T091500Z-a1b2c3d4e5f0 is not the run" in first
