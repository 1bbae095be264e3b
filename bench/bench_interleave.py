"""Benchmark: the interleaved gate (issue 27 item 4) against today's sequential gate, on the real
vLLM CPU engine. One comparison per invocation (each run under the engine lock stays short):

- `--compare aa`: an A/A run, the same seat as both arms: should say SAME;
- `--compare busy`: the same seat, arm B with a duty-cycled busy process pinned to CPU
  `--busy-cpu` (`--busy-duty` of it) beside its engine. vLLM's CPU worker binds its OpenMP
  threads itself (VLLM_CPU_OMP_THREADS_BIND=auto: one logical CPU per physical core, one core
  reserved for the scheduler process; vllm/utils/ompmultiprocessing.py
  `_parse_omp_threads_bind_env`), so on this 2-CPU host the worker computes on CPU 0 and the API
  server and scheduler run on CPU 1 (its launch log: "core ids=[0]", "reserved_cpus=[1]").
  Calibrated within one start (a one-off: one engine, 4 rounds alternating the variants, each
  32 completions of 128 tokens at concurrency 4; bench/results/throttle-calibration.txt): 50 % of
  CPU 0 left the rate at 1.05x (no effect: the tiny model's decode steps wait on the API and
  scheduler processes, not on the worker), 25 % of CPU 1 took it to 0.63x, erratically
  (rounds from 0.36x to 0.94x);
- `--compare quota`: arm B's engine (the API server and every process under it) confined to
  `--b-cpus` CPUs by CFS bandwidth control (a cgroup's cpu.cfs_quota_us over cpu.cfs_period_us
  in cgroup v1, cpu.max in v2: Documentation/scheduler/sched-bwc.rst), the benchmark client left
  outside. Calibrated within one start as above: 1.6 CPUs gave 0.821x (rounds 0.77x-0.92x),
  1.3 CPUs 0.622x: 1.6 is the ~20 % effect;
- `--compare seqs`: arm B with `max_num_seqs` lowered to `--b-max-num-seqs` (3 against the
  battery's concurrency 4: a quarter of the requests wait a step; the steps cost about the same,
  so about 20-25 % less throughput).

Each is decided by rocmseat.speculation.gate.interleave over fresh starts in the order
A B B A A B ... (rocmseat.speculation.gate.interleave_run), bounded by --max-starts and
--max-minutes. The sequential baseline on the same starts: today's gate on one start per arm
(the first A and the first B), judged as the gate judges aggregate throughput (a ratio against
its noise band: rocmseat.speculation.gate.judge.ratio_gate with the default noise floor and
drift), and the same rule on every start of each arm pooled (the repeats of all starts).
Prints minutes and starts to a decision, the measured ratio median(B)/median(A), every start's
figure and the flagged starts.

    python bench/bench_interleave.py --models DIR --out DIR --compare aa|busy|quota|seqs
           [--busy-duty 0.2] [--busy-cpu 0] [--b-cpus 1.6] [--b-max-num-seqs 3] [--cold]
           [--concurrency 4] [--repeats 3] [--prompts 32] [--output-tokens 128]
           [--max-starts 16] [--max-minutes 15]

Each arm keeps its compile cache across its starts, as `spec gate --interleave` does (`--cold`:
every start compiles, as the first version of the gate did).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from rocmseat.procgroup import spawn, stop_group
from rocmseat.speculation.gate.arms import ArmRecord, GateRun, check_bench_client
from rocmseat.speculation.gate.interleave import Rules
from rocmseat.speculation.gate.interleave_run import ArmPair, Interleaved, run_interleaved
from rocmseat.speculation.gate.judge import GateConfig, Noise, Series, ratio_gate
from rocmseat.speculation.gate.settings import Battery, SeatWithGate, load_seat_with_gate

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script
from bench.cpu_seat import cpu_seat_text

BUSY = """\
import os, sys, time
duty, period = float(sys.argv[1]), 0.01
os.sched_setaffinity(0, {int(sys.argv[2])})
while True:
    began = time.perf_counter()
    while time.perf_counter() - began < duty * period:
        pass
    time.sleep((1.0 - duty) * period)
"""


@dataclass
class BusyBeside:
    """Runs arm B's starts with a duty-cycled busy process beside the engine (started before
    the launch, stopped after the battery), arm A's as they are."""

    gate: GateRun
    slowed: SeatWithGate
    duty: float
    cpu: int

    def run_arm(self, name: str, source: SeatWithGate, *,
                cache_root: Path | None = None) -> ArmRecord:
        if source is not self.slowed or self.duty <= 0:
            return self.gate.run_arm(name, source, cache_root=cache_root)
        busy = spawn([sys.executable, "-c", BUSY, str(self.duty), str(self.cpu)],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            return self.gate.run_arm(name, source, cache_root=cache_root)
        finally:
            stop_group(busy, 2.0, reap_s=10.0)


ENGINE_MARK = "vllm.entrypoints.openai.api_server"
CGROUP_V1 = Path("/sys/fs/cgroup/cpu")
CGROUP_V2 = Path("/sys/fs/cgroup")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # the comm may hold spaces or ')'
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _engine_pids(root: int) -> list[int]:
    """The API server under `root` and every process under it (its engine core, workers)."""
    tree, found, todo = _children(), [], [root]
    inside: set[int] = set()
    while todo:
        pid = todo.pop()
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            argv = []
        if pid in inside or any(ENGINE_MARK.encode() in a for a in argv):
            inside.update(tree.get(pid, []))
            found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


@dataclass
class QuotaBeside:
    """Runs arm B's starts with the engine confined to `cpus` CPUs by CFS bandwidth control
    (kernel Documentation/scheduler/sched-bwc.rst): a thread moves the engine's tasks into a
    cgroup with that quota while the start runs (the benchmark client stays outside)."""

    gate: GateRun
    slowed: SeatWithGate
    cpus: float
    period_us: int = 100_000
    _group: Path | None = field(default=None, init=False)

    def _make(self) -> Path:
        quota = int(self.cpus * self.period_us)
        if (CGROUP_V1 / "tasks").exists():
            group = CGROUP_V1 / f"rocmseat-bench-{os.getpid()}"
            group.mkdir(exist_ok=True)
            (group / "cpu.cfs_period_us").write_text(str(self.period_us))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
            return group
        group = CGROUP_V2 / f"rocmseat-bench-{os.getpid()}"
        group.mkdir(exist_ok=True)
        (group / "cpu.max").write_text(f"{quota} {self.period_us}")
        return group

    def _move(self, group: Path, stop: threading.Event) -> None:
        into = group / ("tasks" if (group / "tasks").exists() else "cgroup.threads")
        while not stop.wait(0.2):
            for pid in _engine_pids(os.getpid()):
                try:
                    tasks = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for task in tasks:
                    with contextlib.suppress(OSError):  # gone, or already there
                        into.write_text(task)

    def run_arm(self, name: str, source: SeatWithGate, *,
                cache_root: Path | None = None) -> ArmRecord:
        if source is not self.slowed:
            return self.gate.run_arm(name, source, cache_root=cache_root)
        self._group = self._group or self._make()
        stop = threading.Event()
        mover = threading.Thread(target=self._move, args=(self._group, stop), daemon=True)
        mover.start()
        try:
            return self.gate.run_arm(name, source, cache_root=cache_root)
        finally:
            stop.set()
            mover.join()


def today(a: list[float], b: list[float], config: GateConfig) -> str:
    """Today's gate on these repeats: one ratio against the noise band."""
    g = ratio_gate("aggregate", Series(tuple(a)), Series(tuple(b)), config.aggregate_min_ratio,
                   higher_is_better=True, noise=Noise(config.noise_floor, config.drift),
                   unit=" tok/s")
    return f"{g.verdict.value} ({g.detail})"


def report(label: str, done: Interleaved, wall_s: float) -> None:
    d = done.decision
    config = GateConfig()
    first_a = next(s for s in done.starts if s.arm == "A")
    first_b = next(s for s in done.starts if s.arm == "B")
    pooled_a = [r for s in done.starts if s.arm == "A" for r in s.repeats]
    pooled_b = [r for s in done.starts if s.arm == "B" for r in s.repeats]
    print(f"\n== {label}")
    for i, s in enumerate(done.starts):
        flag = "  FLAGGED (its repeats disagree)" if i in d.flagged else ""
        print(f"  start {i:2d} arm {s.arm}: {s.figure:8.2f} tok/s  repeats "
              f"{', '.join(f'{r:.2f}' for r in s.repeats)}  spread {s.spread():.1%}  "
              f"{s.minutes:.2f} min{flag}")
    print(f"  interleaved: {d.result} after {d.starts} starts, {d.minutes:.1f} min of starts "
          f"(wall {wall_s / 60:.1f} min); measured ratio median(B)/median(A) {d.ratio:.3f} "
          f"(90 % {d.low:.3f}..{d.high:.3f}), Mann-Whitney p {d.p_value:.4f}; {d.why}")
    decided_at = next((x for x in done.decisions if x.result != "UNKNOWN"), None)
    if decided_at is not None:
        print(f"  first decided after {decided_at.starts} starts, {decided_at.minutes:.1f} min")
    one = today(list(first_a.repeats), list(first_b.repeats), config)
    print(f"  today's sequential gate, one start per arm (starts 0 and 1, "
          f"{first_a.minutes + first_b.minutes:.1f} min): {one}")
    print(f"  today's rule on all starts' repeats pooled: {today(pooled_a, pooled_b, config)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True, help="rocmseat demo models DEST")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--compare", choices=("aa", "busy", "quota", "seqs"), required=True)
    parser.add_argument("--b-cpus", type=float, default=1.6)
    parser.add_argument("--cold", action="store_true",
                        help="every start compiles (no cache kept across an arm's starts)")
    parser.add_argument("--b-max-num-seqs", type=int, default=3)
    parser.add_argument("--busy-duty", type=float, default=0.2)
    parser.add_argument("--busy-cpu", type=int, default=0)
    parser.add_argument("--python", default="/opt/rocmseat/vllm-venv/bin/python")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    # one run long enough that the neighbours' bursts average out (8 x 64 tokens took 0.5 s on
    # this host and its repeats spread 2x)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--max-starts", type=int, default=16)
    parser.add_argument("--max-minutes", type=float, default=15.0)
    parser.add_argument("--effect", type=float, default=0.20)
    parser.add_argument("--port", type=int, default=18731)
    args = parser.parse_args()
    out = (args.out / args.compare).absolute()
    out.mkdir(parents=True, exist_ok=True)
    check_bench_client(Path(args.python))
    battery = replace(Battery(), concurrency=(args.concurrency,), repeats=args.repeats,
                      prompts=args.prompts, output_tokens=args.output_tokens,
                      phases=("decode",))
    rules = Rules(effect=args.effect, max_starts=args.max_starts, max_minutes=args.max_minutes)

    def seat(name: str, max_num_seqs: int = 16) -> SeatWithGate:
        path = out / "seats" / f"{name}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(cpu_seat_text(name=name, out=out, python=args.python,
                                      target=args.models / "target", port=args.port,
                                      max_num_seqs=max_num_seqs, env={"OMP_NUM_THREADS": "2"},
                                      neutral=("OMP_NUM_THREADS",)))
        return load_seat_with_gate(path)

    base = seat("base")
    other = seat("b", args.b_max_num_seqs if args.compare == "seqs" else 16)
    label = {"aa": "A/A (the same seat twice)",
             "busy": f"effect (a busy process at {args.busy_duty:.0%} of CPU {args.busy_cpu} "
                     "beside B's engine)",
             "quota": f"effect (B's engine confined to {args.b_cpus:g} CPUs by CFS bandwidth "
                      "control)",
             "seqs": f"effect (B with max_num_seqs {args.b_max_num_seqs} against 16 at "
                     f"concurrency {args.concurrency})"}[args.compare]
    label += " (every start compiles)" if args.cold else " (each arm's compile cache kept)"
    gate = GateRun(out=out, replica="r0", battery=battery, config=GateConfig(),
                   port_base=args.port, on_progress=lambda p: None,
                   arms_planned=args.max_starts)
    runner: BusyBeside | QuotaBeside = (
        QuotaBeside(gate, other, args.b_cpus) if args.compare == "quota"
        else BusyBeside(gate, other, args.busy_duty if args.compare == "busy" else 0.0,
                        args.busy_cpu))
    print(f"{label}: effect to see {rules.effect:.0%}, bounds {rules.max_starts} starts, "
          f"{rules.max_minutes:.0f} min", flush=True)
    began = time.monotonic()
    try:
        arms = ArmPair(base, other, caches=None if args.cold else (out / "caches" / "A",
                                                                    out / "caches" / "B"))
        done = run_interleaved(runner, arms, rules, concurrency=args.concurrency,
                               on_decision=lambda d: print(
                                   f"  {d.starts} starts, {d.minutes:.1f} min: {d.result} "
                                   f"({d.why})", flush=True))
    finally:
        if isinstance(runner, QuotaBeside) and runner._group is not None:
            runner._group.rmdir()  # empty once the engine's tasks have exited
    report(label, done, time.monotonic() - began)
    return 0


if __name__ == "__main__":
    sys.exit(main())
