"""The cached preflight verdict: written by every full run (and only one), read as hostile input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rocmseat.findings import Severity
from rocmseat.fleet.verdict_cache import (
    SCHEMA,
    UnusableVerdict,
    load_verdict,
    parse_verdict,
    verdict_path,
)
from tests.conftest import REPO
from tests.sysfs.conftest import SYSFS_FIXTURES

X99 = SYSFS_FIXTURES / "x99-r9700"
DEGRADED = SYSFS_FIXTURES / "x99-r9700-degraded"


def _load(state, root=DEGRADED, max_age_s=900.0, now=None):
    import time

    return load_verdict(state, root, max_age_s=max_age_s, now_unix_s=now or time.time())


def test_full_run_writes_the_verdict(rocmseat_cli, tmp_path):
    state = tmp_path / "s"
    result = rocmseat_cli("preflight", "--sysfs-root", str(DEGRADED), "--state-dir", str(state))
    assert result.exit_code == 1
    verdict = _load(state)
    assert verdict.gpus == 4 and verdict.exit_code() == 1
    assert verdict.families == ("aer", "numa", "pcie")
    failing = {(f.check_id, f.subject) for f in verdict.findings if f.severity == Severity.FAIL}
    assert failing == {("aer.badtlp", "0000:80:02.0"), ("pcie.link.degraded", "0000:89:00.0")}
    doc = json.loads(verdict_path(state).read_text())
    assert doc["schema"] == SCHEMA and doc["exit_code"] == 1


@pytest.mark.parametrize(
    "args", [["--only", "pcie"], ["--pair", "05:00.0,09:00.0"], ["--only", "aer", "--json"]]
)
def test_partial_runs_never_write_it(rocmseat_cli, tmp_path, args):
    state = tmp_path / "s"
    rocmseat_cli("preflight", "--sysfs-root", str(X99), "--state-dir", str(state), *args)
    assert not verdict_path(state).exists()


def test_a_run_that_judged_nothing_caches_why(rocmseat_cli, tmp_path):
    state = tmp_path / "s"
    root = SYSFS_FIXTURES / "no-amdgpu"
    assert rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir",
                        str(state)).exit_code == 2
    (finding,) = _load(state, root).findings
    assert (finding.check_id, finding.severity) == ("preflight.error", Severity.UNKNOWN)
    assert finding.message.startswith("no amdgpu device under ")


def test_unwritable_state_dir_warns_in_one_line_and_keeps_the_exit_code(rocmseat_cli, tmp_path):
    state = tmp_path / "s"
    (state / "preflight").mkdir(parents=True)
    verdict_path(state).mkdir()  # a directory where the file goes: the rename fails
    result = rocmseat_cli("preflight", "--sysfs-root", str(X99), "--state-dir", str(state))
    assert result.exit_code == 0
    assert result.stderr.startswith(f"rocmseat: warning: {verdict_path(state)}: cannot save the "
                                    "preflight verdict (")
    assert len(result.stderr.splitlines()) == 1


def test_missing_stale_future_and_foreign_root(rocmseat_cli, tmp_path):
    state = tmp_path / "s"
    with pytest.raises(UnusableVerdict, match=r"^no cached verdict \(run a full rocmseat"):
        _load(state)
    rocmseat_cli("preflight", "--sysfs-root", str(DEGRADED), "--state-dir", str(state))
    written = _load(state).written_at_unix_s
    with pytest.raises(UnusableVerdict, match=r"^cached verdict is 1000s old \(max 900s\)$"):
        _load(state, now=written + 1000)
    with pytest.raises(UnusableVerdict, match=r"^cached verdict is dated 3600s in the future$"):
        _load(state, now=written - 3600)
    with pytest.raises(UnusableVerdict, match=r"^cached verdict is for another sysfs root"):
        _load(state, root=X99)


def _doc(**changes):
    doc = {
        "schema": SCHEMA, "written_at_unix_s": 1.0, "sysfs_root": "/sys", "families": ["pcie"],
        "gpus": 1, "profile": None, "exit_code": 0,
        "findings": [{"check_id": "pcie.link.ok", "severity": "ok", "subject": "0000:05:00.0",
                      "message": "8 GT/s x16"}],
    }
    doc.update(changes)
    return json.dumps(doc)


def _finding(**changes):
    finding = {"check_id": "pcie.link.ok", "severity": "ok", "subject": "a", "message": "m"}
    finding.update(changes)
    return _doc(findings=[finding])


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "not JSON"),
        ("{half", "not JSON"),
        ("[" * 100_000, "not JSON"),
        (_doc(written_at_unix_s=float("nan")), "not JSON"),
        (_doc().replace('"written_at_unix_s": 1.0', '"written_at_unix_s": Infinity'), "not JSON"),
        (_doc(schema="rocmseat.other/v1"), "not a rocmseat.verdict/v1 file"),
        (_doc(written_at_unix_s="yesterday"), "no valid written_at_unix_s"),
        (_doc(written_at_unix_s=True), "no valid written_at_unix_s"),
        (_doc(written_at_unix_s=-5), "no valid written_at_unix_s"),
        (_doc(gpus=-1), "no valid gpus"),
        (_doc(families=["PCIE; rm"]), "no valid families"),
        (_doc(sysfs_root="/sys\n"), "no valid sysfs_root"),
        (_doc(findings={}), "no findings list"),
        (_finding(severity="fine"), "bad severity"),
        (_finding(severity=["ok"]), "bad severity"),
        (_finding(check_id="pcie link"), "bad check_id"),
        (_finding(message="two\nlines"), "bad text"),
        (_finding(subject="\x1b[31mred"), "bad text"),
        (_finding(message="x" * 5000), "bad text"),
        (_finding(subject=None), "bad text"),
    ],
)
def test_hostile_verdict_files_are_unusable_never_ok(text, why):
    with pytest.raises(UnusableVerdict) as info:
        parse_verdict(text)
    assert why in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kind", ["fifo", "huge", "directory", "dev-zero"])
def test_verdict_file_that_is_not_a_small_regular_file(tmp_path, kind):
    # read through rocmseat.safeio in a child with a deadline: a FIFO must not block the reader
    path = verdict_path(tmp_path)
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "huge":
        path.write_text(" " * (5 << 20))
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    code = (
        "import sys, time; from pathlib import Path; "
        "from rocmseat.fleet.verdict_cache import load_verdict, UnusableVerdict\n"
        "try:\n"
        "    load_verdict(Path(sys.argv[1]), Path('/nonexistent'), max_age_s=9, "
        "now_unix_s=time.time())\n"
        "except UnusableVerdict as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=30, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("cached verdict unreadable: "), proc.stdout
