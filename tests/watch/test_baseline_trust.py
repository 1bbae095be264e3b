"""Issue 18, item 2: a watchdog baseline decides the acceptance-drop alarm, so one that anyone
but root or the reader could have written, or one reached through a link, is refused (and
re-learned), like sshd's StrictModes."""

from __future__ import annotations

import os

import pytest

from rocmseat.watch.baseline import Baseline, baseline_path, load_baseline, save_baseline

NOBODY = 65534
# what a learned baseline of a drafter that stopped matching would look like: a forged one at
# acceptance length 1.05 would keep a collapse from ever alarming
FORGED = Baseline(key="k", source="learned", acceptance_length=1.05, position_rates=(0.05,),
                  drafts=5000.0, windows=30, learned_at_s=1_764_000_000.0)


def _saved(tmp_path):
    save_baseline(tmp_path / "state", "seat/r0", FORGED)
    return baseline_path(tmp_path / "state", "seat/r0")


def test_the_baseline_watch_writes_is_read_back(tmp_path):
    _saved(tmp_path)
    assert load_baseline(tmp_path / "state", "seat/r0") == (FORGED, None)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to nobody needs root")
@pytest.mark.parametrize("how", ["nobody", "0666", "dir-0777", "symlink"])
def test_an_untrusted_baseline_is_refused(tmp_path, how):
    path = _saved(tmp_path)
    if how == "nobody":
        os.chown(path, NOBODY, NOBODY)
    elif how == "0666":
        path.chmod(0o666)
    elif how == "dir-0777":
        path.parent.chmod(0o777)
    else:
        elsewhere = tmp_path / "forged.json"
        path.rename(elsewhere)
        path.symlink_to(elsewhere)
    stored, problem = load_baseline(tmp_path / "state", "seat/r0")
    assert stored is None
    assert problem is not None and problem.startswith(str(tmp_path / "state")), problem
