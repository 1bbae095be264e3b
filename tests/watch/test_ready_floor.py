"""Issue 26, item 3: `/ready` never takes the last of a seat out for a speculation verdict.

Two replicas on collapsed pages (the recorded vLLM /metrics sequence of tests/fixtures: a
healthy page, then the drafter's acceptance collapsed) share the fault, as a drafter checkpoint
or a stale cache rolled out to every replica would: before, both answered 503 and the seat was
out of every load balancer. Now one stays in rotation (the seat's floor, Envoy's panic
threshold's rule), both alerts fire, and a replica down, stalled or out of rotation is 503
whatever the floor.
"""

from __future__ import annotations

import httpx

from rocmseat.watch import alerts as A
from rocmseat.watch.exporter import start_exporter
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.readiness import seat_readiness
from rocmseat.watch.scrape import Target
from tests.watch.conftest import FakeClock, page
from tests.watch.test_ready import state_of

COLLAPSED = [page("01-healthy.txt"), page("02-collapse.txt")]


def watch(pages_by_replica, tmp_path, labels=None, **config):
    """Two evaluations of a real Watcher over the pages; the alert transitions it fired."""
    clock = FakeClock()
    queues = {name: list(pages) for name, pages in pages_by_replica.items()}
    fired = []
    targets = [Target(n, f"http://{n}/metrics", labels=(labels or {}).get(n, ()))
               for n in queues]
    w = Watcher(targets, WatchConfig(state_dir=tmp_path, pinned_al=2.9, **config), clock=clock,
                fetch=lambda url, t: queues[url.split("/")[2]].pop(0),
                on_transition=fired.append)
    for _ in range(2):
        w.step()
        clock.tick(10)
    w.close()
    clock.tick(-10)
    return w, clock, [(t.replica, t.alert, t.state) for t in fired]


def serve(w, clock, **over):
    """GET /ready/<each> and /metrics from the real listener."""
    state = state_of(w, clock, **over)
    server, _ = start_exporter("127.0.0.1:0", lambda: state, clock=clock)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with httpx.Client(timeout=5) as c:
            ready = {s.replica: c.get(f"{base}/ready/{s.replica}") for s in state.statuses}
            metrics = c.get(f"{base}/metrics").text
    finally:
        server.shutdown()
        server.server_close()
    return {n: (r.status_code, r.text) for n, r in ready.items()}, metrics


def test_two_collapsed_replicas_one_stays_ready_and_both_alerts_fire(tmp_path):
    w, clock, fired = watch({"r0": COLLAPSED, "r1": COLLAPSED}, tmp_path)
    assert {(r, a) for r, a, s in fired if s == A.FIRING} >= {("r0", A.SPEC_DRAFTER_DEAD),
                                                               ("r1", A.SPEC_DRAFTER_DEAD)}
    ready, metrics = serve(w, clock)
    assert ready["r0"][0] == 200, ready
    assert ready["r0"][1].startswith(
        "r0: ready, kept in rotation by the seat's floor (0 of 2 ready without it, min_ready "
        "1); alert spec_drafter_dead: the drafter's first token")
    assert ready["r1"][0] == 503 and ready["r1"][1].startswith("r1: spec_drafter_dead: ")
    for name in ("r0", "r1"):
        assert f'rocmseat_alert_active{{alert="spec_drafter_dead",replica="{name}"}} 1.0' in (
            metrics)
    assert 'rocmseat_replica_ready{replica="r0"} 1.0' in metrics
    assert 'rocmseat_replica_ready{replica="r1"} 0.0' in metrics


def test_min_ready_keeps_as_many_as_it_names(tmp_path):
    w, clock, _ = watch({"r0": COLLAPSED, "r1": COLLAPSED, "r2": COLLAPSED}, tmp_path)
    ready, _ = serve(w, clock, min_ready=2)
    assert [ready[n][0] for n in ("r0", "r1", "r2")] == [200, 200, 503]


def test_one_down_and_one_collapsed(tmp_path):
    w, clock, fired = watch({"down": ["<html></html>", "<html></html>"], "spec": COLLAPSED},
                            tmp_path, down_after=2)
    assert ("down", A.REPLICA_DOWN, A.FIRING) in fired
    assert ("spec", A.SPEC_DRAFTER_DEAD, A.FIRING) in fired
    ready, _ = serve(w, clock)
    assert ready["down"][0] == 503 and ready["down"][1].startswith("down: replica_down: ")
    assert ready["spec"][0] == 200 and "kept in rotation by the seat's floor" in ready["spec"][1]


def test_a_stalled_replica_is_never_kept_by_the_floor(tmp_path):
    stalled = [page("01-healthy.txt"), page("01-healthy.txt")]
    w, clock, _ = watch({"stall": stalled}, tmp_path, stall_after_s=5)
    ready, _ = serve(w, clock)
    assert ready["stall"][0] == 503 and ready["stall"][1].startswith("stall: replica_stalled")


def test_the_floor_is_per_seat_label_and_spares_nothing_without_a_fresh_verdict(tmp_path):
    labels = {"a0": (("seat", "a"),), "a1": (("seat", "a"),), "b0": (("seat", "b"),)}
    w, _clock, _ = watch({"a0": [page("00-healthy.txt"), page("01-healthy.txt")],
                         "a1": COLLAPSED, "b0": COLLAPSED}, tmp_path, labels=labels)
    now = w.evaluated_at_s
    got = seat_readiness(w.statuses, evaluated_at_s=now, now_s=now, max_age_s=30)
    # seat a has a0 ready: a1 is out; seat b would be empty: b0 stays
    assert {n: v.ready for n, v in got.items()} == {"a0": True, "a1": False, "b0": True}
    stale = seat_readiness(w.statuses, evaluated_at_s=now, now_s=now + 31, max_age_s=30)
    assert not any(v.ready for v in stale.values())


def test_min_ready_0_is_no_floor(tmp_path):
    # issue 35: a sidecar's watcher sees one replica; 0 takes it out for a dead drafter
    w, clock, fired = watch({"r0": COLLAPSED}, tmp_path)
    assert ("r0", A.SPEC_DRAFTER_DEAD, A.FIRING) in fired
    ready, metrics = serve(w, clock, min_ready=0)
    assert ready["r0"][0] == 503 and ready["r0"][1].startswith("r0: spec_drafter_dead: ")
    assert 'rocmseat_alert_active{alert="spec_drafter_dead",replica="r0"} 1.0' in metrics


def test_seat_min_ready_takes_0_and_refuses_negative(tmp_path):
    from rocmseat.errors import ConfigError
    from rocmseat.seat.load import load_seat
    from tests.conftest import REPO

    text = (REPO / "launchers" / "demo-cpu.toml").read_text()
    for value, ok in (("0", True), ("-1", False), ("4097", False)):
        path = tmp_path / f"seat{value}.toml"
        path.write_text(text.replace("[watch]\n", f"[watch]\nmin_ready = {value}\n", 1))
        if ok:
            assert load_seat(path).watch.min_ready == 0
        else:
            try:
                load_seat(path)
            except ConfigError as exc:
                assert "min_ready" in exc.message
            else:
                raise AssertionError(f"min_ready = {value} was taken")
