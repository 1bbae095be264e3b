"""rocmseat.runner and rocmseat.procgroup: every wait bounded, output capped (issue 18, item 9).

The hang checks join the call from a thread with a generous bound: before the fix each of them
waited as long as the grandchild lived (60 s here, for ever in the field)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from rocmseat import procgroup
from rocmseat.runner import KILL_GRACE_S, Completed, run

HANG_BOUND_S = 20.0  # far above timeout + KILL_GRACE_S; far below the grandchild's 60 s


def _bounded(call):
    box: list[Completed] = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()
    thread.join(HANG_BOUND_S)
    assert not thread.is_alive(), f"still waiting after {HANG_BOUND_S:g} s"
    return box[0]


def _setsid_grandchild(pidfile: Path, then: str = "time.sleep(60)") -> str:
    """A child whose grandchild leaves the group (setsid) and keeps the child's stdout."""
    return (
        "import os, subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
        " start_new_session=True)\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "print('started', flush=True)\n"
        f"{then}\n"
    )


def _kill(pidfile: Path) -> None:
    if pidfile.exists():
        try:
            os.killpg(int(pidfile.read_text()), signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_timeout_returns_though_a_setsid_grandchild_holds_stdout(tmp_path):
    pidfile = tmp_path / "gc.pid"
    try:
        done = _bounded(lambda: run([sys.executable, "-c", _setsid_grandchild(pidfile)],
                                    timeout_s=1.0))
    finally:
        _kill(pidfile)
    assert done.timed_out and not done.ok
    assert done.stdout == "started\n"  # what came before the deadline is kept


def test_an_exited_child_does_not_wait_for_what_it_left_holding_its_pipes(tmp_path):
    pidfile = tmp_path / "gc.pid"
    try:
        done = _bounded(lambda: run([sys.executable, "-c",
                                     _setsid_grandchild(pidfile, then="sys.exit(4)")]))
    finally:
        _kill(pidfile)
    assert (done.returncode, done.timed_out, done.stdout) == (4, False, "started\n")


def test_output_beyond_the_cap_kills_the_child_and_says_so():
    flood = "import sys\nwhile True: sys.stdout.write('x' * 65536)\n"
    done = _bounded(lambda: run([sys.executable, "-c", flood], limit_bytes=1 << 20))
    assert done.truncated and not done.ok and not done.timed_out
    assert len(done.stdout) == 1 << 20
    assert done.returncode == -signal.SIGKILL


def test_output_within_the_cap_is_whole_and_stderr_is_capped_on_its_own():
    code = "import sys; sys.stdout.write('o' * 300000); sys.stderr.write('e' * 10)"
    done = run([sys.executable, "-c", code], limit_bytes=300000)
    assert (len(done.stdout), done.stderr, done.truncated, done.ok) == (300000, "e" * 10,
                                                                        False, True)


def test_bytes_that_are_not_utf8_are_replaced_not_a_crash():
    done = run([sys.executable, "-c", "import sys; sys.stdout.buffer.write(b'a\\xff\\xfeb\\n')"])
    assert done.ok and done.stdout == "a\ufffd\ufffdb\n"


def test_input_larger_than_a_pipe_reaches_the_child_whole():
    text = "line\n" * 200_000  # 1 MB: more than a pipe holds, written as the child reads
    done = run([sys.executable, "-c", "import sys; print(len(sys.stdin.read()))"],
               input_text=text, timeout_s=30)
    assert (done.ok, done.stdout.strip()) == (True, str(len(text)))


def test_a_child_that_never_reads_its_input_is_still_bounded_by_the_timeout():
    done = _bounded(lambda: run([sys.executable, "-c", "import time; time.sleep(60)"],
                                input_text="x" * (4 << 20), timeout_s=1.0))
    assert done.timed_out


def test_kill_grace_is_short_next_to_slurms_health_check_timeout():
    # a health check's budget (50 s) plus one grace stays inside Slurm's 60 s
    assert KILL_GRACE_S <= 5.0


def test_signal_group_never_signals_our_own_group_or_init():
    assert procgroup.signal_group(os.getpgrp(), 0) is False
    assert procgroup.signal_group(1, 0) is False
    assert procgroup.signal_group(0, 0) is False


def test_spawn_leads_a_new_group_in_a_new_session_or_ours():
    for own_session in (True, False):
        proc = procgroup.spawn([sys.executable, "-c", "import time; time.sleep(30)"],
                               own_session=own_session)
        try:
            assert os.getpgid(proc.pid) == proc.pid
            assert (os.getsid(proc.pid) == proc.pid) is own_session
        finally:
            procgroup.stop_group(proc, grace_s=5.0)
        assert proc.returncode is not None


def test_stop_group_sweeps_a_grandchild_left_in_the_group(tmp_path):
    pidfile = tmp_path / "gc.pid"
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n")
    import psutil

    proc = procgroup.spawn([sys.executable, "-c", code])
    proc.wait(timeout=30)  # the child wrote the pid file before it exited
    grandchild = psutil.Process(int(pidfile.read_text()))
    procgroup.stop_group(proc, grace_s=1.0)
    _gone, alive = psutil.wait_procs([grandchild], timeout=5)
    for left in alive:
        left.kill()
    assert not alive, "the grandchild outlived stop_group"


@pytest.mark.parametrize("rc, words", [(0, "with status 0"), (3, "with status 3"),
                                       (-9, "on signal SIGKILL"), (-200, "on signal 200")])
def test_describe_returncode(rc, words):
    assert procgroup.describe_returncode(rc) == words


def test_procgroup_is_the_one_module_that_starts_or_kills_a_process():
    import re

    from tests.conftest import REPO

    starts = re.compile(r"subprocess\.(Popen|run|call|check_output|check_call)\(|os\.killpg\(|"
                        r"os\.(fork|setsid|spawn\w*)\(")
    found = sorted(
        str(path.relative_to(REPO))
        for path in (REPO / "rocmseat").rglob("*.py")
        if starts.search(path.read_text())
    )
    assert found == ["rocmseat/procgroup.py"]


def test_a_child_that_closes_its_pipes_just_before_it_exits_keeps_its_status():
    # EOF on the pipes comes a moment before the exit: the child was SIGKILLed in that moment
    # (returncode -9 for a clean exit, seen once in a few runs of a fake `scontrol`)
    code = "import os, sys, time; os.close(1); os.close(2); time.sleep(0.5); sys.exit(5)"
    for _ in range(3):
        done = run([sys.executable, "-c", code], timeout_s=30)
        assert (done.returncode, done.timed_out) == (5, False)


def test_a_child_that_closes_its_pipes_and_runs_on_is_held_to_the_timeout():
    code = "import os, time; os.close(1); os.close(2); time.sleep(60)"
    done = _bounded(lambda: run([sys.executable, "-c", code], timeout_s=1.0))
    assert done.timed_out and done.returncode == -signal.SIGKILL


@pytest.mark.parametrize("script", [
    "sleep 60",  # holds its pipes
    "exec >/dev/null 2>&1; sleep 60",  # closed its pipes, runs on
    "trap '' TERM; exec >/dev/null 2>&1; while :; do sleep 0.1; done",  # ignores SIGTERM
])
def test_cancel_ends_the_child_and_says_so(monkeypatch, script):
    """The watcher stops during a restart (issue 28): `cancel` sends SIGTERM to the child's
    group, SIGKILL after CANCEL_GRACE_S, and the result says it was cancelled."""
    import threading

    from rocmseat import runner

    monkeypatch.setattr(runner, "CANCEL_GRACE_S", 1.0)
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    done = runner.run(["sh", "-c", script], timeout_s=120, cancel=cancel)
    assert done.cancelled and not done.ok and not done.timed_out
    assert done.returncode < 0  # ended by a signal, not by its own exit
