"""The watchdog's listener: its own /metrics, `/ready/<replica>` and `/healthz`.

No global registry (nothing registers at import time); the collector reads an immutable
`ExportState` that the service builds from the loop's last evaluation, so a scrape never sees
half a step. The target's labels (file_sd) ride on every per-replica series; their names are
the union over targets (a target without one has it empty, which Prometheus reads as absent).

The listener holds at most `MAX_CLIENTS` connections at a time (a thread each, a 5 s read
timeout); one more is answered `503 busy` and closed at once, so idle or slow clients can never
grow the watcher's threads. A label value the exposition cannot encode (a lone surrogate)
becomes U+FFFD on the way out, and a page that still cannot be rendered is a one-line 500:
one bad label never takes the exporter down for the whole fleet. The routes are a pure
function (`answer`: method, target, state, now -> `Reply`); the server is a thin shell around it,
listening with a backlog of 128 so a fleet's scrapers connecting at once are all queued.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

from rocmseat.redact import redact_text
from rocmseat.watch.alerts import ALERTS
from rocmseat.watch.readiness import (
    DEFAULT_MIN_READY,
    Readiness,
    seat_readiness,
    watcher_health,
)
from rocmseat.watch.status import ReplicaStatus

# Read by the speculation gate (rocmseat.speculation.gate.procs), so named once: the watchdog's
# own counters (exposed with `_total`), and its start line, which says where this listener is.
EVALUATIONS = "rocmseat_watch_evaluations"
SCRAPE_ERRORS = "rocmseat_scrape_errors"
START_LINE = "rocmseat-watch start"  # ... exporter=HOST:PORT ([HOST]:PORT for IPv6)
_EXPORTER_FIELD = re.compile(r"\bexporter=(?:\[(?P<v6>[0-9a-fA-F:.]+)\]|(?P<v4>[0-9.]+)):"
                             r"(?P<port>[0-9]{1,5})\b")


@dataclass(frozen=True, slots=True)
class ExportState:
    statuses: tuple[ReplicaStatus, ...] = ()
    evaluated_at_s: float | None = None  # wall clock at the end of the last evaluation
    started_at_s: float = 0.0
    max_age_s: float = float("inf")
    evaluations: int = 0
    last_duration_s: float | None = None
    # sink name (webhook, command-hook) -> (failed attempts, failing now)
    sink_failures: tuple[tuple[str, int, bool], ...] = ()
    # remediation (docs/remediate.md): (replica, action, outcome, count); None: not remediating
    remediations: tuple[tuple[str, str, str, int], ...] | None = None
    remediation_halted: tuple[tuple[str, bool], ...] = ()  # (scope, halted)
    min_ready: int = DEFAULT_MIN_READY  # the seat's floor (rocmseat.watch.readiness)


StateSource = Callable[[], "ExportState | list[ReplicaStatus]"]


def _state(source: StateSource) -> ExportState:
    got = source()
    if isinstance(got, ExportState):
        return got
    return ExportState(statuses=tuple(got))


class WatchCollector:
    def __init__(self, source: StateSource, clock: Callable[[], float] = time.time) -> None:
        self._source = source
        self._clock = clock

    def collect(self) -> Iterator[Any]:  # noqa: PLR0915
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        state = _state(self._source)
        statuses = state.statuses
        extra = sorted({k for s in statuses for k, _ in s.labels} - {"replica"})
        names = ["replica", *extra]

        def gauge(name: str, doc: str, more: tuple[str, ...] = ()) -> Any:
            return GaugeMetricFamily(name, doc, labels=[*names, *more])

        up = gauge("rocmseat_replica_up", "1 when the replica's /metrics was scraped and parsed.")
        ready = gauge("rocmseat_replica_ready",
                      "1 while /ready/<replica> answers 200 (up, not stalled, not blind, drafter "
                      "not dead, verdict fresh).")
        errors = CounterMetricFamily(
            SCRAPE_ERRORS, "Failed scrapes of the replica's /metrics.", labels=names)
        al = gauge("rocmseat_spec_acceptance_length",
                   "Mean acceptance length (1 + accepted/drafts) of the last judged window.")
        rate = gauge("rocmseat_spec_draft_acceptance_rate",
                     "Accepted draft tokens / draft tokens in the last judged window.")
        pos = gauge("rocmseat_spec_position_acceptance",
                    "Share of drafts whose first position+1 tokens were accepted (last judged "
                    "window).", ("position",))
        eff_k = gauge("rocmseat_spec_effective_k", "Draft tokens per draft in the last window.")
        drafts = gauge("rocmseat_spec_drafts_per_second", "Drafts per second in the last window.")
        base = gauge("rocmseat_spec_baseline_acceptance_length",
                     "The baseline acceptance length (pinned or learned) at full K.")
        expected = gauge("rocmseat_spec_expected_acceptance_length",
                         "The baseline at the judged window's effective K.")
        cusum = gauge("rocmseat_spec_cusum", "The acceptance-drop CUSUM (alarm at threshold h).")
        gen = gauge("rocmseat_generation_tokens_per_second",
                    "Generated tokens per second in the last window.")
        running = gauge("rocmseat_requests_running", "Requests running (vLLM gauge, summed).")
        waiting = gauge("rocmseat_requests_waiting", "Requests waiting (vLLM gauge, summed).")
        kv = gauge("rocmseat_kv_cache_usage_ratio", "KV-cache usage of the fullest engine (0-1).")
        prefix = gauge("rocmseat_prefix_cache_hit_ratio", "Prefix-cache hits/queries, last window.")
        alert = gauge("rocmseat_alert_active", "1 while the alert is firing.", ("alert",))
        now = self._clock()
        verdicts = seat_readiness(statuses, evaluated_at_s=state.evaluated_at_s, now_s=now,
                                  max_age_s=state.max_age_s, min_ready=state.min_ready)
        for s in statuses:
            given = dict(s.labels)
            r = [_encodable(v) for v in (s.replica, *(given.get(k, "") for k in extra))]
            up.add_metric(r, 1.0 if s.up else 0.0)
            verdict = verdicts[s.replica]
            if state.evaluated_at_s is not None:
                ready.add_metric(r, 1.0 if verdict.ready else 0.0)
            errors.add_metric(r, float(s.scrape_errors_total))
            for name in ALERTS:
                alert.add_metric([*r, name], 1.0 if name in s.alerts else 0.0)
            if s.baseline is not None:
                base.add_metric(r, s.baseline.acceptance_length)
            _add(expected, r, s.expected_al)
            cusum.add_metric(r, s.cusum)
            judged = s.judged
            if judged is not None:
                _add(al, r, judged.acceptance_length)
                _add(rate, r, judged.draft_acceptance_rate)
                for i, value in enumerate(judged.position_acceptance or ()):
                    pos.add_metric([*r, str(i)], value)
            window = s.window
            if window is not None:
                _add(eff_k, r, window.effective_k)
                _add(drafts, r, window.drafts_per_s)
                _add(gen, r, window.generation_tokens_per_s)
                _add(running, r, window.running)
                _add(waiting, r, window.waiting)
                _add(kv, r, window.kv_usage)
                _add(prefix, r, window.prefix_cache_hit_rate)
        yield from (up, ready, errors, al, rate, pos, eff_k, drafts, base, expected, cusum, gen,
                    running, waiting, kv, prefix, alert)
        yield from _watcher_families(state)


def _watcher_families(state: ExportState) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    for sink, failures, failing in state.sink_failures:
        name = sink.replace("-", "_")
        yield CounterMetricFamily(f"rocmseat_{name}_failures",
                                  f"Failed {sink} delivery attempts.", value=float(failures))
        yield GaugeMetricFamily(f"rocmseat_{name}_failing",
                                f"1 while the last {sink} delivery attempt failed.",
                                value=1.0 if failing else 0.0)
    if state.remediations is not None:
        from rocmseat.watch.remediate.policy import OUTCOME_CLASSES, outcome_class

        # the outcome is one of a closed set (free text in a label is a cardinality bug and
        # may carry what a child printed); the text itself is in the journal
        total = CounterMetricFamily("rocmseat_remediations", "Remediation steps journalled, by "
                                    "replica, action and outcome class.",
                                    labels=["replica", "action", "outcome"])
        for replica, action, outcome, count in state.remediations:
            label = outcome if outcome in OUTCOME_CLASSES else outcome_class(outcome)
            total.add_metric([_encodable(replica), _encodable(action), label], float(count))
        yield total
        halted = GaugeMetricFamily("rocmseat_remediation_halted", "1 while a remediation bound "
                                   "has halted remediation in this scope (until `rocmseat "
                                   "remediate reset`).", labels=["scope"])
        for scope, on in state.remediation_halted:
            halted.add_metric([_encodable(scope)], 1.0 if on else 0.0)
        yield halted
    if state.evaluated_at_s is not None:
        yield CounterMetricFamily(EVALUATIONS,
                                  "Evaluations (scrape every replica, judge) done.",
                                  value=float(state.evaluations))
        yield GaugeMetricFamily("rocmseat_watch_last_evaluation_timestamp_seconds",
                                "When the last evaluation ended (Unix time).",
                                value=state.evaluated_at_s)
    if state.last_duration_s is not None:
        yield GaugeMetricFamily("rocmseat_watch_evaluation_duration_seconds",
                                "Wall time of the last evaluation (scrapes included).",
                                value=state.last_duration_s)


_SURROGATE = re.compile("[\ud800-\udfff]")
MAX_CLIENTS = 32


def _encodable(value: str) -> str:
    """The value as UTF-8 can carry it: a lone surrogate becomes U+FFFD (what Go's decoders
    make of it, so Prometheus would show the same)."""
    return _SURROGATE.sub("\ufffd", value)


def _add(family: Any, labels: list[str], value: float | None) -> None:
    if value is not None:
        family.add_metric(labels, value)


def make_registry(source: StateSource, clock: Callable[[], float] = time.time) -> Any:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(WatchCollector(source, clock))
    return registry


def render(source: StateSource) -> str:
    from prometheus_client import generate_latest

    return str(generate_latest(make_registry(source)).decode())


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    # ASCII digits only: str.isdigit() also accepts "²" and "١", which int() then refuses.
    if not sep or not re.fullmatch(r"[0-9]{1,5}", port) or not 0 <= int(port) <= 65535:
        raise ValueError(f"--exporter-listen {value!r}: expected HOST:PORT")
    host = host.strip("[]") or "127.0.0.1"
    if any(c.isspace() or not c.isprintable() for c in host):
        raise ValueError(f"--exporter-listen {value!r}: expected HOST:PORT")
    return host, int(port)


_BUSY_BODY = b"busy: too many clients\n"
_BUSY = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: "
         + str(len(_BUSY_BODY)).encode() + b"\r\nConnection: close\r\n\r\n" + _BUSY_BODY)


@dataclass(frozen=True, slots=True)
class Reply:
    """One HTTP answer: status, headers (in order) and body (empty for HEAD; Content-Length
    still the full body's, as HEAD requires)."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


_TEXT = "text/plain"


def _reply(status: int, body: bytes, ctype: str, head: bool) -> Reply:
    headers = (("Content-Type", ctype), ("Content-Length", str(len(body))),
               ("Cache-Control", "no-store"))
    return Reply(status, headers, b"" if head else body)


def _verdict(verdict: Readiness, head: bool) -> Reply:
    return _reply(verdict.http_status, _line(verdict.reason), _TEXT, head)


def answer(method: str, target: str, state: ExportState, now_s: float) -> Reply:
    """The listener's routes as a pure function: request method and target (path and query)
    with the state of this moment -> the reply. GET and HEAD only (the shell offers no other)."""
    if method not in ("GET", "HEAD"):
        return _reply(501, _line(f"unsupported method {method[:20]!r}"), _TEXT, False)
    head = method == "HEAD"
    path = target.split("?", 1)[0]
    if path == "/metrics":
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        try:
            page = generate_latest(make_registry(lambda: state, lambda: now_s))
        except Exception as exc:  # never a dead listener: one line, and keep serving
            why = redact_text(f"{type(exc).__name__}: {exc}")[:200]
            return _reply(500, _line(f"cannot render the metrics: {why}"), _TEXT, head)
        return _reply(200, page, CONTENT_TYPE_LATEST, head)
    if path == "/healthz":
        return _verdict(watcher_health(evaluated_at_s=state.evaluated_at_s,
                                       started_at_s=state.started_at_s, now_s=now_s,
                                       max_age_s=state.max_age_s), head)
    if path.startswith("/ready/") and len(path) > len("/ready/"):
        name = unquote(path[len("/ready/"):])
        if not any(s.replica == name for s in state.statuses):
            if state.evaluated_at_s is None and not state.statuses:
                return _verdict(Readiness(False, "not evaluated yet"), head)
            return _reply(404, _line(f"unknown replica {name[:80]!r}"), _TEXT, head)
        verdicts = seat_readiness(state.statuses, evaluated_at_s=state.evaluated_at_s,
                                  now_s=now_s, max_age_s=state.max_age_s,
                                  min_ready=state.min_ready)
        return _verdict(verdicts[name], head)
    if path == "/":
        return _reply(200, _line("rocmseat watch: /metrics /healthz /ready/<replica>"), _TEXT,
                      head)
    return _reply(404, _line("not found"), _TEXT, head)


class _Server(ThreadingHTTPServer):
    """A thread per connection, at most MAX_CLIENTS of them; the next is told 503 and closed."""

    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    # socketserver.TCPServer.request_queue_size is 5 (CPython Lib/socketserver.py, passed to
    # listen() in server_activate): with a fleet's scrapers connecting at once, the SYNs past
    # the sixth are dropped and retried after 1 s, 3 s, ... The kernel caps it at
    # net.core.somaxconn (4096 since Linux 5.4).
    request_queue_size = 128

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.slots = threading.BoundedSemaphore(MAX_CLIENTS)
        super().__init__(*args, **kwargs)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            try:
                request.settimeout(0.5)
                request.sendall(_BUSY)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that misbehaves is its own problem: no traceback on the watcher's stderr


def make_exporter(
    listen: str, source: StateSource, clock: Callable[[], float] = time.time
) -> ThreadingHTTPServer:
    """The listener bound and listening on HOST:PORT, not yet serving: a thin shell that reads
    the state and the clock once per request and sends what `answer` says."""
    host, port = parse_listen(listen)

    class Handler(BaseHTTPRequestHandler):
        timeout = 5  # a client that never sends its request does not hold a thread for long
        server_version = "rocmseat-watch"

        def do_GET(self) -> None:
            self._send(answer("GET", self.path, _state(source), clock()))

        def do_HEAD(self) -> None:
            self._send(answer("HEAD", self.path, _state(source), clock()))

        def _send(self, reply: Reply) -> None:
            try:
                self.send_response(reply.status)
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.end_headers()
                if reply.body:
                    self.wfile.write(reply.body)
            except OSError:
                pass  # the client left

        def log_message(self, format: str, *args: Any) -> None:
            pass

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server: ThreadingHTTPServer = type("Server", (_Server,), {"address_family": family})(
        (host, port), Handler)
    return server


def start_exporter(
    listen: str, source: StateSource, clock: Callable[[], float] = time.time
) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Serve /metrics, /ready/<replica> and /healthz on HOST:PORT; returns (server, thread).
    Stop with `server.shutdown(); server.server_close()`."""
    server = make_exporter(listen, source, clock)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                              name="rocmseat-exporter", daemon=True)
    thread.start()
    return server, thread


def listen_address(server: ThreadingHTTPServer) -> str:
    """Where `server` listens, as the start line says it: HOST:PORT, [HOST]:PORT for IPv6."""
    host, port = str(server.server_address[0]), int(server.server_address[1])
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def exporter_url(line: str) -> str | None:
    """The listener's base URL a watch start line names (`listen_address`'s form), or None when
    `line` is no start line with a listening exporter (pure)."""
    if START_LINE not in line:
        return None
    found = _EXPORTER_FIELD.search(line)
    if found is None:
        return None
    host = found.group("v6") or found.group("v4")
    return (f"http://[{host}]:{found.group('port')}" if found.group("v6")
            else f"http://{host}:{found.group('port')}")


def _line(text: str) -> bytes:
    return (" ".join(text.split()) + "\n").encode("utf-8", errors="replace")
