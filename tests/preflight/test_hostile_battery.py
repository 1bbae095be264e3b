"""Issue 11's hostile sysfs battery as a seeded, bounded regression (tests/preflight/hostile.py).

The unit tier runs 60 rounds, 200 under ROCMSEAT_FULL_BATTERIES=1 (ROCMSEAT_HOSTILE_ROUNDS / _SEED
change that; the long version is
`python3 bench/bench_preflight.py --hostile 5000`). The rounds run in a child process with a
deadline, so a round that hangs (a FIFO read blocking) fails the test and names the round
instead of hanging the suite; a few more rounds run `rocmseat` as its own process each.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, battery_rounds
from tests.preflight import hostile

ROUNDS = battery_rounds(60, 200, "ROCMSEAT_HOSTILE_ROUNDS")
SEED = int(os.environ.get("ROCMSEAT_HOSTILE_SEED", "11"))


def test_hostile_battery_in_process(tmp_path):
    progress = tmp_path / "progress.json"
    argv = [sys.executable, "-m", "tests.preflight.hostile", "--rounds", str(ROUNDS),
            "--seed", str(SEED), "--progress", str(progress), "--workdir", str(tmp_path / "w")]
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, cwd=str(REPO), timeout=120 + ROUNDS
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the battery hung in round {progress.read_text()}")
    assert proc.returncode in (0, 1), proc.stderr
    summary = json.loads(proc.stdout)
    print(json.dumps({k: v for k, v in summary.items() if k != "violations"}))
    assert summary["rounds"] == ROUNDS
    assert summary["violations"] == []
    assert summary["exit_3"] == 0 and summary["healthy_on_unreadable"] == 0
    # the battery is not vacuous: most rounds hit a file the verdict needs, every exit code shows
    assert summary["rounds_with_needed_file_damaged"] > ROUNDS // 2
    assert set(summary["exit_codes"]) == {"0", "1", "2"}


@pytest.mark.parametrize("round_seed", [1, 2, 3, 4])
def test_hostile_rounds_as_separate_processes(tmp_path, round_seed):
    rng = random.Random(round_seed)
    name = rng.choice(hostile.TREES)
    tree = tmp_path / name
    shutil.copytree(hostile.FIXTURES / name, tree, symlinks=True)
    needed = sorted(hostile.needed_files(tree))
    # one damaging mutation of a needed file, of the kinds that hung or vanished before
    relpath = rng.choice(needed)
    how = ["fifo", "dangling", "directory", "garbage"][round_seed - 1]
    hostile.mutate(tree / relpath, how, rng)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCMSEAT_")}
    env["ROCMSEAT_ERROR_LOG"] = str(tmp_path / "crash.log")
    proc = subprocess.run(
        [sys.executable, "-m", "rocmseat", "preflight", "--sysfs-root", str(tree),
         "--state-dir", str(tmp_path / "state"), "--json"],
        capture_output=True, text=True, timeout=60, env=env, cwd=str(REPO),
    )
    outcome = hostile.Outcome(0, name, [(how, relpath)], proc.returncode, 0.0, [relpath])
    hostile.judge(outcome, proc.stdout, proc.stderr, {g for g in _cards(name)})
    assert outcome.violations == [], (how, relpath, proc.stderr)
    assert proc.returncode in (1, 2)


def _cards(name):
    from rocmseat.node.inventory import read_inventory

    return {g.card for g in read_inventory(hostile.FIXTURES / name).gpus}


def test_needed_files_are_the_verdicts_inputs():
    needed = hostile.needed_files(hostile.FIXTURES / "x99-r9700")
    gpu = "devices/pci0000:80/0000:80:03.0/0000:87:00.0/0000:88:00.0/0000:89:00.0"
    assert f"{gpu}/vendor" in needed and f"{gpu}/pp_dpm_pcie" in needed
    # the firmware states this GPU's link (pp_dpm_pcie stars level 0): a damaged link file is
    # judged from it, so the link files are not what the verdict needs
    assert "devices/pci0000:80/0000:80:03.0/current_link_speed" not in needed
    degraded = hostile.needed_files(hostile.FIXTURES / "x99-r9700-degraded")
    # GPU3 of the degraded tree stars no row: its walked link (the root port's) decides
    assert "devices/pci0000:80/0000:80:03.0/current_link_speed" in degraded
    assert "devices/pci0000:80/0000:80:03.0/numa_node" not in needed  # not judged on a hop
    assert "class/drm/card4" in needed
    assert "devices/system/cpu/cpu55/topology/physical_package_id" in needed
