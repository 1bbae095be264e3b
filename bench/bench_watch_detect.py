"""Detection latency and false alarms per simulated 24 h: rocmseat watch's detector against the
baseline "Prometheus rule on the acceptance-length ratio with for: 10m".

    python3 bench/bench_watch_detect.py [--days N]

Traces come from bench/sim.py (10 s windows; four workload categories at K=7 with the
field's tokens per update 2.55 / 2.83 / 5.11 / 5.43, hours of one category, a quiet night,
bursts, two restarts, a K=7 -> K=3 schedule under load). The Prometheus baseline is evaluated
on the same windows the way Prometheus would: AL over the last 5 minutes (rate windows) divided
by the expected 3.3, condition held for 10 minutes, evaluated every 10 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator

from bench.sim import (
    DAY_S,
    Fault,
    SimWindow,
    factor_for_mixed_al,
    mixed_al,
    simulate,
)
from rocmseat.watch.detector import DetectorParams, SpecDetector

INTERVAL_S = 10.0
EXPECTED_AL = 3.3


class Ours:
    name = "rocmseat CUSUM+gate"

    def __init__(self) -> None:
        self.d = SpecDetector(params=DetectorParams(), pinned_al=EXPECTED_AL)

    def step(self, sw: SimWindow) -> bool:
        if sw.window is None:
            return self.d.drop or self.d.dead
        v = self.d.observe(sw.window, sw.time_s)
        return v.drop or v.dead


class PromRule:
    """(1 + Σaccepted/Σdrafts over 5m) / 3.3 < threshold, for: 10m."""

    def __init__(self, threshold: float) -> None:
        self.name = f"Prom AL/3.3<{threshold:g} for:10m"
        self.threshold = threshold
        self.buf: deque[tuple[float, float]] = deque(maxlen=int(300 / INTERVAL_S))
        self.pending_since: float | None = None

    def step(self, sw: SimWindow) -> bool:
        if sw.window is not None:
            self.buf.append((sw.window.drafts, sw.window.accepted_tokens))
        drafts = sum(d for d, _ in self.buf)
        cond = False
        if drafts > 0:
            al = 1 + sum(a for _, a in self.buf) / drafts
            cond = al / EXPECTED_AL < self.threshold
        if not cond:
            self.pending_since = None
            return False
        if self.pending_since is None:
            self.pending_since = sw.time_s
        return sw.time_s - self.pending_since >= 600.0


def detectors() -> list[Callable[[], object]]:
    return [Ours, lambda: PromRule(0.85), lambda: PromRule(0.75), lambda: PromRule(0.65)]


def run(trace: Iterator[SimWindow], make: Callable[[], object]) -> list[tuple[float, float]]:
    """(time, true AL of the traffic at that time) of every firing."""
    det = make()
    fires, prev = [], False
    for sw in trace:
        on = det.step(sw)  # type: ignore[attr-defined]
        if on and not prev:
            fires.append((sw.time_s, sw.true_al))
        prev = on
    return fires


def constant_rate(rate: float) -> Callable[[float, object], float]:
    return lambda t, rng: rate


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=10, help="healthy days simulated")
    args = parser.parse_args()
    t0 = time.process_time()
    names = [make().name for make in detectors()]  # type: ignore[attr-defined]
    print(f"simulated healthy mix: AL {mixed_al():.2f} at K=7 (categories 2.55 / 2.83 / 5.11 / "
          f"5.43); interval {INTERVAL_S:g} s; pinned baseline {EXPECTED_AL}")
    print()
    print("False alarms per simulated 24 h (healthy: mix shifts, bursts, quiet night, "
          f"restarts, K schedule), {args.days} days")
    print(f"{'detector':<28} {'total':>6} {'per 24 h':>9} {'worst day':>10}")
    for make, name in zip(detectors(), names, strict=True):
        per_day = [len(run(simulate(seed=100 + d), make)) for d in range(args.days)]
        print(f"{name:<28} {sum(per_day):>6} {statistics.mean(per_day):>9.2f} "
              f"{max(per_day):>10}")
    print()
    onset = 10 * 3600 + 3.0  # mid-morning, ~25 drafts/s; 3 s into a window
    night = 3 * 3600 + 1803.0  # quiet night, ~0.4 drafts/s
    peak = 13 * 3600 + 603.0  # the daily peak: ~45 drafts/s, the schedule drafts K=3, pure prose
    scenarios = [
        ("collapse 3.3->1.08, day (~25 drafts/s)", Fault(onset, factor_for_mixed_al(1.08)),
         onset, {}),
        ("collapse 3.3->1.08, exactly 5 drafts/s", Fault(onset, factor_for_mixed_al(1.08)),
         onset, {"rate": constant_rate(5.0), "mix_shifts": False}),
        ("collapse 3.3->1.08, night (~0.4 drafts/s)", Fault(night, factor_for_mixed_al(1.08)),
         night, {}),
        ("collapse 3.3->1.08, peak (K=3 mostly, prose)", Fault(peak, factor_for_mixed_al(1.08)),
         peak, {}),
        ("drop 3.3->2.0, same mix", Fault(onset, factor_for_mixed_al(2.0)), onset, {}),
        ("drift 3.3->2.0 over 6 h", Fault(onset, factor_for_mixed_al(2.0), ramp_s=6 * 3600),
         onset, {}),
    ]
    print("Detection latency (seconds from the fault's onset to the first firing; "
          "intervals of 10 s; median over seeds)")
    print(f"{'scenario':<44} {'detector':<28} {'latency s':>10} {'intervals':>10} "
          f"{'AL then':>8} {'missed':>7}")
    seeds = range(7, 7 + 5)
    for label, fault, start, kw in scenarios:
        for make, name in zip(detectors(), names, strict=True):
            lat, al_then = [], []
            missed = 0
            for seed in seeds:
                fires = [f for f in run(simulate(seed=seed, fault=fault, duration_s=DAY_S, **kw),
                                        make) if f[0] > start]
                if fires:
                    lat.append(fires[0][0] - start)
                    al_then.append(fires[0][1])
                else:
                    missed += 1
            med = statistics.median(lat) if lat else float("nan")
            al = statistics.median(al_then) if al_then else float("nan")
            print(f"{label:<44} {name:<28} {med:>10.0f} {med / INTERVAL_S:>10.1f} {al:>8.2f} "
                  f"{missed:>4}/{len(seeds)}")
    print()
    print(f"bench CPU time {time.process_time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
