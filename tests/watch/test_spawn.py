"""The slow-spawn lottery (rocmseat/watch/spawn.py, issue 27 item 6): the decode rate at matched
load learned across starts per config key, a start >= 1.2x slower than that history raises
`replica_slow_spawn` naming the factor; a normal restart does not; a collapsed drafter is not a
slow spawn; a slow start never joins the history; the history survives the watchdog. The real
engine's version: tests/e2e/test_spawn_engine.py."""

from __future__ import annotations

import json

import pytest

from rocmseat.watch.spawn import SpawnParams, SpawnWatch, window_rate
from rocmseat.watch.window import Window


def window(steps_per_s_per_req=20.0, running=4.0, al=2.0, duration_s=10.0, drafts=True):
    steps = steps_per_s_per_req * running * duration_s
    gen = steps * al
    n = steps if drafts else 0.0
    accepted = (al - 1.0) * n
    return Window(duration_s, n, 3 * n, accepted, (accepted,), gen, 0.0, 0.0, None, None,
                  running, 0.0, 0.1, True)


def test_the_rate_takes_speculation_out():
    # the same steps per second at AL 2 and AL 3: one rate (tokens differ, steps do not)
    assert window_rate(window(al=2.0)) == (4, pytest.approx(20.0))
    assert window_rate(window(al=3.0)) == (4, pytest.approx(20.0))
    assert window_rate(window(running=0.0)) is None
    assert window_rate(window(drafts=False, al=1.0)) == (4, pytest.approx(20.0))


def start(watch, rate, key="k1", n=SpawnParams().judge_windows, ok=True, running=4.0):
    verdict = None
    for _ in range(n):
        verdict = watch.observe("r0", key, window(rate, running=running), ok)
    return verdict


def test_a_slow_start_against_its_history(tmp_path):
    watch = SpawnWatch(state_dir=tmp_path, prefix="demo")
    for rate in (20.0, 21.0, 19.5):  # three normal starts
        assert not start(watch, rate).slow
        watch.restarted("r0")
    normal = start(watch, 19.8)
    assert not normal.slow and normal.factor == pytest.approx(20.0 / 19.8)
    watch.restarted("r0")
    slow = start(watch, 12.5)  # the lottery: 1.6x slower from its first windows
    # the history's median (19.9) over this start's: the factor the alert names
    assert slow.slow and slow.factor == pytest.approx(19.9 / 12.5)
    assert slow.details() == {"factor": "1.59", "running": "4", "starts": "4"}
    watch.restarted("r0")  # a restart judges afresh
    assert not start(watch, 20.2).slow
    saved = json.loads((tmp_path / "watch" / "spawn-demo.r0.json").read_text())
    # the slow start is not in it: the history is what a good start does
    assert sorted(saved["keys"]["k1"]["4"]) == pytest.approx([19.5, 19.8, 20.0, 21.0])
    # the history survives the watchdog
    again = SpawnWatch(state_dir=tmp_path, prefix="demo")
    assert start(again, 12.0).slow


def test_matched_load_and_config_key():
    watch = SpawnWatch(SpawnParams(min_starts=2))
    for _ in range(2):
        start(watch, 20.0, running=4.0)
        watch.restarted("r0")
    # the same start at another load has no history there: not judged
    assert not start(watch, 10.0, running=1.0).slow
    watch.restarted("r0")
    # another config key has its own history
    assert not start(watch, 10.0, key="k2").slow


def test_a_collapsed_drafter_is_not_a_slow_spawn():
    watch = SpawnWatch()
    for _ in range(2):
        start(watch, 20.0)
        watch.restarted("r0")
    assert not start(watch, 10.0, ok=False).slow


def test_the_watcher_holds_the_history_of_its_seat(tmp_path):
    """The loop keeps one SpawnWatch with the seat's state dir and prefix; the alert is known
    to the alert book's tables."""
    from rocmseat.watch import alerts as A
    from rocmseat.watch.loop import WatchConfig, Watcher

    watcher = Watcher([], WatchConfig(state_dir=tmp_path, key_prefix="demo"))
    for _ in range(2):
        start(watcher.spawn, 20.0, key="unkeyed")
        watcher.spawn.restarted("r0")
    verdict = start(watcher.spawn, 14.0, key="unkeyed")
    assert verdict.slow and verdict.factor == pytest.approx(20.0 / 14.0)
    assert A.REPLICA_SLOW_SPAWN in A.ALERTS and A.SEVERITY[A.REPLICA_SLOW_SPAWN] == "warning"


def test_one_earlier_start_is_history_and_a_loser_never_joins_it():
    lines: list[str] = []
    watch = SpawnWatch(log=lines.append)
    first = start(watch, 20.0)  # no history: figured, not judged
    assert not first.slow and first.factor is None
    assert lines == ["rocmseat-watch replica=r0 spawn-figure running=4 rate=20.000 history=- "
                     "starts=0 factor=-"]
    watch.restarted("r0")
    slow = start(watch, 10.0)  # judged against one earlier start
    assert slow.slow and slow.factor == pytest.approx(2.0) and slow.starts == 1
    assert lines[-1].endswith("rate=10.000 history=20.000 starts=1 factor=2.00")
    watch.restarted("r0")
    # two losers in a row: had the first joined, the history's median (15) would let it pass
    again = start(watch, 12.0)
    assert again.slow and again.factor == pytest.approx(20.0 / 12.0) and again.starts == 1
    watch.restarted("r0")
    normal = start(watch, 19.0)  # a normal restart: its factor is logged, no alert
    assert not normal.slow and normal.factor == pytest.approx(20.0 / 19.0)
    assert lines[-1].endswith("rate=19.000 history=20.000 starts=1 factor=1.05")
    watch.restarted("r0")
    assert start(watch, 20.0).starts == 2  # the normal one joined


def test_a_start_figured_once_per_bucket():
    lines: list[str] = []
    watch = SpawnWatch(log=lines.append)
    start(watch, 20.0, n=10)
    start(watch, 20.0, n=10, running=2.0)
    assert [line.split()[3] for line in lines] == ["running=4", "running=2"]
