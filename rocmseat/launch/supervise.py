"""Run the engine in the foreground of `rocmseat launch` (this room's one child, started and
stopped through rocmseat/procgroup.py; argv only).

- The engine runs in its own session and process group, so a stop reaches every process it
  spawned (vLLM's EngineCore and TP workers are children of the API server): SIGTERM to the
  group, SIGKILL after a grace, and a final SIGKILL sweep of the group so nothing is left.
- Its stdout and stderr pass through line by line to our stdout (the journal under systemd)
  while the startup-log classifier reads them.
- SIGTERM and SIGINT sent to us are forwarded to the engine's group; we then wait for it up to
  the stop grace, then kill the group (as systemd does after TimeoutStopSec=, systemd.kill(5)):
  a vLLM API server that waits for an open connection on SIGTERM held a launch 120 s.
- Readiness is probed until the seat's timeout (readiness.py); READY=1 goes to systemd only then.
- The exit code is the engine's exit status (128+N when a signal N ended it), or 1 with the
  reason when it never became ready.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import FrameType
from typing import IO, Any

from rocmseat import exitcodes
from rocmseat.errors import RocmseatError
from rocmseat.launch.readiness import Canary, Fetch, ProbeResult, http_fetch, probe
from rocmseat.launch.sdnotify import Notifier
from rocmseat.launch.startuplog import LogEvent, StartupLogReader, StartupSummary
from rocmseat.procgroup import (
    affinity,
    describe_returncode,
    exit_code_of,
    kill_group,
    signal_group,
    spawn,
    stop_group,
    sweep_group,
    wait_for,
)

CANARY_TIMEOUT_S = 60.0  # one canary request; a hung engine must not hold the probe forever


@dataclass(frozen=True, slots=True)
class EngineSpec:
    argv: tuple[str, ...]
    env: Mapping[str, str]  # the complete environment of the engine
    cpus: frozenset[int] | None  # CPU affinity set in the child (when numactl is not used)
    canary: Canary
    readiness_timeout_s: float
    probe_interval_s: float = 2.0
    stop_grace_s: float = 30.0


@dataclass(frozen=True, slots=True)
class SupervisionResult:
    exit_code: int
    engine_returncode: int | None
    ready: bool
    ready_after_s: float | None
    timed_out: bool
    signal_received: int | None
    reason: str  # one line for the user and the startup report
    summary: StartupSummary


class _Pump(threading.Thread):
    """Copies the engine's output to `echo` line by line and feeds the classifier."""

    def __init__(self, stream: IO[bytes], reader: StartupLogReader,
                 echo: Callable[[str], None]) -> None:
        super().__init__(name="engine-output", daemon=True)
        self.stream = stream
        self.reader = reader
        self.echo = echo
        self.lock = threading.Lock()
        self.events: queue.SimpleQueue[LogEvent] = queue.SimpleQueue()

    def run(self) -> None:
        for raw in iter(self.stream.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            with contextlib.suppress(Exception):  # a closed journal must not stop the reading
                self.echo(line if line.endswith("\n") else line + "\n")
            with self.lock:
                for event in self.reader.feed(line):
                    self.events.put(event)
        self.stream.close()

    def summary(self) -> StartupSummary:
        with self.lock:
            return self.reader.summary()


def status_of(event: LogEvent) -> str | None:
    """The STATUS= text systemd shows for an event of the startup log."""
    where = f" ({event.component})" if event.component else ""
    return {
        "fresh_compile": f"compiling{where}",
        "cache_load": f"loading compiled graphs{where}",
        "load_failure": f"cache load failed, compiling again{where}",
        "drafter_loaded": "drafter loaded",
        "kv_cache_tokens": f"KV cache {event.value:,} tokens" if isinstance(event.value, int)
        else None,
        "init_engine_s": f"engine initialised in {event.value} s",
        "server_started": "server started, probing /health and a canary completion",
        "fatal": f"fatal: {event.value}",
    }.get(event.kind)


def supervise(
    spec: EngineSpec,
    *,
    reader: StartupLogReader,
    notifier: Notifier,
    echo: Callable[[str], None],
    on_ready: Callable[[StartupSummary, float], None] | None = None,
    fetch: Fetch = http_fetch,
) -> SupervisionResult:
    # Handlers first: a SIGTERM between the fork and their installation would kill us and
    # orphan the engine in its own session.
    state = _State()
    previous = _install_forwarding(state)
    try:
        with affinity(spec.cpus):
            proc = spawn(spec.argv, env=spec.env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    except FileNotFoundError:
        _restore(previous)
        raise RocmseatError(f"{spec.argv[0]}: command not found",
                            hint="check [engine] command in the seat file") from None
    except BaseException as exc:
        _restore(previous)
        if isinstance(exc, PermissionError):
            raise RocmseatError(f"{spec.argv[0]}: {exc.strerror}") from None
        raise
    state.attach(proc)
    assert proc.stdout is not None
    pump = _Pump(proc.stdout, reader, echo)
    pump.start()
    try:
        return _watch(spec, proc, pump, state, notifier=notifier, on_ready=on_ready, fetch=fetch)
    finally:
        _restore(previous)
        stop_group(proc, spec.stop_grace_s)
        pump.join(timeout=10.0)


class _State:
    def __init__(self) -> None:
        self.pid: int | None = None
        self.signal_received: int | None = None

    def attach(self, proc: subprocess.Popen[bytes]) -> None:
        self.pid = proc.pid
        if self.signal_received is not None:  # it came while we were forking
            self._send(self.signal_received)

    def forward(self, signum: int, _frame: FrameType | None) -> None:
        self.signal_received = signum
        self._send(signum)

    def _send(self, signum: int) -> None:
        if self.pid is None:
            return
        signal_group(self.pid, signum)


def _install_forwarding(state: _State) -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():
        return {}  # signal handlers can only be set in the main thread
    previous: dict[int, Any] = {}
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous[signum] = signal.signal(signum, state.forward)
    return previous


def _restore(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def _stop_on_signal(spec: EngineSpec, proc: subprocess.Popen[bytes], signum: int,
                    notifier: Notifier) -> None:
    """The signal was forwarded to the engine's group: wait out the grace, then kill it."""
    notifier.stopping(f"stopping: received {signal.Signals(signum).name}")
    if not wait_for(proc, spec.stop_grace_s):
        kill_group(proc)


def _watch(
    spec: EngineSpec, proc: subprocess.Popen[bytes], pump: _Pump, state: _State, *,
    notifier: Notifier, on_ready: Callable[[StartupSummary, float], None] | None, fetch: Fetch,
) -> SupervisionResult:
    start = time.monotonic()
    deadline = start + spec.readiness_timeout_s
    next_probe = start
    ready_after: float | None = None
    last_probe = ProbeResult(False, "health", "not probed yet")
    notifier.status(f"starting engine (pid {proc.pid})")
    while True:
        _drain_status(pump, notifier)
        # The signal first: the engine may already be gone by the time we look (the handler
        # forwarded it at once), and systemd should still hear that we are stopping.
        if state.signal_received is not None:
            _stop_on_signal(spec, proc, state.signal_received, notifier)
            break
        if proc.poll() is not None:
            break
        now = time.monotonic()
        if ready_after is None:
            if now >= deadline:
                reason = (f"not ready within {spec.readiness_timeout_s:g} s "
                          f"(last probe: {last_probe.detail}); engine stopped")
                notifier.stopping(reason)
                stop_group(proc, spec.stop_grace_s)
                return _result(exitcodes.PROBLEM, proc, None, timed_out=True, state=state,
                               reason=reason, pump=pump)
            if now >= next_probe:
                last_probe = probe(spec.canary, timeout_s=max(0.5, min(CANARY_TIMEOUT_S,
                                                                       deadline - now)),
                                   fetch=fetch)
                next_probe = time.monotonic() + spec.probe_interval_s
                if last_probe.ready:
                    ready_after = time.monotonic() - start
                    summary = pump.summary()
                    notifier.ready(_ready_status(spec, summary, ready_after))
                    if on_ready is not None:
                        on_ready(summary, ready_after)
                    continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.2 if ready_after is None else 1.0)
    rc = proc.wait()
    sweep_group(proc, lambda t: pump.join(timeout=t), min(spec.stop_grace_s, 5.0))
    if state.signal_received is not None:
        name = signal.Signals(state.signal_received).name
        reason = f"received {name}, forwarded to the engine; it exited {describe_returncode(rc)}"
    elif ready_after is None:
        reason = f"the engine exited {describe_returncode(rc)} before it was ready"
    else:
        after_s = time.monotonic() - start
        reason = f"the engine exited {describe_returncode(rc)} after {after_s:.0f} s"
    code = exit_code_of(rc)
    if ready_after is None and state.signal_received is None and code == exitcodes.OK:
        code = exitcodes.PROBLEM  # an engine that quits cleanly before serving is no success
    return _result(code, proc, ready_after, timed_out=False, state=state, reason=reason,
                   pump=pump)


def _drain_status(pump: _Pump, notifier: Notifier) -> None:
    latest: str | None = None
    while True:
        try:
            event = pump.events.get_nowait()
        except queue.Empty:
            break
        latest = status_of(event) or latest
    if latest is not None:
        notifier.status(latest)


def _ready_status(spec: EngineSpec, summary: StartupSummary, after_s: float) -> str:
    parts = [f"ready in {after_s:.0f} s on {spec.canary.base_url}"]
    if summary.kv_cache_tokens is not None:
        parts.append(f"KV {summary.kv_cache_tokens:,} tokens")
    if summary.max_concurrency is not None:
        parts.append(f"max concurrency {summary.max_concurrency:.2f}x")
    return ", ".join(parts)


def _result(code: int, proc: subprocess.Popen[bytes], ready_after: float | None, *,
            timed_out: bool, state: _State, reason: str, pump: _Pump) -> SupervisionResult:
    return SupervisionResult(
        exit_code=code, engine_returncode=proc.returncode, ready=ready_after is not None,
        ready_after_s=ready_after, timed_out=timed_out, signal_received=state.signal_received,
        reason=reason, summary=pump.summary(),
    )
