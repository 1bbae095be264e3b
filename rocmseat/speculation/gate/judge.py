"""The ship gates of `rocmseat spec gate`, their noise, and the crossover (pure).

Each gate compares the candidate arm with the base arm and is PASS, FAIL or INCONCLUSIVE: the
95 % interval of the compared figure either clears the threshold, misses it, or contains it (the
difference lies inside the measured noise; then the number of repeats per arm that would
decide is given). UNKNOWN: the figure could not be measured. Defaults are the field's
(issue 12): aggregate throughput at the highest concurrency >= 0.95x base; cold TTFT <= 1.5x;
prefix-cache hit rate >= base - 0.05; KV pool >= 0.85x; no failed request; no hang.

Noise: throughput and TTFT ratios are judged on the log scale, with the relative spread of the
repeats of each arm (Student t with the pooled degrees of freedom), never less than
`noise_floor` per run (two equal runs do not prove a zero spread), plus the `drift` between two
arms measured minutes apart, which more repeats within an arm do not shrink. A single
cold-TTFT sample per start borrows its arm's warm-TTFT spread.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rocmseat.speculation.advise.acceptance import Counters
from rocmseat.speculation.advise.basis import keeps_hidden_state, seat_k0_trap
from rocmseat.speculation.advise.schedule import Schedule, from_crossover
from rocmseat.speculation.stats import Z975, mean, sample_sd, t975


class Verdict(enum.StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    INCONCLUSIVE = "INCONCLUSIVE"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class GateConfig:
    aggregate_min_ratio: float = 0.95
    cold_ttft_max_ratio: float = 1.5
    prefix_hit_max_drop: float = 0.05
    kv_pool_min_ratio: float = 0.85
    max_failed_requests: int = 0
    noise_floor: float = 0.02  # relative spread of one run assumed at least
    # Two identical arms measured minutes apart (each a restart) differ by more than their
    # repeats spread: the field saw +-5 % single-stream between identical runs (issue 12). More
    # repeats within an arm do not shrink this part.
    drift: float = 0.05
    hit_rate_noise_floor: float = 0.005  # absolute


@dataclass(frozen=True, slots=True)
class Series:
    values: tuple[float, ...]

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float | None:
        return mean(self.values) if self.values else None

    @property
    def sd(self) -> float | None:
        return sample_sd(self.values)


@dataclass(frozen=True, slots=True)
class ArmFigures:
    """What the battery measured on one arm (rocmseat.speculation.gate.arms builds it from the
    runs)."""

    name: str
    k: int  # num_speculative_tokens (0: no drafter)
    throughput: Mapping[int, Series]  # concurrency -> output tokens/s, one value per repeat
    itl_ms: Mapping[int, Series]
    tpot_ms: Mapping[int, Series]
    cold_ttft_ms: float | None
    warm_ttft_ms: Series
    prefix_hit_rate: Series
    kv_tokens: int | None
    max_concurrency: float | None
    failed_requests: int
    hangs: tuple[str, ...]
    counters: Counters | None
    schedule: Schedule | None = None
    problems: tuple[str, ...] = field(default=())  # could not measure: the reasons
    watch_gaps: tuple[str, ...] = field(default=())  # runs the watchdog did not watch


@dataclass(frozen=True, slots=True)
class GateResult:
    gate: str
    verdict: Verdict
    base: float | None
    candidate: float | None
    value: float | None  # the compared figure: a ratio, or a difference for the hit rate
    threshold: float
    low: float | None
    high: float | None
    repeats_to_decide: int | None
    detail: str
    # what repeats_to_decide counts: repeats of a run within each arm, or for the cold TTFT
    # (one cold start per arm; --repeats never repeats it) whole gate runs
    decide_unit: str = "repeats per arm"


COLD_START_UNIT = "gate runs (cold starts) per arm"


def _cv(series: Series, floor: float) -> float:
    m, sd = series.mean, series.sd
    if m is None or m <= 0 or sd is None:
        return floor
    return max(sd / m, floor)


def _repeats(spread: float, distance: float, drift: float = 0.0) -> int | None:
    """Repeats per arm whose 95 % interval (Student t, 2n-2 df) would clear the threshold; None
    when none would (the difference lies inside the drift between arms)."""
    if distance <= 0:
        return None
    for n in range(2, 10_001):
        if t975(2 * n - 2) * math.sqrt(spread**2 / n + drift**2) < distance:
            return n
    return None


@dataclass(frozen=True, slots=True)
class Noise:
    """The noise a ratio gate allows for: each run's spread at least `floor`, the drift between
    arms measured minutes apart, and for a figure with one sample per arm (the cold TTFT) the
    spread measured beside it (base_cv, cand_cv: the warm TTFTs)."""

    floor: float
    drift: float = 0.0
    base_cv: float | None = None
    cand_cv: float | None = None


def ratio_gate(gate: str, base: Series, cand: Series, threshold: float, *, higher_is_better: bool,
               noise: Noise, unit: str = "", decide_unit: str = "repeats per arm") -> GateResult:
    floor, drift = noise.floor, noise.drift
    mb, mc = base.mean, cand.mean
    if mb is None or mc is None or mb <= 0 or mc <= 0:
        return GateResult(gate, Verdict.UNKNOWN, mb, mc, None, threshold, None, None, None,
                          "not measured on both arms")
    cv_b = noise.base_cv if noise.base_cv is not None else _cv(base, floor)
    cv_c = noise.cand_cv if noise.cand_cv is not None else _cv(cand, floor)
    ratio = mc / mb
    se = math.sqrt(cv_b**2 / base.n + cv_c**2 / cand.n + drift**2)
    df = base.n + cand.n - 2
    t = t975(df) if df >= 1 else Z975
    low, high = ratio * math.exp(-t * se), ratio * math.exp(t * se)
    if higher_is_better:
        verdict = (Verdict.PASS if low >= threshold else Verdict.FAIL if high < threshold
                   else Verdict.INCONCLUSIVE)
        rel = f">= {threshold:g}x"
    else:
        verdict = (Verdict.PASS if high <= threshold else Verdict.FAIL if low > threshold
                   else Verdict.INCONCLUSIVE)
        rel = f"<= {threshold:g}x"
    repeats = None
    if verdict is Verdict.INCONCLUSIVE:
        repeats = _repeats(math.sqrt(cv_b**2 + cv_c**2), abs(math.log(ratio / threshold)),
                           drift)
    detail = (f"{mc:.4g}{unit} vs {mb:.4g}{unit}: {ratio:.3f}x (95 % {low:.3f}..{high:.3f}), "
              f"needs {rel}")
    return GateResult(gate, verdict, mb, mc, ratio, threshold, low, high, repeats, detail,
                      decide_unit)


def hit_rate_gate(base: Series, cand: Series, max_drop: float, floor: float) -> GateResult:
    mb, mc = base.mean, cand.mean
    if mb is None or mc is None:
        return GateResult("prefix_hit_rate", Verdict.UNKNOWN, mb, mc, None, -max_drop, None, None,
                          None, "no prefix-cache queries measured on both arms")
    sd_b = max(base.sd if base.sd is not None else floor, floor)
    sd_c = max(cand.sd if cand.sd is not None else floor, floor)
    diff = mc - mb
    spread = math.sqrt(sd_b**2 / base.n + sd_c**2 / cand.n)
    df = base.n + cand.n - 2
    t = t975(df) if df >= 1 else Z975
    low, high = diff - t * spread, diff + t * spread
    threshold = -max_drop
    verdict = (Verdict.PASS if low >= threshold else Verdict.FAIL if high < threshold
               else Verdict.INCONCLUSIVE)
    repeats = None
    if verdict is Verdict.INCONCLUSIVE:
        repeats = _repeats(math.sqrt(sd_b**2 + sd_c**2), abs(diff - threshold))
    detail = (f"{mc:.3f} vs {mb:.3f}: {diff:+.3f} (95 % {low:+.3f}..{high:+.3f}), "
              f"needs >= {threshold:+.3f}")
    return GateResult("prefix_hit_rate", verdict, mb, mc, diff, threshold, low, high, repeats,
                      detail)


def kv_gate(base: int | None, cand: int | None, min_ratio: float) -> GateResult:
    if not base or cand is None:
        return GateResult("kv_pool", Verdict.UNKNOWN, base, cand, None, min_ratio, None, None,
                          None, "the startup log stated no KV pool on both arms")
    ratio = cand / base
    verdict = Verdict.PASS if ratio >= min_ratio else Verdict.FAIL
    return GateResult("kv_pool", verdict, base, cand, ratio, min_ratio, ratio, ratio, None,
                      f"{cand:,} vs {base:,} tokens: {ratio:.3f}x, needs >= {min_ratio:g}x")


def count_gate(gate: str, value: int, allowed: int, what: str) -> GateResult:
    verdict = Verdict.PASS if value <= allowed else Verdict.FAIL
    return GateResult(gate, verdict, None, float(value), float(value), float(allowed), None, None,
                      None, f"{value} {what} (allowed {allowed})")


def judge(base: ArmFigures, cand: ArmFigures, config: GateConfig) -> list[GateResult]:
    floor = config.noise_floor
    top = max(set(base.throughput) & set(cand.throughput), default=None)
    if top is None:
        aggregate = GateResult("aggregate", Verdict.UNKNOWN, None, None, None,
                               config.aggregate_min_ratio, None, None, None,
                               "no concurrency measured on both arms")
    else:
        aggregate = ratio_gate(f"aggregate@{top}", base.throughput[top], cand.throughput[top],
                               config.aggregate_min_ratio, higher_is_better=True,
                               noise=Noise(floor, config.drift), unit=" tok/s")
    cold = ratio_gate(
        "cold_ttft",
        Series(() if base.cold_ttft_ms is None else (base.cold_ttft_ms,)),
        Series(() if cand.cold_ttft_ms is None else (cand.cold_ttft_ms,)),
        config.cold_ttft_max_ratio, higher_is_better=False,
        noise=Noise(floor, config.drift, _cv(base.warm_ttft_ms, floor),
                    _cv(cand.warm_ttft_ms, floor)),
        unit=" ms", decide_unit=COLD_START_UNIT)
    return [
        aggregate,
        cold,
        hit_rate_gate(base.prefix_hit_rate, cand.prefix_hit_rate, config.prefix_hit_max_drop,
                      config.hit_rate_noise_floor),
        kv_gate(base.kv_tokens, cand.kv_tokens, config.kv_pool_min_ratio),
        count_gate("failed_requests", cand.failed_requests, config.max_failed_requests,
                   "failed requests"),
        hang_gate(cand),
    ]


def hang_gate(cand: ArmFigures) -> GateResult:
    """FAIL on a stall or outage the watchdog saw; UNKNOWN when it did not watch every run (it
    died, never started or never scraped: an unseen hang is no PASS); else PASS."""
    if cand.hangs or not cand.watch_gaps:
        return count_gate("hang", len(cand.hangs), 0, "stalls or outages seen by the watchdog")
    more = f" (and {len(cand.watch_gaps) - 1} more)" if len(cand.watch_gaps) > 1 else ""
    return GateResult("hang", Verdict.UNKNOWN, None, None, None, 0.0, None, None, None,
                      f"not watched: {cand.watch_gaps[0]}{more}")


def overall(results: Sequence[GateResult]) -> Verdict:
    verdicts = {r.verdict for r in results}
    if Verdict.FAIL in verdicts:
        return Verdict.FAIL
    if verdicts & {Verdict.INCONCLUSIVE, Verdict.UNKNOWN}:
        return Verdict.INCONCLUSIVE
    return Verdict.PASS


@dataclass(frozen=True, slots=True)
class Crossover:
    concurrency: int | None  # lowest concurrency where the candidate's mean falls below base's
    last_winning: int | None  # highest measured concurrency below it where the candidate held
    threshold: int | None  # batch size up to which to speculate (interpolated, floored)
    within_noise: bool  # the difference at the crossover lies inside the noise band
    ratios: Mapping[int, tuple[float, float, float]]  # concurrency -> (ratio, low, high)


def crossover(base: ArmFigures, cand: ArmFigures, floor: float,
              drift: float = 0.0) -> Crossover:
    levels = sorted(set(base.throughput) & set(cand.throughput))
    ratios: dict[int, tuple[float, float, float]] = {}
    for c in levels:
        r = ratio_gate("", base.throughput[c], cand.throughput[c], 1.0, higher_is_better=True,
                       noise=Noise(floor, drift))
        if r.value is not None and r.low is not None and r.high is not None:
            ratios[c] = (r.value, r.low, r.high)
    cross = next((c for c in levels if c in ratios and ratios[c][0] < 1.0), None)
    if cross is None:
        return Crossover(None, None, None, False, ratios)
    below = [c for c in levels if c < cross and c in ratios]
    last = below[-1] if below else None
    threshold = None
    if last is not None:
        # where the ratio crosses 1 between the two measured levels (linear in log concurrency)
        r0, r1 = ratios[last][0], ratios[cross][0]
        share = (r0 - 1.0) / (r0 - r1) if r0 != r1 else 0.0
        at = math.exp(math.log(last) + share * (math.log(cross) - math.log(last)))
        threshold = min(max(math.floor(at), last), cross - 1)
    return Crossover(cross, last, threshold, ratios[cross][2] >= 1.0, ratios)


def proposed_schedule(cross: Crossover, k: int, max_num_seqs: int,
                      method: str | None = None) -> Schedule | None:
    """`num_speculative_tokens_per_batch_size` from the crossover: draft K up to the threshold
    and nothing above it; K=1 above it for a drafter that keeps hidden state (the K=0 trap,
    rocmseat.speculation.advise.basis). None when no schedule helps (no crossover, or the
    candidate already
    loses at the lowest concurrency measured)."""
    if cross.concurrency is None or cross.threshold is None or k <= 0:
        return None
    return from_crossover(k, cross.threshold, max_num_seqs,
                          above=1 if keeps_hidden_state(method) else 0)


def k0_note(method: str | None, schedule: Schedule | None,
            candidate: Schedule | None = None) -> str:
    """What the gate says about K=0 tiers for a hidden-state drafter: the proposal's tier above
    the crossover, and the candidate seat's own schedule
    (rocmseat.speculation.advise.basis.seat_k0_trap)."""
    note = ""
    if schedule is not None and len(schedule) >= 2 and keeps_hidden_state(method):
        note = (f" Above {schedule[0][1]} requests the tier is K=1, not 0: the {method} drafter "
                "keeps hidden state that only its forward pass refreshes; skipping it at K=0 "
                "leaves it stale and acceptance collapses when K comes back (vllm#53426, "
                "TensorRT-LLM#16888). Measure a K=0 tier before preferring it.")
    trap = seat_k0_trap(method, candidate)
    return note + (f" The candidate: {trap}." if trap else "")
