"""The model's error on what it did not see, and intervals that carry it (pure).

The bootstrap (rocmseat.speculation.advise.decide) resamples the counters and perturbs the step
costs: it knows the sampling noise, not how far the model's *form* is off. A tier whose K no arm
ran is a prediction of the model, and the model has been 18-20 % optimistic on a K it did not
measure while fitting the K it measured within 3 % (issue 27). So its error is measured the way
it is used: leave measurements out, predict them from the rest, and look at the misses.

- **Leave one K out** when the step costs were measured at two or more drafted K (a sweep, or
  iteration logs of several K): every drafted K's cells are left out in turn, the step cost is
  fitted on the rest, and the gain of that K over K=0 is predicted at every concurrency an arm
  ran it and compared with the measured gain (the repeats' mean of both arms).
- **Leave one cell out** when one drafted K was measured (a gate: base and candidate): each
  (K, concurrency) cell is left out in turn. It measures the model's error between batch sizes;
  the error in K it cannot see, so a K that no arm ran also gets the **monotone bound**: a step
  drafting fewer tokens never takes longer than the measured step drafting more (its verify pass
  and its chain of draft passes are shorter), so the gain at K' below the smallest measured
  K_hi > K' is at least B E(K') / T(B, K_hi) over the base. The linear step cost interpolates
  T(B, K') between T(B, 0) and T(B, K_hi), which misses a fixed per-step drafting cost (the
  drafter's pass and its sync run whenever K > 0): that is where the optimism came from.

The misses are log ratios ln(measured gain / predicted gain); each includes the noise of the
measured gain (the repeats of both arms), so their RMS is the error of predicting one measured
gain. The interval of a tier is the prediction times exp(+-1.645 sqrt(bootstrap^2 + RMS^2))
(90 %), widened down to the monotone bound where it applies; with no miss at all (nothing could
be left out) the noise of the measured gains stands in, at least the gate's noise floor per arm.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rocmseat.speculation.advise.acceptance import Acceptance
from rocmseat.speculation.advise.stepcost import Cell, StepCost, StepCostError, choose

Z90 = 1.6449  # two-sided 90 %: the 5th and 95th percentiles of a normal
NOISE_FLOOR = 0.02  # the gate's --noise-floor default: one arm's repeats spread at least this


@dataclass(frozen=True, slots=True)
class MeasuredGain:
    """A drafted arm against the base at one concurrency: the repeats' means."""

    batch: int
    k: int
    gain: float  # drafted tok/s over base tok/s
    noise: float  # relative sd of that ratio (both arms' repeats; at least the floor)


@dataclass(frozen=True, slots=True)
class Miss:
    batch: int
    k: int
    predicted: float  # predicted without this measurement
    measured: float
    noise: float
    quantity: str = "gain"  # "gain" (tok/s over the base) or "step ms" (no arm's tok/s known)

    @property
    def log_miss(self) -> float:
        return math.log(self.measured / self.predicted)


@dataclass(frozen=True, slots=True)
class ModelError:
    how: str  # "leave one K out", "leave one cell out" or why nothing could be left out
    misses: tuple[Miss, ...]
    rms: float | None  # RMS of the log misses (None: no miss)
    noise: float  # RMS relative noise of the measured gains (the stand-in without misses)
    k_shape_measured: bool  # two drafted K measured: the K-shape is in the misses

    @property
    def sigma(self) -> float:
        """One prediction's log error: the misses' RMS, never below the measured noise."""
        return max(self.rms or 0.0, self.noise)


def gain_of(acceptance: Acceptance, cost: StepCost, batch: int, k: int) -> float:
    """Predicted throughput at K over K=0 at one batch size (B E(K) / T(B, K) over B / T(B, 0))."""
    return acceptance.e(k) * cost.predict(batch, 0) / cost.predict(batch, k)


def _rel_noise(mean: float, sd: float | None) -> float:
    if sd is None or not mean > 0 or not math.isfinite(sd):
        return NOISE_FLOOR
    return max(NOISE_FLOOR, sd / mean)


def measured_gains(points: Sequence[tuple[int, int, bool, float, float | None]]
                   ) -> tuple[MeasuredGain, ...]:
    """(batch, K, ran a schedule, tok/s mean, sd) per arm point -> the drafted arms' gains over
    the base (K=0 without a drafter) at each concurrency both ran. Schedule arms are left out:
    their K changes with the batch size, so no cell of one K stands behind them."""
    base = {b: (v, sd) for b, k, sched, v, sd in points if k == 0 and not sched and v > 0}
    out = []
    for b, k, sched, v, sd in points:
        if k == 0 or sched or b not in base or not v > 0:
            continue
        b_value, b_sd = base[b]
        noise = math.hypot(_rel_noise(v, sd), _rel_noise(b_value, b_sd))
        out.append(MeasuredGain(b, k, v / b_value, noise))
    return tuple(sorted(out, key=lambda g: (g.k, g.batch)))


def _refit(cells: Sequence[Cell], leave: Callable[[Cell], bool]) -> StepCost | None:
    kept = [c for c in cells if not leave(c)]
    try:
        return choose(kept)
    except StepCostError:
        return None


def _of_k(k: int) -> Callable[[Cell], bool]:
    return lambda c: c.k == k


def _at(batch: int, k: int) -> Callable[[Cell], bool]:
    return lambda c: c.k == k and c.batch == batch


def leave_out(cells: Sequence[Cell], gains: Sequence[MeasuredGain], acceptance: Acceptance
              ) -> ModelError:
    """The misses of the model on measurements it was not fitted to (module docstring)."""
    noise = (math.sqrt(sum(g.noise ** 2 for g in gains) / len(gains)) if gains
             else NOISE_FLOOR * math.sqrt(2.0))
    drafted = sorted({c.k for c in cells if c.k > 0})
    usable = [g for g in gains if g.k <= acceptance.k]  # E(K) measured, not extrapolated
    misses: list[Miss] = []
    if len(drafted) >= 2:
        how = f"leave one K out (the step cost refitted without each of K={drafted})"
        for k in drafted:
            cost = _refit(cells, _of_k(k))
            if cost is None:
                continue
            misses += [Miss(g.batch, k, gain_of(acceptance, cost, g.batch, k), g.gain, g.noise)
                       for g in usable if g.k == k]
    else:
        how = ("leave one cell out (one drafted K measured, so the error in K is not in the "
               "misses: a K no arm ran also gets the monotone bound)")
        for g in usable:
            cost = _refit(cells, _at(g.batch, g.k))
            if cost is not None:
                misses.append(Miss(g.batch, g.k, gain_of(acceptance, cost, g.batch, g.k),
                                   g.gain, g.noise))
    if not gains:
        # no arm's tokens/s (a live replica with iteration logs): the step times themselves,
        # each drafted cell left out in turn (the gain's error is the step time's)
        how = "leave one step-time cell out (no measured arm: the step times stand in)"
        for cell in cells:
            cost = _refit(cells, _at(cell.batch, cell.k)) if cell.k > 0 else None
            if cost is not None:
                misses.append(Miss(cell.batch, cell.k, cost.predict(cell.batch, cell.k),
                                   cell.mean_ms, _rel_noise(cell.mean_ms, cell.sd_ms),
                                   "step ms"))
    misses = [m for m in misses if m.predicted > 0 and math.isfinite(m.predicted)]
    if not misses:
        how = (f"nothing could be left out ({len(usable)} measured gains, step costs at "
               f"K={sorted({c.k for c in cells})}): the measured noise stands in")
        return ModelError(how, (), None, noise, False)
    rms = math.sqrt(sum(m.log_miss ** 2 for m in misses) / len(misses))
    return ModelError(how, tuple(misses), rms, noise, len(drafted) >= 2)


def monotone_floor(acceptance: Acceptance, cost: StepCost, batch: int, k: int) -> float | None:
    """The gain at K if a step at K took as long as the measured step at the next measured K
    above it (a lower bound on the gain: step time does not fall as K grows); None when no
    drafted K above `k` was measured, or `k` was."""
    ks = [kk for kk in cost.measured_k() if kk > 0]
    above = [kk for kk in ks if kk > k]
    if k <= 0 or k in ks or not above:
        return None
    return acceptance.e(k) * cost.predict(batch, 0) / cost.predict(batch, above[0])


@dataclass(frozen=True, slots=True)
class Interval:
    gain: float
    low: float
    high: float
    sigma: float  # the log spread used (bootstrap and the model's error)
    floor: float | None  # the monotone bound, where it applies


def widened(gain: float, boot_low: float, boot_high: float, error: ModelError, *,
            floor: float | None = None, extrapolated: bool = False) -> Interval:
    """The 90 % interval of a predicted gain with the model's error in it. `boot_low/high`: the
    bootstrap's 5th and 95th percentiles. Beyond the measurements (`extrapolated`) the error
    measured inside them is doubled: no miss was ever seen there."""
    if not (gain > 0 and boot_low > 0 and boot_high > 0):
        return Interval(gain, boot_low, boot_high, math.nan, floor)
    boot = (math.log(boot_high) - math.log(boot_low)) / (2.0 * Z90)
    model = error.sigma * (2.0 if extrapolated else 1.0)
    sigma = math.hypot(boot, model)
    low = min(boot_low, gain * math.exp(-Z90 * sigma))
    high = max(boot_high, gain * math.exp(Z90 * sigma))
    if floor is not None and floor > 0 and not error.k_shape_measured:
        low = min(low, floor * math.exp(-Z90 * error.sigma))
    return Interval(gain, low, high, sigma, floor)


def confidence(margin: float, margin_sd: float, error: ModelError) -> float:
    """P(the tier's K beats the runner-up): the log margin against the bootstrap's spread and
    the model's error."""
    if math.isinf(margin):
        return 1.0
    sd = math.hypot(margin_sd, error.sigma)
    if sd == 0.0:
        return 1.0 if margin > 0 else 0.5
    return 0.5 * (1.0 + math.erf(margin / (sd * math.sqrt(2.0))))


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(v for v in values if math.isfinite(v))
    if not ordered:
        return math.nan
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def stated(acceptance: Acceptance, cost: StepCost,
           draws: Sequence[tuple[Acceptance, StepCost]], error: ModelError, *,
           batch: int, k: int) -> tuple[Interval, Interval]:
    """The 90 % interval of the gain at (batch, K) as the advice states it: before (the
    bootstrap alone, as every tier had it) and after (with the model's left-out error and the
    monotone bound). The bench checks both against gains the advisor never saw."""
    gain = gain_of(acceptance, cost, batch, k)
    gains = [gain_of(a, c, batch, k) for a, c in draws]
    low, high = _percentile(gains, 0.05), _percentile(gains, 0.95)
    before = Interval(gain, low, high, math.nan, None)
    beyond = (k > acceptance.k or k > max(cost.measured_k())
              or not cost.measured_batches()[0] <= batch <= cost.measured_batches()[-1])
    measured_here = any(c.k == k and c.batch == batch for c in cost.cells)
    if measured_here:
        return before, before  # a measured tier keeps the bootstrap's interval
    after = widened(gain, low, high, error, floor=monotone_floor(acceptance, cost, batch, k),
                    extrapolated=beyond)
    return before, after
