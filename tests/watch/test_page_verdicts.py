"""What two pages may and may not conclude: non-finite, negative, impossible or duplicate values
are errors, never a verdict; counters that go backwards are a restart; an engine restart
clears a dead drafter's verdicts and readiness.

Each test failed before its fix (issue 11 and the watch room's second review).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmseat.watch import alerts as A
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.metrics import PageError, read_page
from rocmseat.watch.readiness import replica_readiness
from rocmseat.watch.scrape import Target
from tests.watch.conftest import FakeClock, page
from tests.watch.hostile import (
    ACCEPTED_1,
    DRAFTS_1,
    GOOD_0,
    GOOD_1,
    once_at,
    serve,
    strict_json,
)


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "-7.0", "1e300"])
def test_non_finite_negative_or_huge_counter_is_could_not_check(rocmseat_cli, tmp_path, value):
    bad = GOOD_1.replace(ACCEPTED_1, ACCEPTED_1.rsplit(" ", 1)[0] + f" {value}")
    server = serve(GOOD_0, bad)
    try:
        result = once_at(rocmseat_cli, server.url, tmp_path, "--json", "--baseline-al", "2.9")
    finally:
        server.close()
    assert result.exit_code == 2, result.stdout[-600:]
    (replica,) = strict_json(result.stdout)["replicas"]
    assert replica["up"] is False and replica["window"] is None
    assert "vllm:spec_decode_num_accepted_tokens_total" in replica["error"]


def test_an_impossible_window_is_an_error_not_a_verdict(tmp_path):
    # Each page is valid on its own; together: 3000 tokens accepted in 1 draft of 3 tokens.
    later = (GOOD_0.replace('num_drafts_total{engine="0",model_name="tiny"} 10000.0',
                            'num_drafts_total{engine="0",model_name="tiny"} 10001.0')
             .replace('num_draft_tokens_total{engine="0",model_name="tiny"} 30000.0',
                      'num_draft_tokens_total{engine="0",model_name="tiny"} 30003.0')
             .replace('accepted_tokens_total{engine="0",model_name="tiny"} 19520.0',
                      'accepted_tokens_total{engine="0",model_name="tiny"} 22520.0')
             .replace('position="0"} 8000.0', 'position="0"} 9000.0')
             .replace('position="1"} 6400.0', 'position="1"} 7400.0')
             .replace('position="2"} 5120.0', 'position="2"} 6120.0'))
    pages = [GOOD_0, later]
    clock = FakeClock()
    w = Watcher([Target("r0", "http://r0/metrics")], WatchConfig(pinned_al=2.9,
                                                                   state_dir=tmp_path),
                fetch=lambda url, t: pages.pop(0), clock=clock)
    w.step()
    clock.tick(10)
    (status,) = w.step()
    w.close()
    assert status.up is False and status.window is None
    assert "impossible" in (status.error or "")


def test_conflicting_duplicate_series_is_an_error(tmp_path):
    twin = DRAFTS_1.replace("10600.0", "9000.0").replace('engine="0",model_name="tiny"',
                                                        'model_name="tiny",engine="0"')
    dup = GOOD_1.replace(DRAFTS_1 + "\n", DRAFTS_1 + "\n" + twin + "\n")
    pages = [GOOD_0, dup]
    clock = FakeClock()
    w = Watcher([Target("r0", "http://r0/metrics")], WatchConfig(state_dir=tmp_path),
                fetch=lambda url, t: pages.pop(0), clock=clock)
    w.step()
    clock.tick(10)
    (status,) = w.step()
    w.close()
    assert status.up is False and "duplicate series" in (status.error or "")


def test_counters_backwards_once_exits_2_and_says_why(rocmseat_cli, tmp_path):
    server = serve(GOOD_1, GOOD_0)  # every counter goes down
    try:
        result = once_at(rocmseat_cli, server.url, tmp_path)
    finally:
        server.close()
    assert result.exit_code == 2, result.stdout
    assert "r0: restarted between the two scrapes (no window to judge" in result.stdout


def _other_process(text):
    # the same counters from another process: its _created stamps differ by hours
    return text.replace("1.7959627105", "1.7959527105")


@pytest.mark.parametrize("pages", [
    [page("03-collapse.txt"), page("02-collapse.txt"), GOOD_1, GOOD_0, GOOD_0],
    [GOOD_0, _other_process(GOOD_1), GOOD_0, _other_process(GOOD_1), GOOD_0],
], ids=["backwards-every-scrape", "two-servers-behind-one-url"])
def test_counters_reset_every_scrape_raise_an_alert_in_the_loop(tmp_path, pages):
    pages = list(pages)
    clock = FakeClock()
    w = Watcher([Target("r0", "http://r0/metrics")], WatchConfig(state_dir=tmp_path),
                fetch=lambda url, t: pages.pop(0), clock=clock)
    statuses = []
    for _ in range(5):
        (status,) = w.step()
        statuses.append(status)
        clock.tick(10)
    w.close()
    assert [s.restarted for s in statuses][:4] == [False, True, True, True]
    assert ["metrics_unstable" in s.alerts for s in statuses][:4] == [False, False, False, True]


def _restarted(text: str) -> str:
    """The same page from a new engine process: its `_created` stamps moved by an hour."""
    return text.replace("1.795962710590016e+09", "1.795966310590016e+09")


def _ready_sequence(pages: list[str], tmp_path: Path):
    clock, transitions = FakeClock(), []
    queue = list(pages)
    w = Watcher([Target("r0", "http://r0/metrics")],
                WatchConfig(pinned_al=2.9, state_dir=tmp_path, stall_after_s=3600),
                fetch=lambda url, t: queue.pop(0), clock=clock,
                on_transition=transitions.append)
    out = []
    for _ in pages:
        (status,) = w.step()
        verdict = replica_readiness(status, evaluated_at_s=w.evaluated_at_s, now_s=clock.now,
                                    max_age_s=w.config.max_age_s)
        out.append((verdict.http_status, status.restarted))
        clock.tick(10)
    w.close()
    return out, transitions


def test_an_engine_restart_clears_a_dead_drafter_and_readiness(tmp_path):
    collapse = page("03-collapse.txt")
    # dead under traffic; 503 takes it out of rotation: the counters stay flat; the engine is
    # restarted (its cache fixed): new _created, counters from zero, still no traffic
    pages = [GOOD_1, page("02-collapse.txt"), collapse, collapse, collapse,
             page("04-restarted.txt"), page("04-restarted.txt"), page("05-after-restart.txt")]
    seen, transitions = _ready_sequence(pages, tmp_path)
    assert [code for code, _ in seen] == [200, 503, 503, 503, 503, 200, 200, 200], seen
    assert seen[5][1] is True  # the restart is what cleared it
    resolved = [t for t in transitions if t.alert == A.SPEC_DRAFTER_DEAD and t.state == "resolved"]
    assert [dict(t.details).get("reason") for t in resolved] == ["engine-restarted"]


def test_a_restart_into_a_still_dead_drafter_goes_503_again_on_its_drafts(tmp_path):
    pages = [GOOD_1, page("02-collapse.txt"), page("03-collapse.txt"),
             _restarted(page("02-collapse.txt")), _restarted(page("03-collapse.txt"))]
    seen, transitions = _ready_sequence(pages, tmp_path)
    assert [code for code, _ in seen] == [200, 503, 503, 200, 503], seen
    fired = [t for t in transitions if t.alert == A.SPEC_DRAFTER_DEAD and t.state == "firing"]
    assert len(fired) == 2


def test_a_series_repeated_with_an_empty_label_is_a_duplicate():
    line = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 10000.0\n'
    twin = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny",x=""} 10000.0\n'
    with pytest.raises(PageError, match="duplicate series"):
        read_page(GOOD_0.replace(line, line + twin))


