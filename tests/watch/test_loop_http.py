"""The loop against a real local HTTP server serving recorded page sequences."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rocmseat.watch import alerts as A
from rocmseat.watch.detector import DetectorParams
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.scrape import Target
from rocmseat.watch.sinks import AlertFanout, BackgroundSender, webhook_deliver
from tests.watch.conftest import OPENMETRICS, TEXT_100, Answer, FakeClock, page


def make(server, tmp_path, clock, *, transitions=None, **config):
    sink = transitions.append if transitions is not None else (lambda t: None)
    cfg = WatchConfig(interval_s=10.0, timeout_s=2.0, state_dir=tmp_path / "state", **config)
    return Watcher([Target("r0", server.url)], cfg, clock=clock, on_transition=sink)


def run_steps(watcher, clock, n):
    out = []
    for _ in range(n):
        out.append(watcher.step()[0])
        clock.tick(10.0)
    return out


def test_healthy_then_collapse_fires_drop_and_dead(page_server, tmp_path):
    clock, transitions = FakeClock(), []
    page_server.play(*(Answer(page(n)) for n in
                       ("00-healthy.txt", "01-healthy.txt", "02-collapse.txt", "03-collapse.txt")))
    w = make(page_server, tmp_path, clock, transitions=transitions, pinned_al=2.9)
    statuses = run_steps(w, clock, 4)
    w.close()
    assert [s.up for s in statuses] == [True] * 4
    assert statuses[1].window is not None and statuses[1].window.acceptance_length > 2.9
    assert set(statuses[2].alerts) == {A.SPEC_ACCEPTANCE_DROP, A.SPEC_DRAFTER_DEAD}
    lines = [t.log_line() for t in transitions]
    expected = ("rocmseat-watch replica=r0 alert=spec_acceptance_drop state=firing al=1.02 "
                "baseline=2.90 drafts=600")
    assert any(line.startswith(expected) for line in lines), lines


def test_restart_gives_no_negative_window_and_blind_page_alerts(page_server, tmp_path):
    clock, transitions = FakeClock(), []
    page_server.play(*(Answer(page(n)) for n in
                       ("01-healthy.txt", "04-restarted.txt", "05-after-restart.txt",
                        "06-blind.txt", "05-after-restart.txt")))
    w = make(page_server, tmp_path, clock, transitions=transitions)
    s = run_steps(w, clock, 5)
    w.close()
    assert s[1].restarted and s[1].window is None
    assert s[2].window is not None and s[2].window.drafts == 600 and s[2].window.accepted_tokens > 0
    assert s[3].blind and A.SPEC_BLIND in s[3].alerts
    assert A.SPEC_BLIND not in s[4].alerts
    assert [(t.alert, t.state) for t in transitions] == [
        (A.SPEC_BLIND, "firing"), (A.SPEC_BLIND, "resolved")]


def test_garbage_html_truncated_and_http_errors_count_and_go_down(page_server, tmp_path):
    clock, transitions = FakeClock(), []
    good = page("00-healthy.txt")
    page_server.play(
        Answer(good),
        Answer("<html><body>502 Bad Gateway</body></html>", content_type="text/plain"),
        Answer(good[: len(good) // 2]),
        Answer("\x00\x17garbage\x99"),
        Answer("oops", status=500),
        Answer(page("01-healthy.txt"), content_type=TEXT_100),
    )
    w = make(page_server, tmp_path, clock, transitions=transitions, down_after=3)
    s = run_steps(w, clock, 6)
    w.close()
    assert [x.up for x in s] == [True, False, False, False, False, True]
    assert "HTML" in (s[1].error or "") and "truncated" in (s[2].error or "")
    assert "HTTP 500" in (s[4].error or "")
    assert s[5].scrape_errors_total == 4
    assert [(t.alert, t.state) for t in transitions] == [
        (A.REPLICA_DOWN, "firing"), (A.REPLICA_DOWN, "resolved")]
    # the window after the outage spans it, from the last good scrape
    assert s[5].window is not None and s[5].window.drafts == 600


def test_timeouts_are_scrape_errors(page_server, tmp_path):
    clock = FakeClock()
    hang = threading.Event()
    page_server.play(Answer(page("00-healthy.txt"), hang=hang))
    cfg = WatchConfig(timeout_s=0.3, down_after=2, state_dir=tmp_path)
    w = Watcher([Target("r0", page_server.url)], cfg, clock=clock)
    try:
        s = run_steps(w, clock, 2)
    finally:
        hang.set()
        w.close()
    assert [x.up for x in s] == [False, False]
    assert "timed out" in (s[0].error or "")
    assert A.REPLICA_DOWN in s[1].alerts


def test_openmetrics_content_type_is_read(page_server, tmp_path):
    clock = FakeClock()
    from tests.watch.conftest import METRICS
    page_server.play(Answer((METRICS / "vllm-qwen-dp2-k7.openmetrics.txt").read_text(),
                            content_type=OPENMETRICS))
    w = make(page_server, tmp_path, clock)
    s = run_steps(w, clock, 1)
    w.close()
    assert s[0].up and s[0].error is None


def test_stall_fires_after_flat_tokens_with_running_requests(page_server, tmp_path):
    clock, transitions = FakeClock(), []
    page_server.play(Answer(page("01-healthy.txt")))  # the same page forever: nothing moves
    w = make(page_server, tmp_path, clock, transitions=transitions, stall_after_s=30.0)
    s = run_steps(w, clock, 5)
    w.close()
    assert [A.REPLICA_STALLED in x.alerts for x in s] == [False, False, False, True, True]


def test_stall_resolves_when_tokens_move_again(page_server, tmp_path):
    clock, transitions = FakeClock(), []
    hung = [Answer(page("00-healthy.txt"))] * 5
    page_server.play(*hung, Answer(page("01-healthy.txt")))  # then the engine moves again
    w = make(page_server, tmp_path, clock, transitions=transitions, stall_after_s=30.0)
    s = run_steps(w, clock, 6)
    w.close()
    assert [A.REPLICA_STALLED in x.alerts for x in s] == [False, False, False, True, True, False]
    assert [(t.alert, t.state) for t in transitions if t.alert == A.REPLICA_STALLED] == [
        (A.REPLICA_STALLED, "firing"), (A.REPLICA_STALLED, "resolved")]


def test_drop_and_dead_resolve_when_acceptance_recovers(page_server, tmp_path):
    clock, transitions = FakeClock(), []
    page_server.play(*(Answer(page(n)) for n in ("01-healthy.txt", "02-collapse.txt",
                                                 "03-collapse.txt", "04-restarted.txt",
                                                 "05-after-restart.txt")))
    w = make(page_server, tmp_path, clock, transitions=transitions, pinned_al=2.9,
             params=DetectorParams(threshold_h=2.0, resolve_windows=1))
    s = run_steps(w, clock, 5)
    w.close()
    assert {A.SPEC_ACCEPTANCE_DROP, A.SPEC_DRAFTER_DEAD} <= set(s[1].alerts)
    assert s[4].window is not None and s[4].window.acceptance_length > 2.9
    assert s[4].alerts == ()
    states = [(t.alert, t.state) for t in transitions]
    assert (A.SPEC_ACCEPTANCE_DROP, "resolved") in states
    assert (A.SPEC_DRAFTER_DEAD, "resolved") in states


def test_a_baseline_that_cannot_be_saved_is_said_and_kept(page_server, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    clock, warnings = FakeClock(), []
    page_server.play(*(Answer(page(n)) for n in ("00-healthy.txt", "01-healthy.txt")))
    cfg = WatchConfig(interval_s=10.0, timeout_s=2.0, state_dir=blocker,
                      params=DetectorParams(learn_min_drafts=100, learn_min_s=1))
    w = Watcher([Target("r0", page_server.url)], cfg, clock=clock, on_warning=warnings.append)
    s = run_steps(w, clock, 2)
    w.close()
    assert s[1].baseline is not None and s[1].baseline.source == "learned"
    # each state document of the replica says once that its file cannot be used, naming it
    where = f"{blocker}:_is_a_file_where_a_directory_should_be"
    assert sorted(w.split(" error=")[0].split(" path=")[0] for w in warnings) == [
        "rocmseat-watch replica=r0 baseline-not-saved",
        "rocmseat-watch replica=r0 baseline-refused",
        "rocmseat-watch replica=r0 spawn-history-refused"]
    assert all(f"error={where}" in w for w in warnings), warnings


class StuckReceiver:
    """An Alertmanager that accepts the connection and never answers until released."""

    def __init__(self):
        self.release = threading.Event()
        self.received = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.received.append(json.loads(body))
                outer.release.wait(30)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/api/v2/alerts"

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def test_stuck_webhook_receiver_does_not_delay_evaluation(page_server, tmp_path):
    receiver = StuckReceiver()
    clock, logged = FakeClock(), []
    sender = BackgroundSender("webhook", webhook_deliver(receiver.url, timeout_s=60.0),
                              on_error=logged.append)
    fanout = AlertFanout(logged.append, webhook=sender)
    page_server.play(Answer("not metrics"))  # down after 1: fires at once, then stays down
    w = make(page_server, tmp_path, clock, down_after=1)
    w._emit = fanout
    done = threading.Event()
    statuses = []

    def evaluate():
        for _ in range(20):
            statuses.append(w.step()[0])
            clock.tick(10.0)
        done.set()

    worker = threading.Thread(target=evaluate, daemon=True)
    try:
        worker.start()
        finished = done.wait(60)  # a bound for a broken build, not a speed assertion
        still_stuck = not receiver.release.is_set()
        assert finished and still_stuck
        assert len(statuses) == 20
        assert logged[0].startswith("rocmseat-watch replica=r0 alert=replica_down state=firing")
        for _ in range(200):  # the POST runs on the sender's thread: wait for it, bounded
            if receiver.received:
                break
            threading.Event().wait(0.05)
        assert receiver.received, logged
        assert receiver.received[0][0]["labels"]["alertname"] == "replica_down"
        sender.close(timeout_s=0.2)  # exit while the POST hangs: said, not hidden
        assert logged[-1] == "rocmseat-watch sink=webhook not-delivered-at-exit alerts=1"
    finally:
        receiver.close()
        sender.close()
        w.close()


def test_webhook_retries_with_backoff_and_sends_resolved(tmp_path):
    calls = []
    gate = threading.Event()

    def flaky(batch):
        gate.wait(30)  # the first attempt is in flight when the resolved state is submitted
        calls.append(batch)
        if len(calls) < 3:
            raise RuntimeError("connection refused")

    sender = BackgroundSender("webhook", flaky, on_error=lambda m: None, backoff_s=(0.01,))
    fanout = AlertFanout(lambda line: None, webhook=sender)
    book = A.AlertBook()
    fanout(book.set("r0", A.SPEC_DRAFTER_DEAD, True, 1_790_000_000.0, {"al": "1.02"}))
    fanout(book.set("r0", A.SPEC_DRAFTER_DEAD, False, 1_790_000_060.0))
    gate.set()
    done = threading.Event()
    for _ in range(500):
        if sender.delivered:
            break
        done.wait(0.01)
    sender.close()
    states = [a["endsAt"] if "endsAt" in a else None for batch in calls for a in batch]
    # the firing state was superseded while it was being retried: resolved is what gets through
    assert len(calls) == 3 and sender.delivered == 1
    assert states[-1] == A.iso(1_790_000_060.0)


def test_webhook_backoff_doubles_to_thirty_seconds_then_gives_up_with_one_line():
    waits, errors, attempts = [], [], []
    gave_up = threading.Event()

    def refused(batch):
        attempts.append(batch)
        raise RuntimeError("connection refused")

    def record(delay):  # the sender's sleep, injected: the schedule without waiting it out
        waits.append(delay)
        return False

    def on_error(line):
        errors.append(line)
        if "gave-up" in line:
            gave_up.set()

    sender = BackgroundSender("webhook", refused, on_error=on_error, wait=record)
    book = A.AlertBook()
    sender.submit("r0/replica_down",
                  book.set("r0", A.REPLICA_DOWN, True, 1_790_000_000.0).to_alertmanager())
    assert gave_up.wait(30)  # a bound for a broken build
    sender.close()
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    assert len(attempts) == 8 and sender.delivered == 0
    assert errors == ["rocmseat-watch sink=webhook delivery-failing error=connection_refused",
                      "rocmseat-watch sink=webhook gave-up attempts=8 alerts=1 "
                      "error=connection_refused"]
    assert sender.failures == 8 and sender.failing
