"""The gate's long-running children: `rocmseat launch` (one arm), `rocmseat watch` beside it and
vLLM's benchmark client. The one module of this room that starts a long-running process
(rocmseat.procgroup.spawn; argv lists only, never a shell); rocmseat.runner runs the short ones.

Every child runs in its own session. Stopping one sends SIGTERM to it (launch forwards it to the
engine's process group and waits its --stop-grace), then SIGKILL to its group and to every
process group its descendants were seen in: `rocmseat launch` runs the engine in a group of its
own, which a kill of launch's group alone would leave running. Descendants are noted while the
child runs (psutil), so a launch that died first does not hide its engine.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import queue
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil

from rocmseat.errors import RocmseatError
from rocmseat.launch.sdnotify import NOTIFY_ENV
from rocmseat.procgroup import signal_group, spawn
from rocmseat.redact import redact_text
from rocmseat.text import replace_controls
from rocmseat.watch.exporter import EVALUATIONS, SCRAPE_ERRORS, exporter_url

ROCMSEAT = (sys.executable, "-m", "rocmseat")
BENCH_PROGRAM = Path(__file__).resolve().parent / "vllm_bench.py"
MARK = "@@rocmseat-bench "
ALERT_SINK = Path(__file__).resolve().parent / "alert_sink.py"
HANG_ALERTS = frozenset({"replica_stalled", "replica_down"})
# The watchdog's start line says where its exporter listens; the gate reads the watchdog's own
# evaluation and scrape-error counters there, by the names the exporter defines
# (rocmseat.watch.exporter: a renamed counter fails tests/speculation/test_procs.py).
_EVALUATIONS = re.compile(rf"^{EVALUATIONS}_total (?P<v>\S+)$", re.MULTILINE)
_SCRAPE_ERRORS = re.compile(rf"^{SCRAPE_ERRORS}_total\{{[^}}]*\}} (?P<v>\S+)$", re.MULTILINE)


def watch_scrapes(page: str) -> int | None:
    """Successful scrapes of the watched replica, from the watchdog's own /metrics page: its
    evaluations (each scrapes every target once) less its scrape errors. None when the page
    has no evaluation yet or is not the watchdog's (pure)."""
    evaluations = _EVALUATIONS.search(page)
    if evaluations is None:
        return None
    try:
        total = float(evaluations.group("v"))
        errors = sum(float(m.group("v")) for m in _SCRAPE_ERRORS.finditer(page))
    except ValueError:
        return None
    if not (0 <= total < 1e15 and 0 <= errors < 1e15):
        return None
    return max(int(total - errors), 0)


class ChildError(RocmseatError):
    """A child did not do what the gate needs (not ready, no benchmark client, a hang)."""


LOG_LIMIT_BYTES = 64 << 20


def read_log(path: Path, *, tail_bytes: int | None = None) -> str:
    """A child's log under --out as text: the first LOG_LIMIT_BYTES, or with `tail_bytes` the
    last ones; never through a link, never a FIFO (a planted one would block the read).
    OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if tail_bytes is not None and info.st_size > tail_bytes:
            os.lseek(fd, info.st_size - tail_bytes, os.SEEK_SET)
        chunks: list[bytes] = []
        left = tail_bytes or LOG_LIMIT_BYTES
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks).decode("utf-8", errors="replace")
    finally:
        os.close(fd)


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = read_log(path, tail_bytes=64 << 10).strip().splitlines()
    except OSError:
        return "(no output)"
    shown = [line.strip() for line in text[-lines:] if line.strip()]
    return redact_text(" | ".join(shown)[-400:]) if shown else "(no output)"


def open_log(path: Path) -> IO[bytes]:
    """A child's log under --out, opened for appending: never through a link planted at its
    name, never a FIFO or a device (docs/architecture.md "Hostile input"); ChildError else."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        why = ("is a symlink; rocmseat never writes through a link" if exc.errno == errno.ELOOP
               else "not a regular file: a log is not written there" if exc.errno == errno.ENXIO
               else exc.strerror or type(exc).__name__)  # ENXIO: a FIFO without a reader
        raise ChildError(f"{path}: {why}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ChildError(f"{path}: not a regular file: a log is not written there")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab")


class Child:
    def __init__(self, argv: Sequence[str], log: Path, *, env: Mapping[str, str] | None = None,
                 stdin: bool = False, stdout_pipe: bool = False) -> None:
        self.argv = tuple(str(a) for a in argv)
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open_log(log)
        self._groups: set[int] = set()
        try:
            self.proc = spawn(
                self.argv,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE if stdout_pipe else self._log_file,
                stderr=self._log_file,
                env=env,
            )
        except OSError as exc:
            self._log_file.close()
            raise ChildError(f"{self.argv[0]}: cannot start: {exc.strerror or exc}") from None
        self._groups.add(self.proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def note_groups(self) -> None:
        """Remember the process groups of every descendant (the engine's is its own)."""
        with contextlib.suppress(psutil.Error):
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
                    self._groups.add(os.getpgid(child.pid))

    def stop(self, grace_s: float) -> int | None:
        self.note_groups()
        if self.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self.alive() and time.monotonic() < deadline:
                self.note_groups()
                time.sleep(0.2)
        for group in sorted(self._groups):
            signal_group(group, signal.SIGKILL)  # never our own group (procgroup)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._log_file.close()
        return self.proc.returncode

    def tail(self) -> str:
        return _tail(self.log)


class NotifyListener:
    """A systemd-style notify socket (AF_UNIX datagram) in a private temporary directory."""

    def __init__(self) -> None:
        # AF_UNIX paths are limited to 108 bytes: a short private directory, not --out.
        self._dir = Path(tempfile.mkdtemp(prefix="rocmseat-gate-"))
        self.path = self._dir / "notify"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(self.path))
        self._sock.settimeout(0.5)
        self.messages: list[str] = []

    def receive(self) -> list[str]:
        got: list[str] = []
        while True:
            try:
                data = self._sock.recv(65536)
            except (TimeoutError, BlockingIOError):
                break
            text = data.decode(errors="replace")
            got.append(text)
            self._sock.settimeout(0.0)
        self._sock.settimeout(0.5)
        self.messages.extend(got)
        return got

    def close(self) -> None:
        self._sock.close()
        with contextlib.suppress(OSError):
            self.path.unlink()
        with contextlib.suppress(OSError):
            self._dir.rmdir()


def start_launch(seat_file: Path, replica: str, state_dir: Path, log: Path,
                 notify: NotifyListener, *, stop_grace_s: float) -> Child:
    env = {k: v for k, v in os.environ.items() if k != NOTIFY_ENV}
    env[NOTIFY_ENV] = str(notify.path)
    return Child([*ROCMSEAT, "launch", str(seat_file), "--replica", replica, "--state-dir",
                  str(state_dir), "--stop-grace", f"{stop_grace_s:g}"], log, env=env)


def wait_ready(launch: Child, notify: NotifyListener, timeout_s: float,
               on_status: Callable[[str], None],
               also: Callable[[], str | None] = lambda: None) -> float:
    """Seconds until READY=1; ChildError naming what launch said when it never came, or what
    `also` says (another child that must stay up, such as the benchmark client)."""
    start = time.monotonic()
    while True:
        if (problem := also()) is not None:
            raise ChildError(problem)
        for message in notify.receive():
            for line in message.splitlines():
                if line.startswith("STATUS="):
                    on_status(line.removeprefix("STATUS="))
            if "READY=1" in message.splitlines():
                return time.monotonic() - start
        launch.note_groups()
        if not launch.alive():
            raise ChildError(f"launch exited {launch.proc.returncode} before the replica was "
                             f"ready: {launch.tail()}")
        if time.monotonic() - start > timeout_s:
            raise ChildError(f"no READY=1 within {timeout_s:.0f} s: {launch.tail()}")


@dataclass(frozen=True, slots=True)
class AlertEvent:
    at_s: float  # monotonic
    replica: str
    alert: str
    state: str
    line: str


def _read_from(path: Path, position: int) -> tuple[bytes, int]:
    """What `path` holds from `position` on (bounded per call), and the new position."""
    try:
        with open(path, "rb") as handle:
            handle.seek(position)
            data = handle.read(4 << 20)
            return data, position + len(data)
    except OSError:
        return b"", position


class WatchChild:
    """`rocmseat watch` on the arm's seat. Its alerts reach the gate as structured documents
    (`rocmseat.watch-alert/v1`): the watchdog's `--command-hook` runs alert_sink.py, which
    appends each document as one line to `<log>.alerts.ndjson`; the gate follows that file.
    Its exporter listens on a free loopback port: the gate asks it whether the watchdog really
    scraped the replica during each run (a watchdog that died or never scraped sees no hang,
    and the `hang` gate must then say UNKNOWN, never PASS)."""

    def __init__(self, seat_file: Path, state_dir: Path, log: Path, *, interval_s: float,
                 stall_after_s: float) -> None:
        self.events: list[AlertEvent] = []
        self.exporter: str | None = None  # http://HOST:PORT of the watchdog's own /metrics
        self.interval_s = interval_s
        self.alerts_file = log.with_name(log.name + ".alerts.ndjson")
        self.bad_alerts: list[str] = []  # lines of the alerts file that are no alert document
        self._lock = threading.Lock()
        hook = shlex.join([sys.executable, "-I", str(ALERT_SINK), str(self.alerts_file)])
        self.child = Child([*ROCMSEAT, "watch", str(seat_file), "--state-dir", str(state_dir),
                            "--interval", f"{interval_s:g}", "--stall-after",
                            f"{stall_after_s:g}", "--down-after", "3", "--exporter-listen",
                            "127.0.0.1:0", "--command-hook", hook], log)
        # the log (watch's stderr) says where the exporter listens; both files are followed,
        # not piped: nothing is lost when we read late, and they are kept under --out
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        at = {self.child.log: 0, self.alerts_file: 0}
        pending = {self.child.log: b"", self.alerts_file: b""}
        while not self._stop.is_set():
            for path in (self.child.log, self.alerts_file):
                data, at[path] = _read_from(path, at[path])
                *lines, pending[path] = (pending[path] + data).split(b"\n")
                for raw in lines:
                    line = raw.decode("utf-8", errors="replace")
                    if path == self.alerts_file:
                        self._alert(line)
                    else:
                        self._log_line(line)
            self._stop.wait(0.5)

    def _log_line(self, line: str) -> None:
        if self.exporter is None:
            self.exporter = exporter_url(line)

    def _alert(self, line: str) -> None:
        from rocmseat.speculation.documents import (
            DocumentError,
            DocumentInvalid,
            WatchAlertDoc,
            load_document,
            parse,
        )

        try:
            doc = parse(WatchAlertDoc, load_document(line), str(self.alerts_file))
        except DocumentError as exc:
            with self._lock:
                self.bad_alerts.append(f"{self.alerts_file}: not JSON ({exc})"[:300])
            return
        except DocumentInvalid as exc:
            with self._lock:
                self.bad_alerts.append(redact_text(str(exc))[:300])
            return
        shown = " ".join([f"replica={doc.replica}", f"alert={doc.alert}", f"state={doc.state}",
                          *(f"{k}={v}" for k, v in sorted(doc.details.items()))])
        event = AlertEvent(time.monotonic(), doc.replica, doc.alert, doc.state,
                           redact_text(replace_controls("rocmseat-watch " + shown, "_")))
        with self._lock:
            self.events.append(event)

    def hangs(self) -> list[AlertEvent]:
        with self._lock:
            return [e for e in self.events if e.alert in HANG_ALERTS and e.state == "firing"]

    def alerts(self) -> list[AlertEvent]:
        with self._lock:
            return list(self.events)

    def gone(self) -> str | None:
        """Why the watchdog is not watching any more (it exited), or None."""
        code = self.child.proc.poll()
        if code is None:
            return None
        return f"the watchdog exited {code}: {self.child.tail()}"

    def wait_started(self, timeout_s: float) -> str | None:
        """Wait until the watchdog says where its exporter listens; why not, or None."""
        deadline = time.monotonic() + timeout_s
        while self.exporter is None:
            if (gone := self.gone()) is not None:
                return gone
            if time.monotonic() > deadline:
                return f"the watchdog did not start within {timeout_s:.0f} s: {self.child.tail()}"
            time.sleep(0.2)
        return None

    def scrapes(self) -> int | None:
        """Successful scrapes of the replica so far (the watchdog's own counters), or None when
        they cannot be read."""
        if self.exporter is None:
            return None
        from rocmseat.httpclient import fetch_once

        try:
            return watch_scrapes(fetch_once(self.exporter + "/metrics", 5.0))
        except RocmseatError:
            return None

    def stop(self) -> None:
        self.child.stop(10.0)
        self._stop.set()
        self._thread.join(timeout=5)


class BenchClient:
    """vLLM's `vllm bench serve` kept loaded in one engine-Python process (vllm_bench.py)."""

    def __init__(self, python: Path, log: Path, *, api_key: str | None = None) -> None:
        """Start loading vLLM's client (about 10 s on a CPU host); `wait_ready` before `run`.
        `api_key`: the server's --api-key, handed over the way vLLM's client reads it
        (OPENAI_API_KEY, vllm/benchmarks/lib/endpoint_request_func.py), never in an argv."""
        self.python = python
        env = dict(os.environ)
        if api_key:
            env["OPENAI_API_KEY"] = api_key
        self.child = Child([str(python), str(BENCH_PROGRAM), "--serve"], log, stdin=True,
                           stdout_pipe=True, env=env)
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        self._next = 0

    def gone(self) -> str | None:
        """Why the client is no longer usable (it exited), or None."""
        code = self.child.proc.poll()
        if code is None:
            return None
        return f"the benchmark client exited {code} before its first run: {self.child.tail()}"

    def wait_ready(self, timeout_s: float = 600.0) -> None:
        reply = self._wait(timeout_s, "start", abort=None)
        if not reply.get("ok"):
            raise ChildError(f"vllm bench serve is not usable with {self.python}: "
                             f"{reply.get('error')}")

    def _read(self) -> None:
        stream: IO[bytes] | None = self.child.proc.stdout
        assert stream is not None
        for raw in stream:
            line = raw.decode(errors="replace")
            if line.startswith(MARK):
                try:
                    self._replies.put(json.loads(line[len(MARK):]))
                except ValueError:
                    self._replies.put({"ok": False, "error": f"bad reply {line[:80]!r}"})
        self._replies.put(None)

    def _wait(self, timeout_s: float, what: str,
              abort: Callable[[], str | None] | None) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                reply = self._replies.get(timeout=0.5)
            except queue.Empty:
                reply = {}
            if reply is None:  # its stdout closed: it is exiting
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.child.proc.wait(timeout=10)
                raise ChildError(f"the benchmark client exited "
                                 f"{self.child.proc.poll()} during {what}: {self.child.tail()}")
            if reply:
                return reply
            if abort is not None and (reason := abort()) is not None:
                raise ChildError(f"{what} aborted: {reason}")
            if time.monotonic() > deadline:
                raise ChildError(f"{what} did not finish within {timeout_s:.0f} s")

    def run(self, argv: Sequence[str], timeout_s: float, abort: Callable[[], str | None],
            what: str) -> dict[str, Any]:
        self._next += 1
        request = json.dumps({"id": self._next, "argv": list(argv)}) + "\n"
        stdin = self.child.proc.stdin
        assert stdin is not None
        try:
            stdin.write(request.encode())
            stdin.flush()
        except OSError as exc:
            raise ChildError(f"the benchmark client is gone ({exc}): {self.child.tail()}") from None
        return self._wait(timeout_s, what, abort)

    def stop(self) -> None:
        stdin = self.child.proc.stdin
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.close()
        self.child.stop(5.0)


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.settimeout(1.0)
        try:
            s.connect((host, port))
        except OSError:
            return False
    return True
