"""Benchmark: the draft-length advisor against a measured sweep on the real vLLM CPU engine.

At every acceptance level (a target of `rocmseat demo spec-models` with its one-layer drafter):

1. calibration, before any sweep: one base arm (the target alone, K=0) and, per level, one arm
   at K_max; the advisor (rocmseat.speculation.advise.decide) sees the per-position counters of
   that level's
   K_max arm and measured step costs, nothing else. Two variants: the step cost fitted per level
   (base + that level's arm; `advice.json`, written before the first sweep) and pooled over
   every calibration arm (the step cost does not depend on acceptance; `advice-pooled.json`);
2. the sweep: a fresh arm for every K in 1..K_max at every level, and a base arm (K=0), decode
   only, measured output tokens/s per concurrency; `--passes 2` (default) runs a second pass in
   the opposite order and averages the two, so a drift of the host in time (A/A runs on the
   shared test host drifted up to 23 % between arms) does not rank the draft lengths;
3. per (level, concurrency) point: the measured best K and whether each pick is within one.

Baseline measured in the same run: the textbook rule (Leviathan et al. 2023) with vLLM's own
"draft acceptance rate" S/D as alpha and the single-stream draft/target step-cost ratio c as the
cost: k* = argmax (1 - a^(k+1)) / ((1 - a)(1 + k c)). The bench prints the hit rates and the
ratio advisor/baseline. Target: the advisor within one of the measured best at >= 90 % of points.

    python bench/bench_advise.py --models DIR --out DIR [--k-max 4] [--concurrency 1,4]
           [--levels spec-target-e0106,...] [--repeats 2] [--prompts 6] [--output-tokens 64]
           [--passes 2] [--gates DIR ...]
    python bench/bench_advise.py --gates tests/fixtures/spec/gate-cpu-deep ...   (no engine)

Interval coverage (issue 27): the stated 90 % interval of the gain against gains the advisor never
saw, before (the bootstrap alone: the intervals as they were) and after (with the model's
left-out error, rocmseat.speculation.advise.modelerror), in the same run:
- on the sweep: every (K, concurrency) with 0 < K < K_max, from the calibration data alone;
- on recorded gate directories (`--gates`): every drafted (K, concurrency) cell left out of the
  advisor's inputs in turn (its step-time cell and its tokens/s), predicted from the rest.
Target: the stated 90 % covers >= 90 % of the left-out cells.

Runs take long (a cold start is 40-120 s on a 2-core CPU host): arms already measured under
--out are reused and the advice files are read back, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import random
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from rocmseat.speculation.advise.acceptance import Counters, estimate, expected_tokens
from rocmseat.speculation.advise.advice import from_gate
from rocmseat.speculation.advise.decide import advise, bootstrap
from rocmseat.speculation.advise.modelerror import (
    Interval,
    leave_out,
    measured_gains,
    stated,
)
from rocmseat.speculation.advise.stepcost import Cell, cells_from_runs, choose
from rocmseat.speculation.gate.arms import GateRun, check_bench_client, load_arm_record
from rocmseat.speculation.gate.judge import GateConfig
from rocmseat.speculation.gate.settings import Battery, load_seat_with_gate
from rocmseat.speculation.stats import mean, sample_sd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script
from bench.cpu_seat import cpu_seat_text

DRAFTER = """
[drafter]
method = "draft_model"
path = "{drafter}"
num_speculative_tokens = {k}
"""


def arm_measurements(arm_dir: Path) -> dict[str, Any] | None:
    """(concurrency -> [tok/s], [(c, K, ITL ms)], pooled counters) of a finished arm, read
    back through the gate's own reader (rocmseat.speculation.gate.arms.load_arm_record)."""
    if not (arm_dir / "arm.json").exists():
        return None
    record = load_arm_record(arm_dir.parent.parent, arm_dir.name)
    k = record.k
    tput: dict[int, list[float]] = {}
    itl: list[tuple[int, int, float]] = []
    counters: Counters | None = None
    runs = [r for r in record.runs if r.phase == "decode"]
    if not runs or any(r.error or r.result is None for r in runs):
        return None
    for r in runs:
        assert r.result is not None
        tput.setdefault(r.concurrency, []).append(r.result.output_tokens_per_s)
        if r.result.mean_itl_ms is not None:
            itl.append((r.concurrency, k, r.result.mean_itl_ms))
        w = r.window
        if w is not None and w.spec_present and w.drafts > 0:
            more = Counters(w.drafts, w.draft_tokens, w.accepted_tokens, w.accepted_per_pos)
            counters = more if counters is None else counters + more
    return {"k": k, "tput": tput, "itl": itl, "counters": counters}


def run_arm(gate: GateRun, out: Path, name: str, seat_text: str, k: int | None) -> dict[str, Any]:
    have = arm_measurements(out / "arms" / name)
    if have is not None:
        print(f"  {name}: reused", flush=True)
        return have
    seat_file = out / "seats" / f"{name}.toml"
    seat_file.parent.mkdir(parents=True, exist_ok=True)
    seat_file.write_text(seat_text)
    started = dt.datetime.now(dt.UTC)
    gate.run_arm(name, load_seat_with_gate(seat_file), k=k)
    got = arm_measurements(out / "arms" / name)
    assert got is not None, f"{name}: no measurements"
    print(f"  {name}: {(dt.datetime.now(dt.UTC) - started).total_seconds():.0f} s "
          + " ".join(f"c{c}={mean(v):.1f}" for c, v in sorted(got["tput"].items())), flush=True)
    return got


Point = tuple[int, int, bool, float, "float | None"]  # (batch, K, ran a schedule, tok/s, sd)


def covered(counters: Counters, cells: list[Cell], points: list[Point], *, batch: int, k: int
            ) -> tuple[Interval, Interval]:
    """The advisor's stated 90 % interval of the gain at (batch, K), before and after, from
    these inputs alone (the bootstrap seeded: the same draws for both)."""
    acceptance = estimate(counters)
    cost = choose(cells)
    draws = bootstrap(counters, cost, random.Random(0))
    error = leave_out(cells, measured_gains(points), acceptance)
    return stated(acceptance, cost, draws, error, batch=batch, k=k)


def gate_coverage(gate_dir: Path) -> list[dict[str, Any]]:
    """Every drafted (K, concurrency) cell of a recorded gate left out in turn."""
    inputs = from_gate(gate_dir)
    points: list[Point] = [(p.batch, p.k, p.schedule is not None, p.tokens_per_s, p.sd)
                           for p in inputs.measured]
    base = {b: v for b, k, sched, v, _ in points if k == 0 and not sched}
    rows = []
    for point in points:
        b, k, sched, value, _ = point
        if k == 0 or sched or b not in base:
            continue
        cells = [c for c in inputs.cells if (c.batch, c.k) != (b, k)]
        rest = [q for q in points if q is not point]
        before, after = covered(inputs.counters, cells, rest, batch=b, k=k)
        rows.append(_row(gate_dir.name, b, k, value / base[b], before, after))
    return rows


def _row(source: str, batch: int, k: int, truth: float, before: Interval, after: Interval
         ) -> dict[str, Any]:
    return {"source": source, "batch": batch, "k": k, "measured_gain": truth,
            "predicted_gain": before.gain, "before": [before.low, before.high],
            "after": [after.low, after.high],
            "before_covers": before.low <= truth <= before.high,
            "after_covers": after.low <= truth <= after.high}


def print_coverage(rows: list[dict[str, Any]]) -> None:
    print()
    print(f"{'left-out cell':<34}{'measured':>9}{'predicted':>10}{'before (90 %)':>17}"
          f"{'':>4}{'after (90 %)':>17}")
    for r in rows:
        print(f"{r['source'] + ' K=' + str(r['k']) + ' c=' + str(r['batch']):<34}"
              f"{r['measured_gain']:>9.3f}{r['predicted_gain']:>10.3f}"
              f"{r['before'][0]:>8.3f}..{r['before'][1]:<7.3f}"
              f"{'in' if r['before_covers'] else 'OUT':>4}"
              f"{r['after'][0]:>8.3f}..{r['after'][1]:<7.3f}"
              f"{'in' if r['after_covers'] else 'OUT':>4}")
    n = len(rows)
    if not n:
        print("coverage: no left-out cells")
        return
    for name in ("before", "after"):
        hit = sum(r[f"{name}_covers"] for r in rows)
        width = sum(math.log(r[name][1] / r[name][0]) for r in rows) / n
        print(f"coverage of the stated 90 % interval, {name:<6}: {hit}/{n} = {hit / n:.0%} of "
              f"the left-out (K, concurrency) cells (mean width x{math.exp(width):.2f})")
    print("target: after >= 90 %")


def textbook_best(counters: Counters, c_ratio: float, k_max: int) -> int:
    """Leviathan's rule with vLLM's 'acceptance rate' S/D as alpha (the naive reading)."""
    a = min(counters.accepted_tokens / counters.draft_tokens, 0.999)
    values = [expected_tokens(a, k) / (1 + k * c_ratio) for k in range(k_max + 1)]
    return max(range(k_max + 1), key=lambda k: (values[k], k))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--gates", type=Path, nargs="*", default=[],
                        help="recorded gate directories: leave-one-cell-out coverage (no engine)")
    parser.add_argument("--python", default="/opt/rocmseat/vllm-venv/bin/python")
    parser.add_argument("--levels", default=None)
    parser.add_argument("--k-max", type=int, default=4)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--port", type=int, default=18631)
    parser.add_argument("--passes", type=int, default=2,
                        help="sweep passes, every other one in the opposite order")
    args = parser.parse_args()
    gate_rows = [row for gate in args.gates for row in gate_coverage(gate)]
    if args.models is None or args.out is None:
        if not gate_rows:
            parser.error("--models and --out (the engine sweep), or --gates DIR ...")
        print_coverage(gate_rows)
        return 0 if _after_share(gate_rows) >= 0.9 else 1
    out = args.out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    levels = (args.levels.split(",") if args.levels else
              sorted(p.name for p in args.models.iterdir() if p.name.startswith("spec-target-")))
    concurrency = tuple(int(c) for c in args.concurrency.split(","))
    python = Path(args.python)
    check_bench_client(python)
    battery = replace(Battery(), concurrency=concurrency, repeats=args.repeats,
                      prompts=args.prompts, output_tokens=args.output_tokens,
                      phases=("decode",))
    gate = GateRun(out=out, replica="r0", battery=battery, config=GateConfig(),
                   port_base=args.port, on_progress=lambda p: None,
                   arms_planned=1 + len(levels) + args.passes * (1 + len(levels) * args.k_max))
    drafter = args.models / "spec-drafter"

    def text(name: str, level: str, k: int | None) -> str:
        seat = cpu_seat_text(name=name, out=out, python=python, target=args.models / level,
                             port=args.port, kv_cache_gib=2)
        return seat + (DRAFTER.format(drafter=drafter, k=k) if k else "")

    # 1. calibration: everything the advisor will see, measured before any sweep
    print("calibration", flush=True)
    base = run_arm(gate, out, "cal-base", text("cal-base", levels[0], None), None)
    cals = {level: run_arm(gate, out, f"cal-{level}", text(f"cal-{level}", level, args.k_max),
                           args.k_max) for level in levels}
    # The step cost does not depend on acceptance (docs/spec.md "The model"): the pooled
    # advisor fits it once on every calibration arm; the per-level one on the base and that
    # level's arm only.
    pooled_cost = choose(cells_from_runs([*base["itl"], *(x for level in levels
                                                         for x in cals[level]["itl"])]))
    advice = read_or_write_advice(out, "advice.json", levels, concurrency, args.k_max, base,
                                  cals, pooled=None)
    pooled = read_or_write_advice(out, "advice-pooled.json", levels, concurrency, args.k_max,
                                  base, cals, pooled=pooled_cost)

    # 2. the sweep: a fresh start for every K; the second pass runs in the opposite order so a
    # drift of the host in time does not rank the draft lengths (the A/A runs saw up to 23 %)
    measured: dict[str, dict[int, dict[int, list[float]]]] = {level: {} for level in levels}
    base_values: dict[int, list[float]] = {}
    for number in range(1, args.passes + 1):
        print(f"sweep pass {number}", flush=True)
        prefix = "sweep" if number == 1 else f"sweep{number}"
        order = [(level, k) for level in levels for k in range(1, args.k_max + 1)]
        if number % 2 == 0:
            order.reverse()
        arms = [("base", 0), *order] if number % 2 else [*order, ("base", 0)]
        for level, k in arms:
            name = f"{prefix}-base" if k == 0 else f"{prefix}-{level}-k{k}"
            got = run_arm(gate, out, name, text(name, levels[0] if k == 0 else level,
                                                k or None), k or None)
            for c, values in got["tput"].items():
                if k == 0:
                    base_values.setdefault(c, []).append(mean(values))
                else:
                    measured[level].setdefault(k, {}).setdefault(c, []).append(mean(values))

    # 3. the table: tokens/s per K, the mean over the passes
    ks = list(range(args.k_max + 1))
    print()
    print(f"{'level':<20}{'alpha':>7}{'c':>4}" + "".join(f"{'K=' + str(k):>9}" for k in ks)
          + f"{'best':>6}{'tied':>11}{'level':>7}{'ok':>4}{'pooled':>8}{'ok':>4}"
          + f"{'textbook':>10}{'ok':>4}")
    hits = {"level": 0, "pooled": 0, "textbook": 0}
    tied_hits = {"level": 0, "pooled": 0, "textbook": 0}
    rows = []
    for level in levels:
        info, info_pooled = advice["levels"][level], pooled["levels"][level]
        for c in concurrency:
            passes = [base_values[c]] + [measured[level][k][c] for k in range(1, args.k_max + 1)]
            values = [mean(v) for v in passes]
            # The same tie rule as the advisor (rocmseat.speculation.advise.decide: the larger K
            # on a tie).
            best = max(range(len(values)), key=lambda k: (values[k], k))
            tied = statistically_tied(passes, best)
            picks = {"level": info["advisor_best"][str(c)],
                     "pooled": info_pooled["advisor_best"][str(c)],
                     "textbook": info["textbook_best"][str(c)]}
            oks = {name: abs(k - best) <= 1 for name, k in picks.items()}
            tied_oks = {name: any(abs(k - t) <= 1 for t in tied) for name, k in picks.items()}
            for name in picks:
                hits[name] += oks[name]
                tied_hits[name] += tied_oks[name]
            rows.append({"level": level, "alpha": info["alpha"], "c": c, "tok_s": values,
                         "tok_s_passes": passes, "best": best, "tied_with_best": tied,
                         **{f"{n}_pick": k for n, k in picks.items()}})
            print(f"{level:<20}{info['alpha']:>7.3f}{c:>4}" + "".join(f"{v:>9.1f}" for v in values)
                  + f"{best:>6}{','.join(map(str, tied)):>11}"
                  + "".join(f"{picks[n]:>{w}}{'yes' if oks[n] else 'NO':>4}"
                            for n, w in (("level", 7), ("pooled", 8), ("textbook", 10))))
    points = len(rows)
    print()
    for name, label in (("level", "advisor (the CLI's way: step cost from the base and that "
                                  "level's arm; written before any sweep) [primary]"),
                        ("pooled", "advisor, step cost pooled over every calibration arm"),
                        ("textbook", "baseline: textbook rule, vLLM's acceptance rate as alpha")):
        print(f"{label}: within one of the measured best at {hits[name]}/{points} points = "
              f"{hits[name] / points:.0%}; within one of a K tied with the best "
              f"(inside the pass-to-pass noise) {tied_hits[name]}/{points}")
    print(f"ratio advisor (primary) / baseline: "
          f"{hits['level'] / hits['textbook'] if hits['textbook'] else float('inf'):.2f}x; "
          f"target >= 90 % of the points at >= 5 acceptance levels ({len(levels)} here)")
    cover = sweep_coverage(levels, concurrency, args.k_max, base, cals, measured,
                           base_values) + gate_rows
    print_coverage(cover)
    (out / "table.json").write_text(json.dumps(
        {"rows": rows, "hits": hits, "hits_tied": tied_hits, "points": points,
         "passes": args.passes, "levels": len(levels), "coverage": cover}, indent=2))
    return 0 if hits["level"] / points >= 0.9 and len(levels) >= 5 else 1


def _after_share(rows: list[dict[str, Any]]) -> float:
    return sum(r["after_covers"] for r in rows) / len(rows) if rows else 0.0


def sweep_coverage(levels: list[str], concurrency: tuple[int, ...], k_max: int,
                   base: dict[str, Any], cals: dict[str, dict[str, Any]],
                   measured: dict[str, dict[int, dict[int, list[float]]]],
                   base_values: dict[int, list[float]]) -> list[dict[str, Any]]:
    """Every swept (K, concurrency) with 0 < K < K_max, stated from the calibration alone."""
    rows = []
    for level in levels:
        cal = cals[level]
        cells = cells_from_runs([*base["itl"], *cal["itl"]])
        points: list[Point] = [
            (c, 0, False, mean(v), sample_sd(v)) for c, v in base["tput"].items()] + [
            (c, k_max, False, mean(v), sample_sd(v)) for c, v in cal["tput"].items()]
        for k in range(1, k_max):
            for c in concurrency:
                truth = mean(measured[level][k][c]) / mean(base_values[c])
                before, after = covered(cal["counters"], cells, points, batch=c, k=k)
                rows.append(_row(level, c, k, truth, before, after))
    return rows


def statistically_tied(passes: list[list[float]], best: int) -> list[int]:
    """The draft lengths whose mean lies within two standard errors of the best's (the spread of
    each K's per-pass means, pooled over K: each pass is a fresh start at another time). With one
    pass there is no spread: only the best itself."""
    spreads = [sd for v in passes if (sd := sample_sd(v)) is not None]
    if not spreads:
        return [best]
    sd = (sum(x * x for x in spreads) / len(spreads)) ** 0.5
    n = min(len(v) for v in passes)
    se_diff = sd * (2 / n) ** 0.5
    top = mean(passes[best])
    return [k for k, v in enumerate(passes) if top - mean(v) <= 2 * se_diff]


def read_or_write_advice(out: Path, name: str, levels: list[str], concurrency: tuple[int, ...],
                         k_max: int, base: dict[str, Any], cals: dict[str, dict[str, Any]],
                         pooled: Any) -> dict[str, Any]:
    """The advisor's picks from the calibration data; written once, with its time, and read
    back on a resumed run (so a pick is never recomputed after a sweep)."""
    path = out / name
    if path.exists():
        loaded: dict[str, Any] = json.loads(path.read_text())
        return loaded
    advice: dict[str, Any] = {"written_at": None, "levels": {}}
    for level in levels:
        cal = cals[level]
        cost = pooled or choose(cells_from_runs([*base["itl"], *cal["itl"]]))
        a = advise(cal["counters"], cost, max_num_seqs=16, report_batches=concurrency,
                   k_limit=k_max, rng=random.Random(0))
        single = {c: mean([ms for cc, k, ms in cal["itl"] if cc == c and k == k_max])
                  for c in concurrency}
        plain = {c: mean([ms for cc, k, ms in base["itl"] if cc == c]) for c in concurrency}
        if 1 not in single:
            raise SystemExit("bench_advise: the textbook baseline needs concurrency 1 "
                             "(its draft/target cost ratio is the single-stream step ratio)")
        c_ratio = max((single[1] / plain[1] - 1) / k_max, 1e-3)
        acc = estimate(cal["counters"])
        advice["levels"][level] = {
            "alpha": acc.alpha, "acceptance_length": acc.e(acc.k),
            "vllm_acceptance_rate": cal["counters"].accepted_tokens
            / cal["counters"].draft_tokens,
            "step_cost": cost.kind, "rms": cost.rms_relative, "why": cost.why,
            "advisor_best": {str(c): a.best_k[c - 1] for c in concurrency},
            "textbook_best": {str(c): textbook_best(cal["counters"], c_ratio, k_max)
                              for c in concurrency},
        }
    advice["written_at"] = dt.datetime.now(dt.UTC).isoformat()
    path.write_text(json.dumps(advice, indent=2, sort_keys=True))
    print(f"advice written: {path}", flush=True)
    return advice


if __name__ == "__main__":
    sys.exit(main())
