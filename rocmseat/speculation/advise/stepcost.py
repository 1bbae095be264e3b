"""Step cost: the time of one engine step against batch size B and draft length K (pure).

Measured, never assumed (issue 12): each cell is a measured mean step time at one (B, K), from

- the gate's sweeps: `vllm bench serve` at concurrency B against an arm drafting K tokens; its
  mean ITL is the time between stream chunks, i.e. between engine steps as a request sees them
  (with speculation a chunk carries several tokens, so ITL is a step time, not a token time);
- the engine's per-iteration log lines (`--enable-logging-iteration-details`): pure decode
  steps only (no prefill chunk in the step), B = requests in the step, K from the generation
  tokens.

The step-time model (docs/spec.md "The model"): when memory-bound, a step's time is the bytes
each kernel requests over its effective bandwidth plus a fixed time; a verify pass reads the
target once for B(K+1) tokens and a chain drafter runs K small passes, so

    T(B, K) = t0 + t1 B + K (u0 + u1 B)

fitted by weighted least squares on relative errors. When it misfits (relative RMS residual
above 10 %: a compute knee, a kernel switch) the measured table is used instead, interpolated
linearly in B and in K and extrapolated linearly from the two nearest points; which one is used
and why is part of the advice.

A fit is never clamped into nonsense: with as many parameters as cells it goes through them
exactly and can cross zero just outside them (T(8, 3) = -30 ms from four cells at B = 1, 4,
once clamped to 1e-6 ms: billions of tokens/s). Beyond the measured batch sizes and draft
lengths a step never takes less time than the step at the edge of the measurements (a step with
more requests or more draft tokens reads more bytes), whether the fit or the table speaks there;
where the fit is not positive inside the measurements, the measured table answers. The fit, not
the table, extrapolates a fit that holds: the table extrapolates from its two outermost cells,
the noisiest (an iteration log's 5-step cell at B = 7 once made K = 3 cheaper than K = 0 at
B = 64). Points beyond the measurements are flagged extrapolated by the decision
(rocmseat.speculation.advise.decide).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rocmseat.speculation.advise.iterlog import Step
from rocmseat.speculation.stats import mean, sample_sd, solve

FIT_MAX_RMS = 0.10


class StepCostError(ValueError):
    """The measurements cannot separate the cost of drafting from the cost of verifying."""


@dataclass(frozen=True, slots=True)
class Cell:
    batch: int
    k: int
    mean_ms: float
    sd_ms: float | None  # spread of the repeats (None: one measurement)
    count: int
    source: str  # "bench" or "iteration-log"


def cells_from_runs(samples: Iterable[tuple[int, int, float]], source: str = "bench") -> list[Cell]:
    """(batch, K, step ms) per run -> one cell per (batch, K) with the repeats' spread."""
    grouped: dict[tuple[int, int], list[float]] = {}
    for batch, k, ms in samples:
        if ms > 0 and math.isfinite(ms):
            grouped.setdefault((batch, k), []).append(ms)
    return [Cell(b, k, mean(v), sample_sd(v), len(v), source)
            for (b, k), v in sorted(grouped.items())]


def cells_from_steps(steps: Iterable[Step], *, min_count: int = 5) -> list[Cell]:
    """Pure decode steps of an iteration log -> cells of at least `min_count` steps."""
    samples = []
    for step in steps:
        k = step.draft_length
        if step.context_requests == 0 and k is not None and step.elapsed_ms > 0:
            samples.append((step.generation_requests, k, step.elapsed_ms))
    return [c for c in cells_from_runs(samples, "iteration-log") if c.count >= min_count]


@dataclass(frozen=True, slots=True)
class StepCost:
    kind: str  # "linear fit" or "measured table"
    why: str
    params: tuple[float, ...] | None  # (t0, t1, u0, u1) of the fit (t1 = u1 = 0 with one B)
    rms_relative: float | None  # of the fit over the cells (None: no fit)
    cells: tuple[Cell, ...]

    def predict(self, batch: float, k: float) -> float:
        """Step time in ms at batch size `batch` and draft length `k`: the fit where it is
        positive (beyond the measurements never below the step at their edge), else the
        measured table."""
        if self.kind != "linear fit":
            return _table(self.cells, batch, k)
        batches, ks = self.measured_batches(), self.measured_k()
        edge_b = min(max(batch, batches[0]), batches[-1])
        edge_k = min(max(k, ks[0]), ks[-1])
        edge = self._fit(edge_b, edge_k)
        if edge is None:  # not positive even inside the measurements
            return _table(self.cells, batch, k)
        if (edge_b, edge_k) == (batch, k):
            return edge
        value = self._fit(batch, k)
        up = batch >= edge_b and k >= edge_k  # more requests or more draft tokens
        down = batch <= edge_b and k <= edge_k
        if value is None:
            return edge if up else _table(self.cells, batch, k)
        if up:
            return max(value, edge)
        if down:
            return min(value, edge)
        return value

    def _fit(self, batch: float, k: float) -> float | None:
        assert self.params is not None
        t0, t1, u0, u1 = self.params
        value = t0 + t1 * batch + k * (u0 + u1 * batch)
        return value if math.isfinite(value) and value > 0 else None

    def within(self, batch: float, k: float) -> bool:
        """Whether (batch, k) lies inside the measured batch sizes and draft lengths."""
        batches, ks = self.measured_batches(), self.measured_k()
        return batches[0] <= batch <= batches[-1] and ks[0] <= k <= ks[-1]

    def measured_k(self) -> tuple[int, ...]:
        return tuple(sorted({c.k for c in self.cells}))

    def measured_batches(self) -> tuple[int, ...]:
        return tuple(sorted({c.batch for c in self.cells}))


def _fit(cells: Sequence[Cell]) -> tuple[tuple[float, float, float, float], float] | None:
    batches = {c.batch for c in cells}
    use_batch = len(batches) >= 2
    rows, targets, weights = [], [], []
    for c in cells:
        features = [1.0, float(c.batch), float(c.k), float(c.k * c.batch)]
        rows.append(features if use_batch else [features[0], features[2]])
        targets.append(c.mean_ms)
        weights.append(c.count / (c.mean_ms**2))
    n = len(rows[0])
    matrix = [[sum(w * r[i] * r[j] for r, w in zip(rows, weights, strict=True)) for j in range(n)]
              for i in range(n)]
    rhs = [sum(w * r[i] * t for r, t, w in zip(rows, targets, weights, strict=True))
           for i in range(n)]
    solution = solve(matrix, rhs)
    if solution is None:
        return None
    params = ((solution[0], solution[1], solution[2], solution[3]) if use_batch
              else (solution[0], 0.0, solution[1], 0.0))
    t0, t1, u0, u1 = params
    errors = [((t0 + t1 * c.batch + c.k * (u0 + u1 * c.batch)) - c.mean_ms) / c.mean_ms
              for c in cells]
    return params, math.sqrt(sum(e * e for e in errors) / len(errors))


def _interp(points: Sequence[tuple[float, float]], x: float) -> float:
    """Piecewise linear through sorted points; linear extrapolation from the two nearest ends,
    never below the last point beyond it nor above the first point before it (step time does
    not fall with more requests or more draft tokens)."""
    if len(points) == 1:
        return points[0][1]
    if x <= points[0][0]:
        (x0, y0), (x1, y1) = points[0], points[1]
        return min(y0 + (y1 - y0) * (x - x0) / (x1 - x0), y0)
    if x >= points[-1][0]:
        (x0, y0), (x1, y1) = points[-2], points[-1]
        return max(y0 + (y1 - y0) * (x - x0) / (x1 - x0), y1)
    i = next(i for i in range(1, len(points)) if points[i][0] >= x)
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def _table(cells: Sequence[Cell], batch: float, k: float) -> float:
    by_k: dict[int, list[tuple[float, float]]] = {}
    for c in cells:
        by_k.setdefault(c.k, []).append((float(c.batch), c.mean_ms))
    per_k = sorted((kk, _interp(sorted(points), batch)) for kk, points in by_k.items())
    value = _interp([(float(kk), v) for kk, v in per_k], k)
    floor = min(v for _, v in per_k) * 0.5
    return max(value, floor)


def choose(cells: Sequence[Cell]) -> StepCost:
    """The linear model when it fits the cells within 10 % RMS, else the measured table."""
    if not cells:
        raise StepCostError("no step-time measurements")
    ks = sorted({c.k for c in cells})
    if len(ks) < 2:
        raise StepCostError(
            f"step times measured at one draft length only (K={ks[0]}): the cost of drafting "
            "cannot be told from the cost of verifying; measure K=0 too (a base arm, or steps of "
            "a per-batch-size schedule that drafts nothing)")
    fitted = _fit(cells)
    if fitted is not None:
        params, rms = fitted
        batches = len({c.batch for c in cells})
        one_b = "" if batches >= 2 else "; one batch size measured, so no batch dependence"
        unknowns = 4 if batches >= 2 else 2
        if len(cells) <= unknowns:
            one_b += (f"; {len(cells)} cells for {unknowns} parameters: it goes through them "
                      "exactly, which tests nothing of its form (measure more batch sizes)")
        if rms <= FIT_MAX_RMS:
            return StepCost("linear fit", f"T(B,K) = t0 + t1 B + K (u0 + u1 B) fits the "
                            f"{len(cells)} measured cells within {rms:.1%} RMS{one_b}", params,
                            rms, tuple(cells))
        return StepCost("measured table", f"the linear step-time model misfits ({rms:.1%} RMS "
                        f"> {FIT_MAX_RMS:.0%}): interpolating the {len(cells)} measured cells",
                        params, rms, tuple(cells))
    return StepCost("measured table", "the linear model cannot be fitted to these cells "
                    "(singular): interpolating the measured cells", None, None, tuple(cells))


def perturbed(cost: StepCost, rng: random.Random) -> StepCost:
    """A bootstrap draw: each cell's mean moved by its standard error (the repeats' spread, or
    5 % when a cell was measured once), then the same choice of model."""
    cells = []
    for c in cost.cells:
        sd = c.sd_ms if c.sd_ms is not None else 0.05 * c.mean_ms
        se = sd / math.sqrt(max(c.count, 1))
        cells.append(Cell(c.batch, c.k, max(c.mean_ms + rng.gauss(0.0, se), 1e-6), c.sd_ms,
                          c.count, c.source))
    if cost.kind == "linear fit":
        fitted = _fit(cells)
        if fitted is not None:
            return StepCost(cost.kind, cost.why, fitted[0], fitted[1], tuple(cells))
    return StepCost("measured table", cost.why, None, None, tuple(cells))
