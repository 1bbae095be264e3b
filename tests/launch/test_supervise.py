"""Supervision against real processes: a program that never becomes healthy, and the TEST ENGINE
(tests/launch/testengine.py, a small HTTP server; not vLLM). No timed assertions: every wait is
bounded, and the assertions are on outcomes (exit codes, datagrams, which processes exist)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rocmseat.launch.readiness import Canary
from rocmseat.launch.sdnotify import Notifier
from rocmseat.launch.startuplog import StartupLogReader
from rocmseat.launch.supervise import EngineSpec, supervise
from tests.conftest import FIXTURES, REPO

TEST_ENGINE = Path(__file__).with_name("testengine.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for_file(path: Path, bound_s: float = 30.0) -> str:
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        if path.exists():
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def spec_for(argv, port, *, timeout_s=60.0, grace_s=5.0, name="test"):
    return EngineSpec(
        argv=tuple(argv),
        env={k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"},
        cpus=None,
        canary=Canary(f"http://127.0.0.1:{port}", name, "Hello", 4),
        readiness_timeout_s=timeout_s,
        probe_interval_s=0.2,
        stop_grace_s=grace_s,
    )


class Datagrams:
    def __init__(self, address: str, bind_to: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(bind_to)
        self.sock.settimeout(0.0)

    def read_all(self) -> list[str]:
        out = []
        while True:
            try:
                out.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return out


@pytest.fixture
def notify_socket(tmp_path):
    path = tmp_path / "notify.sock"
    d = Datagrams(str(path), str(path))
    yield d
    d.sock.close()


def test_never_healthy_times_out_and_leaves_no_process(tmp_path, notify_socket):
    port = free_port()
    argv = [sys.executable, "-c", "import time; time.sleep(600)"]
    lines: list[str] = []
    result = supervise(
        spec_for(argv, port, timeout_s=2.0, grace_s=3.0),
        reader=StartupLogReader(), notifier=Notifier(notify_socket.address), echo=lines.append,
    )
    assert result.exit_code == 1
    assert result.timed_out and not result.ready
    assert result.reason.startswith("not ready within 2 s (last probe: /health: ")
    assert "Connection refused" in result.reason
    assert result.engine_returncode == -signal.SIGTERM
    grams = notify_socket.read_all()
    assert grams[0].startswith("STATUS=starting engine")
    assert grams[-1].startswith("STOPPING=1\nSTATUS=not ready within 2 s")
    assert not any("READY=1" in g for g in grams)


def test_timeout_kills_a_group_that_ignores_sigterm(tmp_path):
    port = free_port()
    pid_file = tmp_path / "pids"
    argv = [sys.executable, str(TEST_ENGINE), "--port", str(port), "--hang-canary",
            "--ignore-sigterm", "--grandchild", "--pid-file", str(pid_file)]
    result = supervise(spec_for(argv, port, timeout_s=3.0, grace_s=1.0),
                       reader=StartupLogReader(), notifier=Notifier(None), echo=lambda _l: None)
    pids = [int(p) for p in pid_file.read_text().split()]
    assert len(pids) == 2
    assert result.timed_out and result.exit_code == 1
    assert result.engine_returncode == -signal.SIGKILL
    # /health was 200 all along: only the canary told the truth
    assert "canary completion: timed out" in result.reason
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if alive(p)] == []


def test_ready_after_health_and_canary_then_engine_exit_status(tmp_path, notify_socket):
    port = free_port()
    argv = [sys.executable, str(TEST_ENGINE), "--port", str(port), "--served-model-name", "qwen",
            "--replay", str(FIXTURES / "logs" / "cpu-0.32-fresh-draft-model.log"),
            "--exit-after-canary", "7"]
    lines: list[str] = []
    ready_calls = []
    result = supervise(
        spec_for(argv, port, name="qwen"), reader=StartupLogReader(),
        notifier=Notifier(notify_socket.address), echo=lines.append,
        on_ready=lambda summary, after: ready_calls.append(summary),
    )
    assert result.ready
    assert result.exit_code == 7 and result.engine_returncode == 7
    assert result.reason.startswith("the engine exited with status 7 after ")
    assert lines[0].startswith("test engine pid")
    assert any("CPU KV cache size: 524,288 tokens" in line for line in lines)
    assert ready_calls and ready_calls[0].kv_cache_tokens == 524_288
    grams = notify_socket.read_all()
    ready = [g for g in grams if g.startswith("READY=1")]
    assert len(ready) == 1
    assert "KV 524,288 tokens" in ready[0] and "max concurrency 2048.00x" in ready[0]
    # statuses read from the log are coalesced: the newest before each probe is sent
    assert "STATUS=server started, probing /health and a canary completion" in grams
    assert grams.index(ready[0]) == len(grams) - 1


def test_health_200_with_wrong_served_name_is_not_ready(tmp_path):
    port = free_port()
    argv = [sys.executable, str(TEST_ENGINE), "--port", str(port), "--served-model-name", "other"]
    result = supervise(spec_for(argv, port, timeout_s=3.0, name="qwen"),
                       reader=StartupLogReader(), notifier=Notifier(None), echo=lambda _l: None)
    assert not result.ready and result.timed_out
    assert "canary completion answered 404" in result.reason


def test_engine_exit_before_ready_returns_its_status():
    argv = [sys.executable, "-c", "import sys; print('boom'); sys.exit(5)"]
    lines: list[str] = []
    result = supervise(spec_for(argv, free_port()), reader=StartupLogReader(),
                       notifier=Notifier(None), echo=lines.append)
    assert result.exit_code == 5
    assert result.reason == "the engine exited with status 5 before it was ready"
    assert lines == ["boom\n"]


def test_missing_engine_command_is_one_line_error():
    from rocmseat.errors import RocmseatError

    with pytest.raises(RocmseatError, match="no-such-engine-xyz: command not found"):
        supervise(spec_for(["no-such-engine-xyz"], free_port()), reader=StartupLogReader(),
                  notifier=Notifier(None), echo=lambda _l: None)


DRIVER = r"""
import json, os, sys
from rocmseat.launch.readiness import Canary
from rocmseat.launch.sdnotify import Notifier
from rocmseat.launch.startuplog import StartupLogReader
from rocmseat.launch.supervise import EngineSpec, supervise
port = int(sys.argv[1]); argv = sys.argv[2:]
spec = EngineSpec(tuple(argv), dict(os.environ), None,
                  Canary(f"http://127.0.0.1:{port}", "test", "Hi", 2), 60.0, 0.2,
                  float(os.environ.get("GRACE_S", "10")))
r = supervise(spec, reader=StartupLogReader(), notifier=Notifier(os.environ.get("NOTIFY_SOCKET")),
              echo=lambda l: (sys.stdout.write(l), sys.stdout.flush()))
sys.stderr.write(json.dumps({"exit": r.exit_code, "rc": r.engine_returncode,
                             "signal": r.signal_received, "reason": r.reason}) + "\n")
sys.exit(r.exit_code)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_supervisor_is_forwarded_and_status_returned(tmp_path, signum):
    port = free_port()
    pid_file = tmp_path / "pids"
    sock_path = tmp_path / "n.sock"
    grams = Datagrams(str(sock_path), str(sock_path))
    argv = [sys.executable, str(TEST_ENGINE), "--port", str(port), "--sigterm-exit", "3",
            "--pid-file", str(pid_file)]
    env = {**os.environ, "NOTIFY_SOCKET": str(sock_path), "PYTHONPATH": str(REPO)}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(port), *argv], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        engine_pid = int(wait_for_file(pid_file).split()[0])
        end = time.monotonic() + 30
        while time.monotonic() < end and not any(g.startswith("READY=1") for g in grams.read_all()):
            time.sleep(0.1)
        driver.send_signal(signum)
        out, err = driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    report = json.loads(err.strip().splitlines()[-1])
    assert report["signal"] == signum
    if signum == signal.SIGTERM:
        # the test engine exits 3 on SIGTERM: that status is ours
        assert driver.returncode == 3 and report["rc"] == 3
    else:
        # SIGINT kills the test engine (Python's KeyboardInterrupt): 128 + 2
        assert driver.returncode == 130
    assert report["reason"].startswith(f"received {signal.Signals(signum).name}, forwarded")
    assert not alive(engine_pid)
    assert "test engine listening" in out


def test_an_engine_that_ignores_the_forwarded_sigterm_is_killed_after_the_grace(tmp_path):
    """The stop grace holds on a signal too: before, the supervisor waited for as long as the
    engine took (an e2e launch stopped 120.7 s after its SIGTERM, with a 30 s grace)."""
    port = free_port()
    pid_file = tmp_path / "pids"
    sock_path = tmp_path / "n.sock"
    grams = Datagrams(str(sock_path), str(sock_path))
    argv = [sys.executable, str(TEST_ENGINE), "--port", str(port), "--ignore-sigterm",
            "--grandchild", "--pid-file", str(pid_file)]
    env = {**os.environ, "NOTIFY_SOCKET": str(sock_path), "PYTHONPATH": str(REPO),
           "GRACE_S": "1"}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(port), *argv], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in wait_for_file(pid_file).split()]
        end = time.monotonic() + 30
        while time.monotonic() < end and not any(g.startswith("READY=1") for g in grams.read_all()):
            time.sleep(0.1)
        driver.send_signal(signal.SIGTERM)
        _, err = driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    report = json.loads(err.strip().splitlines()[-1])
    assert report["signal"] == signal.SIGTERM and report["rc"] == -signal.SIGKILL
    assert report["reason"] == ("received SIGTERM, forwarded to the engine; it exited "
                                "on signal SIGKILL")
    assert driver.returncode == 128 + signal.SIGKILL
    end = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.05)
    assert [p for p in pids if alive(p)] == []  # the engine and the child it left behind


def test_notifier_abstract_socket_and_no_socket():
    name = f"rocmseat-test-{os.getpid()}"
    d = Datagrams("@" + name, "\0" + name)
    try:
        n = Notifier.from_environ({"NOTIFY_SOCKET": "@" + name})
        assert n.ready("ready in 3 s")
        assert d.read_all() == ["READY=1\nSTATUS=ready in 3 s"]
    finally:
        d.sock.close()
    off = Notifier.from_environ({})
    assert not off.enabled and off.status("x") is False
    assert off.sent == ["STATUS=x"]


def test_notifier_unreachable_socket_does_not_raise(tmp_path):
    n = Notifier(str(tmp_path / "nobody-listens.sock"))
    assert n.stopping("bye") is False


def test_cpu_affinity_is_inherited_by_the_engine_only():
    mine = os.sched_getaffinity(0)
    one = frozenset({min(mine)})
    argv = [sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"]
    spec = spec_for(argv, free_port())
    spec = EngineSpec(spec.argv, spec.env, one, spec.canary, spec.readiness_timeout_s,
                      spec.probe_interval_s, spec.stop_grace_s)
    lines: list[str] = []
    supervise(spec, reader=StartupLogReader(), notifier=Notifier(None), echo=lines.append)
    assert lines == [f"{sorted(one)}\n"]
    assert os.sched_getaffinity(0) == mine  # ours is restored after the fork


@pytest.mark.parametrize(
    ("kind", "component", "value", "status"),
    [
        ("fresh_compile", "backbone", None, "compiling (backbone)"),
        ("cache_load", "eagle_head", None, "loading compiled graphs (eagle_head)"),
        ("kv_cache_tokens", None, 524288, "KV cache 524,288 tokens"),
        ("fatal", None, "rpc_timeout", "fatal: rpc_timeout"),
        ("compile_disabled", None, None, None),
    ],
)
def test_status_lines(kind, component, value, status):
    from rocmseat.launch.startuplog import LogEvent
    from rocmseat.launch.supervise import status_of

    assert status_of(LogEvent(kind, component, value)) == status
