"""Issue 26, items 1 and 2, against a real slurmctld started by the test (tier `fleet`): the
drain circuit breaker holds when every node checks at the same instant, and an administrator's
drain made between the check's two reads is never taken over.

slurm.conf defines 20 nodes (this host's, with its slurmd, and 19 no slurmd serves: a drain
needs none). 20 `slurm health` runs, one per node, start at the
same instant (each a process of its own, forked at the instant), every verdict failing (the
degraded fixture), `--max-drained 2`. Before: every run
counted "0 drained" and drained (17 of 20 with the node list answering in 0.2 s). Now each run
drains, waits for its drain's second to pass, re-lists and hands its drain back unless it is
among the first two slurmctld stamped: 2 stay drained, in every round.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

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


class Checks:
    """One `rocmseat slurm health` process per node and round, all started at one instant.

    Each run is a child forked from this process (which has rocmseat imported already, so
    twenty interpreter start-ups on a two-core runner do not spread "the same instant" over
    seconds): it waits for the instant, runs the real command (rocmseat.cli.main, its error
    boundary included, with its own scontrol calls) in a fresh process, writes its exit code
    and output to a file and exits."""

    def __init__(self, names: list[str], args: list[str], env: dict[str, str],
                 out: Path) -> None:
        import rocmseat.cli.slurm
        import rocmseat.fleet.slurm
        import rocmseat.preflight.verdict_doc
        from rocmseat.cli.main import main

        self.main, self.names, self.args, self.env, self.out = main, names, args, env, out
        # the verdict reader's schema is built on first use: build it before the forks
        rocmseat.preflight.verdict_doc.load_verdict(
            Path(args[args.index("--state-dir") + 1]), Path(args[args.index("--sysfs-root") + 1]),
            max_age_s=rocmseat.fleet.slurm.DEFAULT_MAX_AGE_S, now_unix_s=time.time())
        out.mkdir(exist_ok=True)

    def round(self, lead_s: float = 0.15) -> dict[str, dict]:
        at = time.time() + lead_s
        pids = {name: self._fork(name, at) for name in self.names}
        for pid in pids.values():
            os.waitpid(pid, 0)
        return {name: json.loads((self.out / name).read_text()) for name in self.names}

    def _fork(self, name: str, at: float) -> int:
        pid = os.fork()
        if pid:
            return pid
        try:  # the child: never back into pytest
            os.environ.clear()
            os.environ.update(self.env)
            time.sleep(max(0.0, at - time.time()))
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = self.main(["slurm", "health", "--node", name, *self.args])
            (self.out / name).write_text(json.dumps({
                "code": code, "out": out.getvalue(), "err": err.getvalue(),
                "late_s": round(time.time() - at, 3)}))
        finally:
            os._exit(0)


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


def _rounds(cluster, workers: Checks, rounds: int) -> list[int]:
    counts = []
    for _ in range(rounds):
        results = workers.round()
        slowest = max(r["late_s"] for r in results.values())
        print(f"round: the last check ended {slowest:.2f} s after the instant")
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
    checks = Checks(names, ["--sysfs-root", str(DEGRADED), "--state-dir", str(state_dir),
                            "--max-drained", str(LIMIT)], env, state_dir.parent / "runs")
    instant = _rounds(cluster, checks, ROUNDS)
    delay.write_text("0.2\n")  # the node list (every `show`) answers after 0.2 s
    slow = _rounds(cluster, checks, ROUNDS)
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
