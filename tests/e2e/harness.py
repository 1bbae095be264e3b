"""The engine tier's instruments: rocmseat's CLI as a subprocess, a notify socket, a webhook
receiver, traffic, exporter scrapes. Every wait is bounded and, on failure, says what it saw."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO

# `python3 -m rocmseat.cli.main` has no __main__ guard: call the console script's entry point.
CLI = [sys.executable, "-c", "from rocmseat.cli.main import main; main()"]
PROMPTS = ("the state of the world", "people work here every day", "what is the name of this house")

DEFAULT_PYTHON = "/opt/rocmseat/vllm-venv/bin/python"
UNAVAILABLE = Path("/opt/rocmseat/vllm-unavailable.txt")


_ENGINE: list[Path | str] = []  # the one probe's outcome: the engine Python or the skip reason


def engine_python_or_skip() -> Path:
    """The engine's Python, or a pytest skip saying why the engine cannot run here."""
    if not _ENGINE:
        _ENGINE.append(_probe_engine())
    outcome = _ENGINE[0]
    if isinstance(outcome, str):
        pytest.skip(outcome)
    return outcome


def _probe_engine() -> Path | str:
    if UNAVAILABLE.exists():
        return f"vLLM CPU engine unavailable: {UNAVAILABLE.read_text().strip()}"
    python = Path(os.environ.get("ROCMSEAT_VLLM_PYTHON") or DEFAULT_PYTHON)
    if not python.exists():
        return f"no engine Python at {python} (set ROCMSEAT_VLLM_PYTHON; .ci/setup installs it)"
    try:
        probe = subprocess.run([str(python), "-c", "import vllm"], capture_output=True, text=True,
                               timeout=300)
    except subprocess.TimeoutExpired:
        return f"{python} -c 'import vllm' did not finish within 300 s"
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["(no output)"])[-1]
        return f"{python} -c 'import vllm' failed: {last}"
    return python


class Timeout(AssertionError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], Any], timeout_s: float, seen: Callable[[], str],
             every_s: float = 0.5) -> Any:
    """Poll `check` until it returns a truthy value; else fail naming `what` and what was seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Timeout(f"{what}: not within {timeout_s:.0f} s; seen:\n{seen()}")
        time.sleep(every_s)


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"({path}: {exc.strerror})"


def cli(*args: str | Path, timeout_s: float = 120.0,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout_s, cwd=REPO,
        env=env,
    )


def tree_digest(root: Path) -> dict[str, tuple[int, str]]:
    """relative path -> (size, sha256) of every regular file under root."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(root))] = (
                path.stat().st_size, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


class NotifySocket:
    """A systemd-style notify socket (AF_UNIX datagram) that records every message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.messages: list[str] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.bind(str(path))
        self._sock.settimeout(0.2)

    def drain(self) -> list[str]:
        while True:
            try:
                data = self._sock.recv(65536)
            except (TimeoutError, BlockingIOError):
                return self.messages
            self.messages.append(data.decode(errors="replace"))

    def saw(self, line: str) -> bool:
        return any(line in m.splitlines() for m in self.drain())

    def close(self) -> None:
        self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


@dataclass
class Webhook:
    """A local Alertmanager-style receiver: records each POST's JSON body."""

    bodies: list[Any] = field(default_factory=list)
    port: int = 0
    _server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                try:
                    bodies.append(json.loads(raw))
                except ValueError:
                    bodies.append({"unparsed": raw.decode(errors="replace")})
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v2/alerts"

    def alerts(self) -> list[dict[str, Any]]:
        """Every alert object received (an Alertmanager v2 POST body is a list of alerts)."""
        out: list[dict[str, Any]] = []
        for body in list(self.bodies):
            items = body if isinstance(body, list) else body.get("alerts", [body])
            out.extend(a for a in items if isinstance(a, dict))
        return out

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


class Proc:
    """A long-running rocmseat command (launch, watch) in its own session, output to a file."""

    def __init__(self, args: list[str | Path], log: Path, env: dict[str, str]) -> None:
        self.log = log
        self._out = open(log, "ab")
        self.proc = subprocess.Popen(
            [*CLI, *map(str, args)], stdout=self._out, stderr=subprocess.STDOUT, env=env,
            cwd=REPO, start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_exit(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            raise Timeout(f"{self.log.name}: still running after {timeout_s:.0f} s; last lines:\n"
                          f"{tail(self.log)}") from exc

    def stop(self, grace_s: float = 60.0) -> int | None:
        """SIGTERM (rocmseat forwards it to the engine), then SIGKILL the whole group."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left of the session (an engine that ignored SIGTERM) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._out.close()
        return self.proc.returncode


# The e2e seat serves with `--api-key` (issue 16): launch's canary must authenticate, and every
# client here does too. One per session, so a grep for it finds only where it leaked.
API_KEY = "sk-e2e-" + secrets.token_hex(16)
AUTH = {"Authorization": f"Bearer {API_KEY}"}


def complete(port: int, model: str, prompts: tuple[str, ...] = PROMPTS,
             max_tokens: int = 64) -> list[str]:
    """Greedy completions (temperature 0, ignore_eos: always max_tokens tokens)."""
    texts = []
    with httpx.Client(timeout=120.0, headers=AUTH) as client:
        for prompt in prompts:
            r = client.post(
                f"http://127.0.0.1:{port}/v1/completions",
                json={"model": model, "prompt": prompt, "max_tokens": max_tokens,
                      "temperature": 0, "ignore_eos": True},
            )
            r.raise_for_status()
            texts.append(r.json()["choices"][0]["text"])
    return texts


class Traffic:
    """Greedy completions in a loop on a thread, so drafts keep flowing while we wait."""

    def __init__(self, port: int, model: str, max_tokens: int = 48) -> None:
        self.port, self.model, self.max_tokens = port, model, max_tokens
        self.errors: list[str] = []
        self.done = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                complete(self.port, self.model, PROMPTS[:1], max_tokens=self.max_tokens)
                self.done += 1
            except (httpx.HTTPError, KeyError, ValueError) as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                time.sleep(0.5)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=150)


def scrape(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0).text
    except httpx.HTTPError as exc:
        return f"(scrape failed: {exc})"


def gauge(text: str, name: str, **labels: str) -> float | None:
    """The value of the first sample `name{...}` whose labels include `labels`."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


class ExporterSampler:
    """Polls the watchdog's exporter on a thread and records each new evaluation it sees.

    Each record carries the watchdog's own evaluation counter (`rocmseat_watch_evaluations`),
    so "within two intervals" is counted in the watchdog's evaluations, not in seconds of a
    loaded machine, and a poll that stalls or fails cannot shrink the count: the drafting
    evaluations are those after the last one seen without drafts, so a missed poll can only
    make the count larger (a late verdict), never smaller. Failed polls are counted and the
    last one is kept, so a sampler that saw nothing says why.
    """

    def __init__(self, port: int, replica: str, alert: str, every_s: float = 0.25) -> None:
        self.port, self.replica, self.alert, self.every_s = port, replica, alert, every_s
        # (monotonic time, evaluations, drafts/s, generated tokens/s, alert active) at each
        # observed change
        self.records: list[tuple[float, float | None, float | None, float | None,
                                 float | None]] = []
        self.polls = 0
        self.failures = 0
        self.last_failure = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=2.0) as client:
            while not self._stop.is_set():
                self._poll(client)
                self._stop.wait(self.every_s)

    def _poll(self, client: httpx.Client) -> None:
        self.polls += 1
        try:
            page = client.get(f"http://127.0.0.1:{self.port}/metrics")
            page.raise_for_status()
            self.observe(page.text)
        except (httpx.HTTPError, ValueError) as exc:  # a refused poll or a page that won't parse
            self.failures += 1
            self.last_failure = f"{type(exc).__name__}: {exc}"[:200]

    def observe(self, text: str) -> float | None:
        """Record the evaluation on an exporter page (the test's own waits feed it too, so a
        stalled poll thread cannot leave the firing unseen); returns the alert's value."""
        r = self.replica
        row = (gauge(text, "rocmseat_watch_evaluations_total"),
               gauge(text, "rocmseat_spec_drafts_per_second", replica=r),
               gauge(text, "rocmseat_generation_tokens_per_second", replica=r),
               gauge(text, "rocmseat_alert_active", replica=r, alert=self.alert))
        with self._lock:
            if not self.records or self.records[-1][1:] != row:
                self.records.append((time.monotonic(), *row))
        return row[3]

    def __enter__(self) -> ExporterSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def windows_until_firing(self) -> tuple[int, float | None]:
        """Evaluations with drafts flowing, up to and including the first with the alert
        active, and the seconds from the first record with drafts to the firing one (None:
        not seen firing). The drafting evaluations are those after the last evaluation seen without
        drafts (the first record is the state before traffic), so 0 means the alert was
        never seen firing, or fired on an evaluation without drafts."""
        quiet_at: float | None = None
        first_t: float | None = None
        # two observers (the poll thread, the test's waits) may append out of order
        with self._lock:
            seen = sorted((r for r in self.records if r[1] is not None), key=lambda r: (r[1], r[0]))
        for index, (t, evaluations, drafts, _gen, active) in enumerate(seen):
            assert evaluations is not None
            if active == 1.0:
                if quiet_at is None or not drafts:
                    return 0, None
                return int(evaluations - quiet_at), t - (t if first_t is None else first_t)
            if drafts and index > 0:
                first_t = t if first_t is None else first_t
            else:
                # the first record is the state as traffic begins, whatever its window drafted
                # (a readiness canary's drafts land in it: a CI run saw 0.5 drafts/s there)
                quiet_at, first_t = evaluations, None
        return 0, None

    def shown(self) -> str:
        t0 = self.records[0][0] if self.records else 0.0
        rows = [f"  +{t - t0:5.1f} s evaluation {e} drafts/s {d} gen tok/s {g} {self.alert} {a}"
                for t, e, d, g, a in self.records[-12:]]
        rows.append(f"  ({self.polls} polls, {self.failures} failed"
                    + (f"; last: {self.last_failure})" if self.failures else ")"))
        return "\n".join(rows)


# ----- what each scenario saw, printed at the end of the run (.ci/run shows it) ---------------
NOTES: dict[str, list[str]] = {}
# every engine start of the session, by the test that made it, as its launch log says the
# compiled graphs went (rocmseat.launch.startuplog): "fresh" (an empty cache, compiled),
# "load failed" (an artifact found, its load failed, compiled again: vLLM CPU 0.32.0's AOT
# artifacts fail with "'function' object has no attribute 'finalize_loading'") or "loaded"
STARTS: dict[str, list[str]] = {}


def current_test() -> str:
    """The running test's name (pytest's PYTEST_CURRENT_TEST), as the summary keys scenarios."""
    running = os.environ.get("PYTEST_CURRENT_TEST", "?")
    return running.split("::")[-1].split(" ")[0].split("[")[0].removeprefix("test_")


def count_start(launch_log: Path, scenario: str | None = None) -> str:
    """Count one engine start (its `rocmseat launch` output) for `scenario` (default: the
    running test); returns how its compiled graphs went."""
    from rocmseat.launch.startupfacts import CompileOutcome
    from rocmseat.launch.startuplog import classify_text

    outcomes = {c.outcome for c in classify_text(
        launch_log.read_text(errors="replace")).components}
    how = ("load failed" if CompileOutcome.LOAD_FAILURE in outcomes
           else "fresh" if CompileOutcome.FRESH_COMPILE in outcomes
           else "loaded" if outcomes else "no compile lines")
    STARTS.setdefault(scenario or current_test(), []).append(how)
    return how


def shown_starts(starts: list[str]) -> str:
    return ", ".join(f"{starts.count(how)} {how}" for how in dict.fromkeys(starts))


def note(scenario: str, text: str) -> None:
    NOTES.setdefault(scenario, []).append(text)
