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

The property is proven in-process (unit tier): twenty `health` checks on threads against an
in-memory slurmctld that stamps and commits each drain under one lock, as slurmctld does, on a
clock running ten times faster than this host's, over seeded interleavings. Against the real
slurmctld (tier `fleet`) one round with the list answering at once and one with it answering
after 0.2 s show the same with real processes, real scontrol and real stamps.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rocmseat.fleet import slurm
from rocmseat.runner import Completed
from tests.conftest import REPO
from tests.fleet.slurm_cluster import OTHER_PREFIX, running_cluster

# the harness's cluster directory (skips when Slurm or munge is missing)
from tests.fleet.test_slurm_real import DEGRADED, cluster_root  # noqa: F401

NODES = 20
LIMIT = 2
REAL_ROUNDS = 1  # per list speed, against the real slurmctld (tier fleet)
ROUNDS = 12  # in-process, over seeded interleavings
SPEED = 10.0  # the in-process clock's seconds per second of this host's
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


@pytest.mark.fleet
def test_twenty_simultaneous_checks_drain_at_most_the_limit(fleet):
    cluster, names, env, state_dir, delay, _admin = fleet
    checks = Checks(names, ["--sysfs-root", str(DEGRADED), "--state-dir", str(state_dir),
                            "--max-drained", str(LIMIT)], env, state_dir.parent / "runs")
    instant = _rounds(cluster, checks, REAL_ROUNDS)
    delay.write_text("0.2\n")  # the node list (every `show`) answers after 0.2 s
    slow = _rounds(cluster, checks, REAL_ROUNDS)
    print(f"\ndrained of {NODES} (limit {LIMIT}), {REAL_ROUNDS} round(s) each: instant "
          f"{instant}, list after 0.2 s {slow}")
    assert instant == [LIMIT] * REAL_ROUNDS
    assert slow == [LIMIT] * REAL_ROUNDS


@pytest.mark.fleet
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


# ----- the same property in-process -------------------------------------------------------


class FastClock:
    """A wall clock running SPEED times faster than this host's, from a seeded start within a
    second (so drains fall on either side of a second's edge), and its sleep: the settle wait of
    1.25 s is 0.125 s here. Both the checks and the in-memory slurmctld read it."""

    def __init__(self, rng: random.Random) -> None:
        self.start_s = float(int(time.time())) + rng.random()
        self.origin = time.monotonic()

    def wall(self) -> float:
        return self.start_s + (time.monotonic() - self.origin) * SPEED

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds, 0.0) / SPEED)


class Slurmctld:
    """`scontrol -o show node [NAME]` and `scontrol update` against nodes held in memory.

    As slurmctld does (update_node in src/slurmctld/node_mgr.c, under the node write lock that
    _slurm_rpc_update_node in src/slurmctld/proc_req.c takes; the list is read under the read
    lock), a drain's reason is set and stamped with the clock's whole second in one step under
    one lock, and a list is one snapshot under it; scontrol prints the stamp as
    `[user@%FT%T]` in UTC (rocmseat's scontrol_env). Each call first waits a seeded random
    while (the interleaving), a `show` `show_delay_s` more (a slow controller)."""

    def __init__(self, names: list[str], clock: FastClock, rng: random.Random,
                 show_delay_s: float) -> None:
        self.clock, self.rng, self.show_delay_s = clock, rng, show_delay_s
        self.lock = threading.Lock()
        self.reasons: dict[str, tuple[str, float] | None] = dict.fromkeys(names)
        self.drains_asked = 0

    def _line(self, name: str) -> str:
        held = self.reasons[name]
        if held is None:
            return f"NodeName={name} NodeHostName={name} State=IDLE"
        reason, stamp_s = held
        shown = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(stamp_s))
        return f"NodeName={name} NodeHostName={name} State=IDLE+DRAIN Reason={reason} " \
               f"[root@{shown}]"

    def __call__(self, argv: list[str], *, timeout_s: float | None = None,
                 env: dict[str, str] | None = None, **_: object) -> Completed:
        argv = [str(a) for a in argv]
        with self.lock:
            wait_s = self.rng.uniform(0.0, 0.02)  # real seconds: 0-0.2 s on the fast clock
        time.sleep(wait_s + (self.show_delay_s / SPEED if "show" in argv else 0.0))
        with self.lock:
            if argv[:4] == ["scontrol", "-o", "show", "node"]:
                names = argv[4:] or list(self.reasons)
                text = "".join(self._line(n) + "\n" for n in names)
                return Completed(tuple(argv), 0, text, "")
            fields = dict(a.split("=", 1) for a in argv[2:])
            if argv[1] != "update" or fields["NodeName"] not in self.reasons:
                return Completed(tuple(argv), 1, "", f"scontrol: error: {argv!r}\n")
            if fields["State"] == "DRAIN":
                self.drains_asked += 1
                stamp_s = float(int(self.clock.wall()))  # stamped and committed together
                self.reasons[fields["NodeName"]] = (fields["Reason"], stamp_s)
            else:
                self.reasons[fields["NodeName"]] = None
            return Completed(tuple(argv), 0, "", "")

    def drained(self) -> dict[str, str]:
        with self.lock:
            return {n: held[0] for n, held in self.reasons.items() if held is not None}


@pytest.fixture
def failing_verdict(rocmseat_cli: Callable[..., object], tmp_path: Path) -> Path:
    state_dir = tmp_path / "state"
    done = rocmseat_cli("preflight", "--sysfs-root", str(DEGRADED), "--state-dir",
                        str(state_dir))
    assert done.exit_code == 1  # type: ignore[attr-defined]
    return state_dir


def _in_process_round(state_dir: Path, seed: int, show_delay_s: float
                      ) -> tuple[Slurmctld, dict[str, slurm.Outcome]]:
    rng = random.Random(seed)
    names = [f"gpu{i:02d}" for i in range(1, NODES + 1)]
    clock = FastClock(rng)
    ctld = Slurmctld(names, clock, rng, show_delay_s)
    clocks = slurm.Clocks(wall=clock.wall, sleep=clock.sleep)
    outcomes: dict[str, slurm.Outcome] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(NODES)

    def check(name: str) -> None:
        try:
            start.wait()
            outcomes[name] = slurm.health(
                slurm.HealthRequest(DEGRADED, state_dir, node=name,
                                    max_drained=slurm.MaxDrained(count=LIMIT)),
                env={}, runner=ctld, clocks=clocks)
        except BaseException as exc:  # a thread's failure is the test's
            errors.append(exc)

    threads = [threading.Thread(target=check, args=(n,)) for n in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert len(outcomes) == NODES
    return ctld, outcomes


@pytest.mark.parametrize("show_delay_s", [0.0, 0.2], ids=["instant-list", "list-after-0.2s"])
def test_simultaneous_checks_in_process_keep_exactly_the_limit(failing_verdict, show_delay_s):
    """Issue 32: the breaker's race, proven in-process over seeded interleavings. In every
    round more than LIMIT checks get past the first breaker and drain (the race is really run:
    without the hand-back the count would exceed the limit), and exactly LIMIT drains remain,
    the first LIMIT slurmctld stamped (by second, then name); every check says what it did."""
    raced = []
    for seed in range(ROUNDS):
        ctld, outcomes = _in_process_round(failing_verdict, seed, show_delay_s)
        drained = ctld.drained()
        assert len(drained) == LIMIT, (seed, drained)
        assert all(r.startswith("rocmseat: ") for r in drained.values()), drained
        kept = {n for n, o in outcomes.items() if o.action.kind == "drain" and o.applied}
        handed = {n for n, o in outcomes.items()
                  if o.action.kind == "resume" and "handed back the drain" in o.action.why}
        held = {n for n, o in outcomes.items() if "not draining" in o.action.why}
        assert kept == set(drained), (seed, kept, drained)
        assert len(kept) + len(handed) + len(held) == NODES, (seed, outcomes)
        assert all(o.verdict_code == 1 for o in outcomes.values()), outcomes
        assert ctld.drains_asked == LIMIT + len(handed)
        raced.append(ctld.drains_asked)
    print(f"\nin-process, list after {show_delay_s:g} s: drains asked per round {raced}, "
          f"{LIMIT} kept in each of {ROUNDS}")
    assert sum(asked > LIMIT for asked in raced) >= ROUNDS // 2, raced  # the race was run
