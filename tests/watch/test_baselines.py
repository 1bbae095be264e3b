"""Whose baseline a file holds: seat and replica, or a target's name and URL digest.

Each test failed before its fix (issue 11 and the watch room's second review).
"""

from __future__ import annotations

from pathlib import Path

from rocmseat.watch.baseline import baseline_path
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.scrape import Target
from tests.watch.hostile import (
    GOOD_0,
)


def test_baseline_files_never_collide():
    state = Path("/state")
    assert baseline_path(state, "a:b") != baseline_path(state, "a_b")
    assert baseline_path(state, "a/b").parent == state / "watch"
    assert baseline_path(state, "demo.r0") == state / "watch" / "demo.r0.json"  # seat mode


def test_target_baselines_are_keyed_by_name_and_url(tmp_path, page_server):
    from rocmseat.watch.baseline import learned_baseline, save_baseline

    def learned_for(url: str) -> bool:
        w = Watcher([Target("r0", url)], WatchConfig(state_dir=tmp_path),
                    fetch=lambda u, t: GOOD_0)
        w.step()
        w.close()
        return w.statuses[0].baseline is not None

    first = Watcher([Target("r0", "http://a:1/metrics")], WatchConfig(state_dir=tmp_path),
                    fetch=lambda u, t: GOOD_0)
    first.step()
    key = first._baseline_key(first._replicas[0])  # whose baseline it would save
    first.close()
    save_baseline(tmp_path, key, learned_baseline(drafts=1e4, per_pos=(8e3, 6.4e3, 5.12e3),
                                         accepted=19520.0, windows=9, key="unkeyed",
                                         now_s=1_790_000_000.0))
    assert learned_for("http://a:1/metrics")
    assert not learned_for("http://b:1/metrics")  # another replica under the same name


