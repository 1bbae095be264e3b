"""Issue 26, item 4: progress is any engine progress. A 262,144-token prompt is prefilled in
chunks for minutes with no token generated; vLLM counts its prompt tokens only at its first
token, but the KV-cache usage climbs every step (tests/fixtures/metrics/seq/07..10, rendered
with vLLM's own metric code). Before, `replica_stalled` counted generated tokens only and fired
on the prefill (a 503, and with remediation a restart that killed the request)."""

from __future__ import annotations

from rocmseat.watch import alerts as A
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.scrape import Target
from tests.watch.conftest import FakeClock, page


def stalled(names, tmp_path, stall_after_s=15.0):
    clock = FakeClock()
    queue = [page(n) for n in names]
    w = Watcher([Target("r0", "http://r0/metrics")],
                WatchConfig(state_dir=tmp_path, stall_after_s=stall_after_s), clock=clock,
                fetch=lambda url, t: queue.pop(0))
    out = []
    for _ in names:
        (status,) = w.step()
        out.append(A.REPLICA_STALLED in status.alerts)
        clock.tick(10)
    w.close()
    return out


def test_a_prefill_only_window_is_not_a_stall(tmp_path):
    # KV usage 0.10 -> 0.35 -> 0.60 over 20 s, one request running, nothing generated
    names = ["07-prefill.txt", "08-prefill.txt", "09-prefill.txt", "10-prefill-done.txt"]
    assert stalled(names, tmp_path, stall_after_s=5.0) == [False] * 4


def test_nothing_moving_is_still_a_stall(tmp_path):
    # the prefill's KV usage stops climbing: the engine is hung, whatever it was doing
    names = ["08-prefill.txt", "09-prefill.txt"] + ["09-prefill.txt"] * 4
    assert stalled(names, tmp_path) == [False, False, False, True, True, True]


def test_window_progress_reads_every_series(tmp_path):
    from rocmseat.watch.metrics import read_page
    from rocmseat.watch.window import Snapshot, window_between

    def snap(name, t):
        return Snapshot(t, read_page(page(name)))

    prefill = window_between(snap("08-prefill.txt", 0.0), snap("09-prefill.txt", 10.0))
    assert prefill is not None
    assert (prefill.generation_tokens, prefill.prompt_tokens, prefill.iterations) == (0, 0, 0)
    assert prefill.kv_usage_moved is not None and abs(prefill.kv_usage_moved - 0.25) < 1e-9
    assert prefill.progressed is True
    flat = window_between(snap("09-prefill.txt", 0.0), snap("09-prefill.txt", 10.0))
    assert flat is not None and flat.progressed is False
