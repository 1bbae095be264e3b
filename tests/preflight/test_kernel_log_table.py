"""The per-class found/expected table of the kernel-log corpus (issue 34, item 2): the real
classifier over every excerpt, the floor it holds, and that the floor can fail.

The table and the floor live in tests/preflight/kernel_log_table.py (`python3 -m
tests.preflight.kernel_log_table` prints it); the excerpts and their sources in
tests/fixtures/kernel-log/ (corpus.json, README.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.preflight import kernel_log_table as klt

REPO = Path(__file__).resolve().parent.parent.parent
CORPUS = json.loads((klt.KLOG / "corpus.json").read_text())
SECOND = [x for x in CORPUS["excerpts"] if "kinds" in x]


def test_every_second_pass_excerpt_names_its_source_verdict_and_lines():
    assert len(SECOND) >= 25
    readme = (klt.KLOG / "README.md").read_text()
    for entry in SECOND:
        assert entry["source"].startswith("https://"), entry["name"]
        assert entry["thread"] and entry["verdict"] in klt.VERDICTS, entry["name"]
        assert entry["file"] in readme and entry["source"] in readme, entry["name"]
        text = (klt.KLOG / entry["file"]).read_text()
        for item in entry["kinds"]:
            # a substring of one line as posted: never spans two
            assert any(item["line"] in line for line in text.splitlines()), (entry, item)
        if entry["verdict"] != "benign":
            assert entry["kinds"], entry["name"]
    verdicts = {x["verdict"] for x in SECOND}
    assert {"fatal", "error", "benign"} <= verdicts
    assert sum(x["verdict"] == "benign" for x in SECOND) >= 3


def test_the_table_covers_every_excerpt_with_the_real_classifier(capsys):
    table = klt.build()
    assert [r.name for r in table.rows] == [x["name"] for x in CORPUS["excerpts"]]
    with capsys.disabled():
        print("\n" + klt.render(table))
    # first-pass rows keep the classes their `expected` says (test_events.py checks them
    # exactly); the derived verdict follows them
    for row, entry in zip(table.rows, CORPUS["excerpts"], strict=True):
        if "expected" in entry and not entry["expected"]:
            assert row.verdict == "benign"
    assert klt.floor_violations(table) == []


def test_the_floor_fails_when_the_classifier_is_blind(monkeypatch):
    monkeypatch.setattr("rocmseat.sysfs.kernlog.classify", lambda message: None)
    table = klt.build()
    assert table.percent() == 0.0
    violations = klt.floor_violations(table)
    assert any("whole corpus" in v for v in violations)
    assert any("second pass" in v for v in violations)


def test_a_benign_excerpt_that_fails_is_below_the_floor(tmp_path):
    corpus_dir = tmp_path / "corpus"
    corpus_dir.mkdir()
    # a failing excerpt labelled benign: the same bytes as a real fatal excerpt
    (corpus_dir / "x.log").write_bytes((klt.KLOG / "corpus/rocm-6281.log").read_bytes())
    corpus = {"excerpts": [{"name": "x", "file": "corpus/x.log", "source": "https://x",
                            "thread": "t", "verdict": "benign", "kinds": []}]}
    table = klt.build(corpus, tmp_path)
    assert table.false_alarms()[0].name == "x"
    assert any("benign excerpts that fail: x" in v for v in klt.floor_violations(table))


@pytest.mark.parametrize(("entry", "verdict"), [
    ({"expected": {}}, "benign"),
    ({"expected": {"aer_corrected": 2, "gpu_reset_ok": 1}}, "count"),
    ({"expected": {"ring_timeout": 1, "gpu_reset_failed": 1}}, "fatal"),
    ({"expected": {"page_fault": 1}}, "error"),
    ({"expected": {"page_fault": 1}, "verdict": "benign"}, "benign"),
])
def test_verdicts_given_or_derived(entry, verdict):
    assert klt.verdict_of(entry)[0] == verdict


def test_an_unknown_verdict_is_an_error():
    with pytest.raises(ValueError, match="verdict 'maybe'"):
        klt.verdict_of({"name": "x", "verdict": "maybe"})


def test_the_script_prints_the_table_and_holds_the_floor():
    run = subprocess.run([sys.executable, "-m", "tests.preflight.kernel_log_table"], cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "fatal/error excerpts giving a non-ok finding: whole corpus" in run.stdout
    assert "BELOW THE FLOOR" not in run.stdout
