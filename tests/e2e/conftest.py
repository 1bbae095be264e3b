"""The engine tier (tier 4): the real vLLM CPU build driven only through rocmseat's CLI.

Skips, with the reason printed, only where the engine cannot run: no engine Python at
$ROCMSEAT_VLLM_PYTHON (default /opt/rocmseat/vllm-venv/bin/python), `import vllm` failing there,
or .ci/setup having left /opt/rocmseat/vllm-unavailable.txt (its text is the reason).
Everything else that goes wrong is a failure.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import NOTES, STARTS, shown_starts
from tests.e2e.world import WarmCache, World, fresh_models


@pytest.fixture(scope="session")
def engine_python(real_engine_python: Path) -> Path:
    return real_engine_python


@pytest.fixture(scope="session")
def engine_models_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where every engine world serves its models from (world.fresh_models)."""
    return tmp_path_factory.mktemp("engine-models") / "models"


@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> WarmCache:
    return WarmCache(tmp_path_factory.mktemp("warm-cache"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The whole loop before the scenarios of `ready_world` (remediation, slow spawn): its
    healthy start is the session's cold compile of the e2e seat, whose cache their first starts
    load (WarmCache). Every other item keeps its place."""
    loop = [i for i in items if i.nodeid.startswith("tests/e2e/test_whole_loop.py::")]
    later = ("tests/e2e/test_remediate_engine.py::", "tests/e2e/test_spawn_engine.py::")
    rest = [i for i in items if not i.nodeid.startswith("tests/e2e/test_whole_loop.py::")]
    first = next((n for n, i in enumerate(rest) if i.nodeid.startswith(later)), None)
    if loop and first is not None:
        items[:] = [*rest[:first], *loop, *rest[first:]]


@pytest.fixture(scope="module")
def world(engine_python: Path, demo_models: Path, engine_models_path: Path,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("e2e")
    # The scenarios swap the drafter's weights: the session's models copied afresh, at the
    # one path every engine world uses (fresh_models).
    models = fresh_models(demo_models, engine_models_path)
    # AF_UNIX paths are limited to 108 bytes; pytest's tmp paths can be longer.
    sock_dir = Path(tempfile.mkdtemp(prefix="rocmseat-e2e-"))
    w = World(root=root, engine_python=engine_python, models=models,
              notify_path=sock_dir / "notify")
    try:
        yield w
    finally:
        w.close()
        sock_dir.rmdir()


_OUTCOMES: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "tests/e2e/" not in report.nodeid or not ({"engine", "llamacpp"} & set(report.keywords)):
        return  # the skip-path unit tests beside the scenarios are not scenarios
    name = report.nodeid.rsplit("::", 1)[-1]
    if report.when == "call" or report.outcome != "passed":
        _OUTCOMES[name] = report.outcome.upper()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _OUTCOMES:
        return
    terminalreporter.section("rocmseat engine scenarios (real vLLM CPU build, real llama-server)")
    for name, outcome in _OUTCOMES.items():
        scenario = name.removeprefix("test_")
        terminalreporter.write_line(f"{scenario}: {outcome}")
        if starts := STARTS.get(scenario):
            terminalreporter.write_line(f"    engine starts: {len(starts)} "
                                        f"({shown_starts(starts)})")
        for text in NOTES.get(scenario, []):
            terminalreporter.write_line(f"    {text}")
    every = [how for starts in STARTS.values() for how in starts]
    terminalreporter.write_line(f"engine starts of the e2e scenarios: {len(every)} "
                                f"({shown_starts(every)})")
