"""The exporter's routes as a pure function (`answer`), and its listen backlog."""

from __future__ import annotations

import select
import socket
import threading
import time

import pytest

from rocmseat.watch.exporter import MAX_CLIENTS, ExportState, answer, make_exporter
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.scrape import Target
from tests.watch.conftest import FakeClock, page


@pytest.fixture
def state(tmp_path):
    """r0 healthy, r1 after a drafter collapse: what the real loop exports after two steps."""
    clock = FakeClock()
    pages = {"r0": [page("00-healthy.txt"), page("01-healthy.txt")],
             "r1": [page("01-healthy.txt"), page("02-collapse.txt")]}
    w = Watcher([Target(n, f"http://{n}/metrics") for n in pages],
                WatchConfig(state_dir=tmp_path, pinned_al=2.9), clock=clock,
                fetch=lambda url, t: pages[url.split("/")[2]].pop(0))
    w.step()
    clock.tick(10)
    w.step()
    w.close()
    assert w.evaluated_at_s is not None
    return ExportState(statuses=tuple(w.statuses), evaluated_at_s=w.evaluated_at_s,
                       started_at_s=w.evaluated_at_s - 100, max_age_s=30,
                       evaluations=w.evaluations, last_duration_s=w.last_duration_s)


@pytest.mark.parametrize(("method", "target", "status", "body"), [
    ("GET", "/ready/r0", 200, b"r0: ready\n"),
    ("GET", "/ready/r0?x=1", 200, b"r0: ready\n"),
    ("GET", "/ready/nobody", 404, b"unknown replica 'nobody'\n"),
    ("GET", "/ready/", 404, b"not found\n"),
    ("GET", "/", 200, b"rocmseat watch: /metrics /healthz /ready/<replica>\n"),
    ("GET", "/nope", 404, b"not found\n"),
    ("HEAD", "/ready/r0", 200, b""),
    ("POST", "/metrics", 501, b"unsupported method 'POST'\n"),
])
def test_routes(state, method, target, status, body):
    got = answer(method, target, state, state.evaluated_at_s)
    assert (got.status, got.body) == (status, body)
    headers = dict(got.headers)
    assert headers["Cache-Control"] == "no-store"
    assert headers["Content-Type"] == "text/plain"
    if method != "HEAD":
        assert headers["Content-Length"] == str(len(body))


def test_head_carries_the_get_length(state):
    get = answer("GET", "/ready/r1", state, state.evaluated_at_s)
    head = answer("HEAD", "/ready/r1", state, state.evaluated_at_s)
    assert get.status == head.status == 503
    assert get.body.startswith(b"r1: spec_drafter_dead: ") and head.body == b""
    assert dict(head.headers)["Content-Length"] == str(len(get.body))


def test_metrics_healthz_and_staleness(state):
    now = state.evaluated_at_s
    metrics = answer("GET", "/metrics", state, now)
    assert metrics.status == 200
    assert dict(metrics.headers)["Content-Type"].startswith("text/plain; version=")
    assert b'rocmseat_replica_ready{replica="r0"} 1.0' in metrics.body
    assert b'rocmseat_replica_ready{replica="r1"} 0.0' in metrics.body
    health = answer("GET", "/healthz", state, now)
    assert health.status == 200 and health.body.startswith(b"ok: last evaluation")
    stale = answer("GET", "/ready/r0", state, now + 31)  # past max_age_s
    assert stale.status == 503 and b"no fresh verdict" in stale.body
    assert answer("GET", "/healthz", state, now + 1000).status == 503


def test_ready_before_the_first_evaluation():
    got = answer("GET", "/ready/r0", ExportState(started_at_s=0.0, max_age_s=30), 1.0)
    assert (got.status, got.body) == (503, b"not evaluated yet\n")


def test_a_page_that_cannot_render_is_a_one_line_500(state):
    # a name the exposition cannot encode (sink names are the service's own; this stands for
    # any collector bug): one line, and the listener keeps serving
    bad = ExportState(statuses=state.statuses, evaluated_at_s=state.evaluated_at_s,
                      sink_failures=(("web\ud800hook", 1, True),))
    got = answer("GET", "/metrics", bad, state.evaluated_at_s)
    assert got.status == 500
    assert got.body == (b"cannot render the metrics: UnicodeEncodeError: 'utf-8' codec can't "
                        b"encode character '\\ud800' in position 12: surrogates not allowed\n")
    assert answer("GET", "/healthz", bad, state.evaluated_at_s).status == 200


def test_120_concurrent_connects_are_all_accepted(state):
    """A fleet's scrapers connecting at once: every connect completes while the listener has
    not accepted one yet (with socketserver's backlog of 5 only 6 would), then each is answered:
    the /healthz verdict, or `503 busy` past MAX_CLIENTS."""
    server = make_exporter("127.0.0.1:0", lambda: state, clock=lambda: state.evaluated_at_s)
    port = server.server_address[1]
    clients = []
    thread = None
    try:
        for _ in range(120):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            clients.append(s)
        pending = set(clients)
        deadline = time.monotonic() + 10  # a bound on the wait, not an assertion on time
        while pending and time.monotonic() < deadline:
            _, writable, _ = select.select([], list(pending), [], 0.5)
            pending -= set(writable)
        errors = [s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) for s in clients]
        assert (len(pending), errors) == (0, [0] * 120)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        statuses = []
        for s in clients:
            s.setblocking(True)
            s.settimeout(10)
            s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        for s in clients:
            data = b""
            while chunk := s.recv(4096):
                data += chunk
            statuses.append(data.split(b"\r\n", 1)[0])
    finally:
        for s in clients:
            s.close()
        server.shutdown() if thread else None
        server.server_close()
    answered = statuses.count(b"HTTP/1.0 200 OK")
    busy = statuses.count(b"HTTP/1.0 503 Service Unavailable")
    assert answered + busy == 120, statuses
    assert answered >= MAX_CLIENTS
