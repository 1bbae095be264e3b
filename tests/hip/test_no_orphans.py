"""Tier 3: the probe never leaves a child behind, even when its parent is SIGKILLed mid-probe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO
from tests.hip.conftest import PROBE_SIZE, A, B

pytestmark = pytest.mark.hip

# The parent: a plain Python process running hip_findings with a stage that hangs "forever".
PARENT = """
import json, sys
from pathlib import Path
from rocmseat.hip.check import hip_findings
env = json.loads(sys.argv[2])
hip_findings([(sys.argv[3], sys.argv[4])], env=env, stage_timeout_s=3600, library=Path(sys.argv[1]),
            size_bytes=int(sys.argv[5]))
"""


def _wait_for(predicate, what: str, limit_s: float = 60.0):
    # A bounded wait for a state, not a speed assertion: the machine is shared.
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"gave up after {limit_s:.0f} s waiting for {what}")


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:  # gone, or a zombie
        return []


def _probe_children(parent: psutil.Process) -> list[psutil.Process]:
    try:
        children = parent.children(recursive=True)
    except psutil.Error:
        return []
    return [c for c in children if "rocmseat.hip.child" in _cmdline(c)]


def test_sigkill_of_the_parent_mid_probe_leaves_no_child(
    fake_hip: Path, x99: dict[str, str]
) -> None:
    env = {**x99, "FAKEHIP_HANG": "hipIpcOpenMemHandle"}
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(fake_hip), json.dumps(env), A, B, str(PROBE_SIZE)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        parent = psutil.Process(proc.pid)
        # owner (waiting for the opener) and opener (hung in hipIpcOpenMemHandle) both alive
        children = _wait_for(
            lambda: [c for c in _probe_children(parent) if "opener" in _cmdline(c)]
            and _probe_children(parent),
            "the owner and the hung opener")
        roles = {_cmdline(c)[_cmdline(c).index("rocmseat.hip.child") + 1] for c in children}
        assert roles == {"owner", "opener"}
        pids = [c.pid for c in children]
        # the children live in their own process groups: a SIGKILL of the parent alone does
        # not reach them; only PR_SET_PDEATHSIG does
        assert all(os.getpgid(pid) != os.getpgid(proc.pid) for pid in pids)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)

        def all_gone() -> bool:
            return not any(psutil.pid_exists(pid) and psutil.Process(pid).status()
                           != psutil.STATUS_ZOMBIE for pid in pids)

        _wait_for(all_gone, f"children {pids} to die with their parent")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)


def test_a_hung_stage_kills_the_childs_process_group(fake_hip: Path, x99: dict[str, str]) -> None:
    # After hip_findings returns, no process of ours runs the child program any more.
    from rocmseat.hip.check import hip_findings

    env = {**x99, "FAKEHIP_HANG": "hipIpcOpenMemHandle"}
    findings = hip_findings([(A, B)], env=env, stage_timeout_s=5.0, library=fake_hip,
                            size_bytes=PROBE_SIZE)
    assert any(f.check_id == "hip.ipc" and f.data.get("hung") for f in findings)
    assert _probe_children(psutil.Process()) == []


class _Interrupted(Exception):
    pass


def test_an_exception_mid_probe_kills_the_children_at_once(
    fake_hip: Path, x99: dict[str, str]
) -> None:
    # The parent survives here (unlike the SIGKILL test), so only its own cleanup can help.
    from rocmseat.hip.check import hip_findings

    me = psutil.Process()
    seen: list[int] = []

    def interrupt(_signum: int, _frame: object) -> None:
        hung = [c for c in _probe_children(me) if "opener" in _cmdline(c)]
        if not hung:
            signal.setitimer(signal.ITIMER_REAL, 0.2)  # not there yet: look again shortly
            return
        seen.extend(c.pid for c in _probe_children(me))
        raise _Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        env = {**x99, "FAKEHIP_HANG": "hipIpcOpenMemHandle"}
        with pytest.raises(_Interrupted):
            hip_findings([(A, B)], env=env, stage_timeout_s=3600, library=fake_hip,
                         size_bytes=PROBE_SIZE)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert len(seen) == 2  # the owner and the hung opener were running
    assert _probe_children(me) == []
    assert not any(psutil.pid_exists(pid) for pid in seen)  # killed and reaped, not zombies


@pytest.mark.parametrize("role", ["info", "owner", "opener"])
def test_an_exception_as_a_child_starts_leaves_no_child(
    fake_hip: Path, x99: dict[str, str], monkeypatch: pytest.MonkeyPatch, role: str
) -> None:
    # The exception lands after the fork and before the probe holds the child: where a ^C or a
    # signal handler's exception can land (CI saw the test above leave an opener running once,
    # when its handler fired in that window). Deterministic: the spawner raises once it forked.
    import rocmseat.hip.probe as probe
    from rocmseat.hip.check import hip_findings

    real_spawn = probe.spawn
    started: list[int] = []

    def spawn_then_interrupt(argv: list[str], **kwargs: object) -> object:
        proc = real_spawn(argv, **kwargs)  # type: ignore[arg-type]
        if role in argv:
            started.append(proc.pid)
            raise _Interrupted
        return proc

    monkeypatch.setattr(probe, "spawn", spawn_then_interrupt)
    env = {**x99, "FAKEHIP_HANG": "hipIpcOpenMemHandle"}
    with pytest.raises(_Interrupted):
        hip_findings([(A, B)], env=env, stage_timeout_s=3600, library=fake_hip,
                     size_bytes=PROBE_SIZE)
    assert len(started) == 1
    assert _probe_children(psutil.Process()) == []
    assert not psutil.pid_exists(started[0])  # killed and reaped
