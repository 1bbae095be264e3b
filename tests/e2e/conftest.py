"""The engine tier (tier 4): the real vLLM CPU build driven only through rocmseat's CLI.

Skips, with the reason printed, only where the engine cannot run: no engine Python at
$ROCMSEAT_VLLM_PYTHON (default /opt/rocmseat/vllm-venv/bin/python), `import vllm` failing there,
or .ci/setup having left /opt/rocmseat/vllm-unavailable.txt (its text is the reason).
Everything else that goes wrong is a failure.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import NOTES
from tests.e2e.world import World


@pytest.fixture(scope="session")
def engine_python(real_engine_python: Path) -> Path:
    return real_engine_python


@pytest.fixture(scope="module")
def world(engine_python: Path, demo_models: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("e2e")
    # The scenarios swap the drafter's weights: their own copy of the session's models.
    shutil.copytree(demo_models, root / "models")
    # AF_UNIX paths are limited to 108 bytes; pytest's tmp paths can be longer.
    sock_dir = Path(tempfile.mkdtemp(prefix="rocmseat-e2e-"))
    w = World(root=root, engine_python=engine_python, models=root / "models",
              notify_path=sock_dir / "notify")
    try:
        yield w
    finally:
        w.close()
        sock_dir.rmdir()


_OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "tests/e2e/" not in report.nodeid or "engine" not in report.keywords:
        return  # the skip-path unit tests beside the scenarios are not scenarios
    name = report.nodeid.rsplit("::", 1)[-1]
    if report.when == "call" or report.outcome != "passed":
        _OUTCOMES[name] = report.outcome.upper()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _OUTCOMES:
        return
    terminalreporter.section("rocmseat engine scenarios (real vLLM, CPU build)")
    for name, outcome in _OUTCOMES.items():
        scenario = name.removeprefix("test_")
        terminalreporter.write_line(f"{scenario}: {outcome}")
        for text in NOTES.get(scenario, []):
            terminalreporter.write_line(f"    {text}")
