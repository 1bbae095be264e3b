"""The decision: expected throughput for every (K, batch size), the best K per batch-size band
(the staircase) and a proposed `num_speculative_tokens` / `num_speculative_tokens_per_batch_size`
with the predicted gain per band and its uncertainty (pure; the bootstrap takes a seeded rng).

Throughput at batch size B and draft length K is B E(K) / T(B, K): every step of B decoding
requests emits E(K) tokens per request (rocmseat.speculation.advise.acceptance) and takes T(B, K)
(rocmseat.speculation.advise.stepcost). The best K at B is the largest maximiser. For any step
cost that does
not depend on acceptance the best K is a non-decreasing staircase in the acceptance rate
(docs/spec.md "The model": log E(k, a) has increasing differences in (k, a); Topkis), so a
table of thresholds per batch size says which K a measured acceptance calls for.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rocmseat.speculation.advise.acceptance import (
    Acceptance,
    Counters,
    CountersError,
    estimate,
    expected_tokens,
    resample,
)
from rocmseat.speculation.advise.schedule import Schedule, from_table
from rocmseat.speculation.advise.stepcost import StepCost, perturbed

BOOTSTRAP_DRAWS = 200
MAX_K = 12


@dataclass(frozen=True, slots=True)
class Point:
    batch: int
    k: int
    tokens_per_s: float
    extrapolated: bool  # E(K) or T(B, K) beyond what was measured


@dataclass(frozen=True, slots=True)
class Band:
    start: int
    end: int
    k: int
    gain: float  # predicted throughput at K over K=0, at the band's first batch size
    gain_low: float  # 5th percentile over bootstrap draws
    gain_high: float  # 95th percentile
    # share of bootstrap draws (counters resampled, step costs perturbed) whose best K at `start`
    # is this K: sampling noise only, not the model's error (rocmseat.speculation.advise.basis
    # adds that)
    bootstrap_agreement: float
    extrapolated: bool
    why_extrapolated: str = ""  # which part lies beyond the measurements
    runner_up: int | None = None  # the next-best allowed K at `start` (None: no other K)
    margin: float = math.inf  # ln(throughput at K / at runner_up), at `start`
    margin_sd: float = 0.0  # its spread over the bootstrap draws


@dataclass(frozen=True, slots=True)
class Threshold:
    alpha_from: float
    k: int


@dataclass(frozen=True, slots=True)
class Advice:
    k_limit: int
    points: tuple[Point, ...]  # the (K, B) table at the reported batch sizes
    best_k: tuple[int, ...]  # index 0 = batch size 1
    bands: tuple[Band, ...]
    num_speculative_tokens: int | None  # None: do not speculate at any batch size
    schedule: Schedule | None  # None: one K serves every batch size (or none pays)
    staircase: dict[int, tuple[Threshold, ...]]  # batch size -> k*(alpha) thresholds
    alpha: float
    # the bootstrap's draws (counters resampled, step costs perturbed): any other ratio's spread
    draws: tuple[tuple[Acceptance, StepCost], ...] = ()


def throughput(acceptance: Acceptance, cost: StepCost, batch: int, k: int) -> float:
    return batch * acceptance.e(k) / cost.predict(batch, k) * 1000.0


# Which K may be proposed at which batch size (rocmseat.speculation.advise.basis rules out what a
# measurement
# contradicts, and K=0 tiers for drafters that keep hidden state); None: every K.
Allowed = Callable[[int, int], bool]


def _allowed_ks(batch: int, k_limit: int, allowed: Allowed | None) -> list[int]:
    every = list(range(k_limit + 1))
    # nothing allowed (every K measured and ruled out): the model's choice among all of them
    return [k for k in every if allowed is None or allowed(batch, k)] or every


def best_k(acceptance: Acceptance, cost: StepCost, batch: int, k_limit: int,
           allowed: Allowed | None = None) -> int:
    ks = _allowed_ks(batch, k_limit, allowed)
    values = {k: throughput(acceptance, cost, batch, k) for k in ks}
    top = max(values.values())
    # The largest maximiser (the staircase theorem is about it); ties within 1e-9 relative.
    return max(k for k, v in values.items() if v >= top * (1 - 1e-9))


def runner_up(acceptance: Acceptance, cost: StepCost, batch: int, k_limit: int, *, k: int,
              allowed: Allowed | None = None) -> int | None:
    """The best allowed K other than `k` at `batch` (None when `k` is the only one)."""
    others = [j for j in _allowed_ks(batch, k_limit, allowed) if j != k]
    if not others:
        return None
    return max(others, key=lambda j: (throughput(acceptance, cost, batch, j), j))


def staircase(cost: StepCost, batch: int, k_limit: int, *, step: float = 0.005) -> tuple[
        Threshold, ...]:
    """k*(alpha) at one batch size under the geometric E(k): where each step of the stair starts."""
    out: list[Threshold] = []
    alpha = 0.0
    while alpha < 1.0 - 1e-9:
        values = [batch * expected_tokens(alpha, k) / cost.predict(batch, k)
                  for k in range(k_limit + 1)]
        top = max(values)
        k_star = max(k for k, v in enumerate(values) if v >= top * (1 - 1e-9))
        if not out or out[-1].k != k_star:
            out.append(Threshold(round(alpha, 4), k_star))
        alpha += step
    return tuple(out)


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return math.nan
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def _log_ratio(acceptance: Acceptance, cost: StepCost, batch: int, k: int, other: int) -> float:
    return math.log(throughput(acceptance, cost, batch, k)
                    / throughput(acceptance, cost, batch, other))


def _sd(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 2:
        return 0.0
    mean = sum(finite) / len(finite)
    return math.sqrt(sum((v - mean) ** 2 for v in finite) / (len(finite) - 1))


def bootstrap(counters: Counters, cost: StepCost, rng: random.Random,
              draws: int = BOOTSTRAP_DRAWS) -> list[tuple[Acceptance, StepCost]]:
    """Draws of (acceptance, step cost): the counters resampled, the step costs perturbed."""
    samples: list[tuple[Acceptance, StepCost]] = []
    for _ in range(draws):
        try:
            samples.append((estimate(resample(counters, rng)), perturbed(cost, rng)))
        except CountersError:
            continue
    return samples


def proposal_of(table: Sequence[int]) -> tuple[int | None, Schedule | None]:
    """A K-per-batch-size table (index 0 = batch size 1) -> (num_speculative_tokens, schedule):
    None for K when no batch size drafts, no schedule when one K serves every batch size."""
    schedule = from_table(table)
    top = max(table)
    if top == 0:
        return None, None
    return top, schedule if len(schedule) > 1 else None


def advise(counters: Counters, cost: StepCost, *, max_num_seqs: int,
           report_batches: Sequence[int], k_limit: int | None = None,
           rng: random.Random | None = None, draws: int = BOOTSTRAP_DRAWS,
           allowed: Allowed | None = None) -> Advice:
    acceptance = estimate(counters)
    limit = min(k_limit if k_limit is not None else acceptance.k + 2, MAX_K)
    limit = max(limit, 1)

    def beyond(start: int, end: int, k: int) -> str:
        """Which part of batch sizes start..end at draft length k was not measured ('')."""
        batches, ks = cost.measured_batches(), cost.measured_k()
        parts = []
        if k > acceptance.k:
            parts.append(f"E({k}) beyond the measured K={acceptance.k}")
        if k > ks[-1]:
            parts.append(f"step costs beyond the measured K={ks[-1]}")
        if end > batches[-1]:
            parts.append(f"batch sizes above {batches[-1]} were not measured")
        if start < batches[0]:
            parts.append(f"batch sizes below {batches[0]} were not measured")
        return "; ".join(parts)

    points = tuple(
        Point(b, k, throughput(acceptance, cost, b, k), bool(beyond(b, b, k)))
        for b in sorted(set(report_batches)) for k in range(limit + 1))
    table = tuple(best_k(acceptance, cost, b, limit, allowed)
                  for b in range(1, max_num_seqs + 1))
    schedule_all = from_table(table)
    samples = bootstrap(counters, cost, rng or random.Random(0), draws)
    bands = []
    for start, end, k in schedule_all:
        gain = throughput(acceptance, cost, start, k) / throughput(acceptance, cost, start, 0)
        gains = [throughput(a, c, start, k) / throughput(a, c, start, 0) for a, c in samples]
        agree = [best_k(a, c, start, limit, allowed) == k for a, c in samples]
        why = beyond(start, end, k)
        other = runner_up(acceptance, cost, start, limit, k=k, allowed=allowed)
        margin, margin_sd = math.inf, 0.0
        if other is not None:
            margin = _log_ratio(acceptance, cost, start, k, other)
            margin_sd = _sd([_log_ratio(a, c, start, k, other) for a, c in samples])
        bands.append(Band(start, end, k, gain, _percentile(gains, 0.05),
                          _percentile(gains, 0.95), sum(agree) / len(agree) if agree else 0.0,
                          bool(why), why, other, margin, margin_sd))
    k_max, schedule = proposal_of(table)
    stair_batches = sorted({1, *(b for b in report_batches if b <= max_num_seqs)})
    return Advice(
        k_limit=limit, points=points, best_k=table, bands=tuple(bands),
        num_speculative_tokens=k_max, schedule=schedule,
        staircase={b: staircase(cost, b, limit) for b in stair_batches},
        alpha=acceptance.alpha, draws=tuple(samples),
    )
