"""/ready/<replica> and /healthz on the exporter's listener, fed by a real Watcher's statuses."""

from __future__ import annotations

import httpx
import pytest

from rocmseat.watch import alerts as A
from rocmseat.watch.exporter import ExportState, render, start_exporter
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.readiness import replica_readiness, watcher_health
from rocmseat.watch.scrape import Target
from tests.watch.conftest import FakeClock, page


def evaluate(pages_by_replica, steps, tmp_path, **config):
    """Run a Watcher over canned pages; returns (watcher, statuses of the last step)."""
    clock = FakeClock()
    queues = {name: list(pages) for name, pages in pages_by_replica.items()}
    cfg = WatchConfig(state_dir=tmp_path, **config)
    w = Watcher([Target(n, f"http://{n}/metrics") for n in queues], cfg, clock=clock,
                fetch=lambda url, t: queues[url.split("/")[2]].pop(0))
    statuses = []
    for _ in range(steps):
        statuses = w.step()
        clock.tick(10)
    w.close()
    return w, clock, statuses


def state_of(w, clock, **over):
    fields = dict(statuses=tuple(w.statuses), evaluated_at_s=w.evaluated_at_s,
                  started_at_s=clock.now - 100, max_age_s=w.config.max_age_s,
                  evaluations=w.evaluations, last_duration_s=w.last_duration_s)
    fields.update(over)
    return ExportState(**fields)


def test_readiness_reasons_in_order(tmp_path):
    w, _clock, statuses = evaluate({
        "ok": [page("00-healthy.txt"), page("01-healthy.txt")],
        "dead": [page("01-healthy.txt"), page("02-collapse.txt")],
        "blind": [page("06-blind.txt"), page("06-blind.txt")],
        "down": ["<html></html>", "<html></html>"],
        "stall": [page("01-healthy.txt"), page("01-healthy.txt")],
    }, 2, tmp_path, pinned_al=2.9, down_after=2, stall_after_s=5)
    by = {s.replica: s for s in statuses}
    now = w.evaluated_at_s

    def verdict(name):
        return replica_readiness(by[name], evaluated_at_s=now, now_s=now, max_age_s=30)

    assert verdict("ok").ready and verdict("ok").reason == "ok: ready"
    assert verdict("dead").http_status == 503
    assert verdict("dead").reason.startswith("dead: spec_drafter_dead: the drafter's first")
    assert verdict("blind").reason.startswith("blind: spec_blind:")
    assert verdict("down").reason.startswith("down: replica_down:")
    assert verdict("stall").reason.startswith("stall: replica_stalled:")
    # a verdict too old is no verdict
    stale = replica_readiness(by["ok"], evaluated_at_s=now, now_s=now + 31, max_age_s=30)
    assert not stale.ready and "no fresh verdict" in stale.reason


def test_one_failed_scrape_is_not_ready_before_replica_down(tmp_path):
    w, _clock, statuses = evaluate({"r0": [page("00-healthy.txt"), "garbage\n"]}, 2, tmp_path)
    (s,) = statuses
    assert A.REPLICA_DOWN not in s.alerts  # down_after 3
    got = replica_readiness(s, evaluated_at_s=w.evaluated_at_s, now_s=w.evaluated_at_s,
                            max_age_s=30)
    assert got.http_status == 503 and "the last scrape failed" in got.reason


def test_watcher_health():
    ok = watcher_health(evaluated_at_s=100.0, started_at_s=0.0, now_s=105.0, max_age_s=30)
    assert ok.ready and ok.reason == "ok: last evaluation 5.0 s ago"
    starting = watcher_health(evaluated_at_s=None, started_at_s=100.0, now_s=101.0, max_age_s=30)
    assert starting.ready and starting.reason == "ok: starting"
    stale = watcher_health(evaluated_at_s=100.0, started_at_s=0.0, now_s=200.0, max_age_s=30)
    assert stale.http_status == 503 and stale.reason.startswith("stale: the last evaluation")


def test_listener_serves_ready_healthz_metrics_and_404(tmp_path):
    w, clock, _ = evaluate({"r0": [page("00-healthy.txt"), page("01-healthy.txt")],
                            "r1": [page("01-healthy.txt"), page("02-collapse.txt")]},
                           2, tmp_path, pinned_al=2.9)
    current = {"state": state_of(w, clock)}
    server, _ = start_exporter("127.0.0.1:0", lambda: current["state"], clock=clock)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with httpx.Client(timeout=5) as c:
            r0, r1 = c.get(f"{base}/ready/r0"), c.get(f"{base}/ready/r1")
            unknown = c.get(f"{base}/ready/nobody")
            health = c.get(f"{base}/healthz")
            head = c.head(f"{base}/ready/r1")
            metrics = c.get(f"{base}/metrics").text
            clock.tick(1000)  # the loop stopped evaluating: both go stale
            stale_ready, stale_health = c.get(f"{base}/ready/r0"), c.get(f"{base}/healthz")
    finally:
        server.shutdown()
        server.server_close()
    assert (r0.status_code, r0.text) == (200, "r0: ready\n")
    assert r1.status_code == 503 and r1.text.startswith("r1: spec_drafter_dead: ")
    assert r1.text.count("\n") == 1  # one line
    assert (unknown.status_code, unknown.text) == (404, "unknown replica 'nobody'\n")
    assert health.status_code == 200 and health.text.startswith("ok: last evaluation")
    assert head.status_code == 503 and head.text == ""
    assert 'rocmseat_replica_ready{replica="r0"} 1.0' in metrics
    assert 'rocmseat_replica_ready{replica="r1"} 0.0' in metrics
    assert stale_ready.status_code == 503 and "no fresh verdict" in stale_ready.text
    assert stale_health.status_code == 503


def test_ready_before_the_first_evaluation_is_503(tmp_path):
    server, _ = start_exporter("127.0.0.1:0", lambda: ExportState(started_at_s=0.0,
                                                                    max_age_s=30),
                               clock=lambda: 1.0)
    try:
        got = httpx.get(f"http://127.0.0.1:{server.server_address[1]}/ready/r0", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
    assert (got.status_code, got.text) == (503, "not evaluated yet\n")


def test_exporter_carries_target_labels_and_sink_failures(tmp_path):
    clock = FakeClock()
    pages = {"a": [page("00-healthy.txt"), page("01-healthy.txt")],
             "b": [page("00-healthy.txt"), page("01-healthy.txt")]}
    targets = [Target("a", "http://a/metrics", labels=(("instance", "10.0.0.1:8000"),
                                                       ("zone", "z1"))),
               Target("b", "http://b/metrics", labels=(("rack", "7"),))]
    w = Watcher(targets, WatchConfig(state_dir=tmp_path, pinned_al=2.9), clock=clock,
                fetch=lambda url, t: pages[url.split("/")[2]].pop(0))
    w.step()
    clock.tick(10)
    w.step()
    w.close()
    text = render(lambda: state_of(w, clock, sink_failures=(("command-hook", 0, False),
                                                             ("webhook", 3, True))))
    assert ('rocmseat_replica_up{instance="10.0.0.1:8000",rack="",replica="a",zone="z1"} 1.0'
            in text)
    assert 'rocmseat_replica_up{instance="",rack="7",replica="b",zone=""} 1.0' in text
    assert ('rocmseat_alert_active{alert="replica_down",instance="",rack="7",replica="b",'
            'zone=""} 0.0') in text
    assert "rocmseat_webhook_failures_total 3.0" in text
    assert "rocmseat_webhook_failing 1.0" in text
    assert "rocmseat_command_hook_failures_total 0.0" in text
    assert "rocmseat_watch_evaluations_total 2.0" in text


@pytest.mark.tools
def test_promtool_accepts_the_labelled_exporter_page(tmp_path):
    import shutil
    import subprocess

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package 'prometheus')")
    w, clock, _ = evaluate({"r0": [page("00-healthy.txt"), page("01-healthy.txt")]}, 2, tmp_path)
    text = render(lambda: state_of(w, clock, sink_failures=(("webhook", 1, True),)))
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
