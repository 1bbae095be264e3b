"""Benchmark: the interleaved gate (issue 27 item 6) against today's sequential gate, on the real
vLLM CPU engine.

Two comparisons, each decided by rocmseat.speculation.gate.interleave over fresh starts in the
order A B B A A B ... (rocmseat.speculation.gate.interleave_run), bounded by --max-starts and
--max-minutes:
- an A/A run: the same seat twice (the base seat as both arms): should say SAME;
- an effect: the base seat against the same seat with fewer CPU threads for the engine
  (`VLLM_CPU_OMP_THREADS_BIND`-free: OMP_NUM_THREADS=1 against 2, a throughput effect of the
  size the gate should see; the bench prints the measured ratio).
The sequential baseline in the same run: one start per arm (the first A and the first B of each
comparison), judged as today's gate judges aggregate throughput (a ratio against a noise band:
rocmseat.speculation.gate.judge.ratio_gate with the default noise floor and drift).
Prints minutes and starts to a decision for both.

    python bench/bench_interleave.py --models DIR --out DIR [--concurrency 4] [--repeats 3]
           [--max-starts 16] [--max-minutes 15]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from rocmseat.speculation.gate.arms import GateRun, check_bench_client
from rocmseat.speculation.gate.interleave import Rules
from rocmseat.speculation.gate.interleave_run import Interleaved, run_interleaved
from rocmseat.speculation.gate.judge import GateConfig, Series, ratio_gate
from rocmseat.speculation.gate.settings import Battery, SeatWithGate, load_seat_with_gate

SEAT = """\
name = "{name}"
backend = "cpu"
tp = 1
cache_root = "{out}/seat-cache"

[engine]
command = ["{python}", "-m", "vllm.entrypoints.openai.api_server"]
model_flag = "--model"
python = "{python}"
host = "127.0.0.1"

[model]
path = "{target}"
served_name = "demo"

[serve]
port_base = {port}
max_model_len = 512
max_num_seqs = 16
dtype = "bfloat16"

[env]
VLLM_CPU_KVCACHE_SPACE = "1"
OMP_NUM_THREADS = "{threads}"

[env_classes]
neutral = ["OMP_NUM_THREADS"]

[preflight]
refuse_on_fail = false
hip = false

[readiness]
timeout_s = 600
"""


def sequential(result: Interleaved, config: GateConfig) -> str:
    """Today's gate on the first start of each arm: one ratio against the noise band."""
    a = next(s for s in result.starts if s.arm == "A")
    b = next(s for s in result.starts if s.arm == "B")
    g = ratio_gate("aggregate", Series(a.repeats), Series(b.repeats), config.aggregate_min_ratio,
                   higher_is_better=True, floor=config.noise_floor, drift=config.drift,
                   unit=" tok/s")
    return f"{g.verdict.value} ({g.detail})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True, help="rocmseat demo models DEST")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--python", default="/opt/rocmseat/vllm-venv/bin/python")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-starts", type=int, default=16)
    parser.add_argument("--max-minutes", type=float, default=15.0)
    parser.add_argument("--port", type=int, default=18731)
    args = parser.parse_args()
    out = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    check_bench_client(Path(args.python))
    battery = replace(Battery(), concurrency=(args.concurrency,), repeats=args.repeats,
                      prompts=8, output_tokens=64, phases=("decode",))
    rules = Rules(max_starts=args.max_starts, max_minutes=args.max_minutes)

    def seat(name: str, threads: int) -> SeatWithGate:
        path = out / "seats" / f"{name}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SEAT.format(name=name, out=out, python=args.python,
                                    target=args.models / "target", port=args.port,
                                    threads=threads))
        return load_seat_with_gate(path)

    results = {}
    for label, b_threads in (("A/A (the same seat twice)", 2), ("effect (1 thread against 2)",
                                                                  1)):
        gate = GateRun(out=out / label.split()[0].replace("/", ""), replica="r0",
                       battery=battery, config=GateConfig(), port_base=args.port,
                       on_progress=lambda p: None, arms_planned=args.max_starts)
        began = time.monotonic()
        done = run_interleaved(gate, seat("base", 2), seat(f"b{b_threads}", b_threads),
                               rules, concurrency=args.concurrency,
                               on_decision=lambda d: print(f"  {d.starts} starts, "
                                                           f"{d.minutes:.1f} min: {d.result} "
                                                           f"({d.why})", flush=True))
        results[label] = (done, time.monotonic() - began)
    print()
    for label, (done, wall) in results.items():
        d = done.decision
        print(f"{label}: interleaved {d.result} after {d.starts} starts, {d.minutes:.1f} min "
              f"(wall {wall / 60:.1f} min); ratio {d.ratio:.3f} (90 % {d.low:.3f}..{d.high:.3f}); "
              f"flagged starts {list(d.flagged)}; today's sequential gate on one start per arm: "
              f"{sequential(done, GateConfig())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
