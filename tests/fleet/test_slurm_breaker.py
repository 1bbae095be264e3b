"""Issue 26, items 1 and 2, against a real slurmctld started by the test (tier `fleet`): the
drain circuit breaker holds when every node checks at the same instant, and an administrator's
drain made between the check's two reads is never taken over.

slurm.conf defines 20 nodes (this host's, with its slurmd, and 19 no slurmd serves: a drain
needs none). 20 `slurm health` runs, one per node (tests/fleet/health_worker.py), start at the
same instant, every verdict failing (the degraded fixture), `--max-drained 2`. Before: every run
counted "0 drained" and drained (17 of 20 with the node list answering in 0.2 s). Now each run
drains, waits for its drain's second to pass, re-lists and hands its drain back unless it is
among the first two slurmctld stamped: 2 stay drained, in every round.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.fleet.slurm_cluster import OTHER_PREFIX, running_cluster

# the harness's cluster directory (skips when Slurm or munge is missing)
from tests.fleet.test_slurm_real import DEGRADED, cluster_root  # noqa: F401

pytestmark = pytest.mark.fleet

NODES = 20
LIMIT = 2
ROUNDS = 10
ADMIN_REASON = "RMA ticket 42 do not resume"

# scontrol on PATH: sleeps before answering a `show` when the delay file says so; once, when
# the admin file exists, an administrator drains that node before the node list is answered
# (between the check's first read, `show node NAME`, and its second, the list)
WRAPPER = """#!/bin/sh
case "$*" in
  *show*) sleep "$(cat {delay})" ;;
esac
if [ "$*" = "-o show node" ] && [ -f {admin} ]; then
  node=$(cat {admin}); rm -f {admin}
  {real} update NodeName="$node" State=DRAIN Reason="{reason}" >/dev/null
fi
exec {real} "$@"
"""


def _state_reason(line: str) -> tuple[str, str | None]:
    state = re.search(r"\bState=(\S+)", line)
    reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?$", line)
    return (state.group(1) if state else "?", reason.group(1) if reason else None)


def _drained(cluster) -> dict[str, str | None]:
    out = {}
    for line in cluster.scontrol("-o", "show", "node").strip().splitlines():
        state, reason = _state_reason(line)
        if "DRAIN" in state.split("+"):
            out[re.search(r"NodeName=(\S+)", line).group(1)] = reason
    return out


class Workers:
    """One health-check process per node, started once (tests/fleet/health_worker.py)."""

    def __init__(self, names: list[str], args: list[str], env: dict[str, str]) -> None:
        self.procs = {
            name: subprocess.Popen(
                [sys.executable, "-m", "tests.fleet.health_worker", "slurm", "health",
                 "--node", name, *args],
                cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for name in names
        }
        for proc in self.procs.values():
            assert json.loads(proc.stdout.readline()) == {"ready": True}

    def round(self, lead_s: float = 0.25) -> dict[str, dict]:
        at = time.time() + lead_s
        for proc in self.procs.values():
            proc.stdin.write(f"{at}\n")
            proc.stdin.flush()
        return {name: json.loads(proc.stdout.readline()) for name, proc in self.procs.items()}

    def close(self) -> None:
        for proc in self.procs.values():
            proc.stdin.close()
        for proc in self.procs.values():
            proc.wait(timeout=30)


@pytest.fixture
def fleet(cluster_root, rocmseat_cli, tmp_path, request):  # noqa: F811
    """A 20-node slurmctld, a failing cached verdict, scontrol behind the wrapper."""
    real = shutil.which("scontrol")
    assert real is not None
    bindir = tmp_path / "bin"
    bindir.mkdir()
    delay, admin = tmp_path / "delay", tmp_path / "admin"
    delay.write_text("0\n")
    wrapper = bindir / "scontrol"
    wrapper.write_text(WRAPPER.format(delay=delay, admin=admin, real=real, reason=ADMIN_REASON))
    wrapper.chmod(0o755)
    state_dir = tmp_path / "state"
    assert rocmseat_cli("preflight", "--sysfs-root", str(DEGRADED), "--state-dir",
                        str(state_dir)).exit_code == 1
    with running_cluster(cluster_root / f"b20-{request.node.name[5:13]}",
                         others=NODES - 1) as cluster:
        others = f"{OTHER_PREFIX}[01-{NODES - 1:02d}]"
        # nodes no slurmd serves are UNKNOWN, which Slurm 22.05 cannot RESUME from a drain
        # (update_node: "Invalid node state specified 0"); DOWN then RESUME makes them IDLE
        cluster.scontrol("update", f"NodeName={others}", "State=DOWN", "Reason=test setup")
        cluster.scontrol("update", f"NodeName={others}", "State=RESUME")
        names = [cluster.node] + [f"{OTHER_PREFIX}{i:02d}" for i in range(1, NODES)]
        env = {**cluster.env, "PATH": f"{bindir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
        env.pop("SLURMD_NODENAME", None)
        yield cluster, names, env, state_dir, delay, admin


def _rounds(cluster, workers: Workers, rounds: int) -> list[int]:
    counts = []
    for _ in range(rounds):
        results = workers.round()
        assert all(r["code"] == 1 for r in results.values()), results
        drained = _drained(cluster)
        assert all(r.startswith("rocmseat: ") for r in drained.values()), drained
        counts.append(len(drained))
        handed = [n for n, r in results.items() if "handed back the drain" in r["out"]]
        held = [n for n, r in results.items() if "not draining" in r["out"]]
        # every run said what it did: drained and kept, handed back, or held before draining
        assert len(drained) + len(handed) + len(held) == NODES, results
        for name in drained:
            cluster.scontrol("update", f"NodeName={name}", "State=RESUME")
    return counts


def test_twenty_simultaneous_checks_drain_at_most_the_limit(fleet):
    cluster, names, env, state_dir, delay, _admin = fleet
    workers = Workers(names, ["--sysfs-root", str(DEGRADED), "--state-dir", str(state_dir),
                              "--max-drained", str(LIMIT)], env)
    try:
        instant = _rounds(cluster, workers, ROUNDS)
        delay.write_text("0.2\n")  # the node list (every `show`) answers after 0.2 s
        slow = _rounds(cluster, workers, ROUNDS)
    finally:
        workers.close()
    print(f"\ndrained of {NODES} (limit {LIMIT}), {ROUNDS} rounds each: instant {instant}, "
          f"list after 0.2 s {slow}")
    assert instant == [LIMIT] * ROUNDS
    assert slow == [LIMIT] * ROUNDS


def test_an_admins_drain_between_the_two_reads_is_kept(fleet):
    cluster, names, env, state_dir, _delay, admin = fleet
    node = names[3]
    admin.write_text(node)  # the wrapper drains it after the first read, before the list
    proc = subprocess.run(
        [sys.executable, "-m", "rocmseat", "slurm", "health", "--node", node, "--sysfs-root",
         str(DEGRADED), "--state-dir", str(state_dir)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert not admin.exists(), "the wrapper never saw the list read"
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert re.search(rf"; left alone: State=IDLE\+DRAIN(\+NOT_RESPONDING)? Reason="
                     rf"{ADMIN_REASON} was not set by rocmseat\n$", proc.stdout), proc.stdout
    assert _drained(cluster) == {node: ADMIN_REASON}
