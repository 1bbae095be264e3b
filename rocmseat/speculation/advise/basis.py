"""What the advisor knows: every proposed tier's basis, the model checked against every measured
arm, and the K=0 rules (pure).

A tier `[start, end, K]` is
- `measured` when a gate arm ran K at a batch size inside the range and it held against every
  other arm measured at that batch size (within the arms' noise);
- `model` when no arm ran K there and K lies inside the measured K (E(K) from the counters, the
  step cost interpolated);
- `extrapolated` when K or the range lies beyond what was measured
(rocmseat.speculation.advise.decide says
  which part).
A measured arm that ran K there and lost contradicts the tier: the advisor does not propose it
(it asks the decision again without that K in that range).

K = 0 inside a schedule is not the base: the drafter stays loaded, and vLLM keeps running its
forward pass at K = 0 to keep its KV cache in sync (vllm/v1/spec_decode/llm_base_proposer.py,
`propose`; vllm-project/vllm#49548, #53426), so a K=0 tier need not return to the speed of a seat
without a drafter. A drafter that keeps hidden state (EAGLE, EAGLE-3, MTP, DFlash) goes stale when
its sync is skipped at K = 0 and acceptance collapses when K comes back
(NVIDIA/TensorRT-LLM#16888 floors such schedules at K = 1). So K = 0 tiers are not proposed when
a measured K=0 tier ran slower than the base, nor for such drafters unless a measured K=0 tier
held (docs/spec.md "What the advisor knows").

Confidence: the bootstrap resamples the counters and perturbs the step costs; it does not know
how far the model itself is off. The model's error on the measured arms (RMS of the relative
misses) is added to the bootstrap's spread of the margin between a tier's K and the runner-up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rocmseat.speculation.advise.decide import MAX_K, Advice, Allowed, Band
from rocmseat.speculation.advise.modelerror import ModelError, confidence, widened
from rocmseat.speculation.advise.schedule import lookup

NOISE_FLOOR = 0.02  # the gate's --noise-floor default: one run's spread is at least this
ARM_DRIFT = 0.05  # the gate's --drift default: two arms measured minutes apart differ this much

# Methods whose drafter carries state across steps that only its forward pass refreshes
# (vLLM 0.33.0 EagleModelTypes and DFlash/DSpark, vllm/config/speculative.py; the `*_mtp` names
# are rewritten to `mtp`).
HIDDEN_STATE_METHODS = frozenset({"eagle", "eagle3", "mtp", "dflash", "dspark"})

MEASURED, MODEL, EXTRAPOLATED = "measured", "model", "extrapolated"


def keeps_hidden_state(method: str | None) -> bool:
    return method is not None and (method in HIDDEN_STATE_METHODS or method.endswith("_mtp"))


@dataclass(frozen=True, slots=True)
class Observation:
    """One measured (arm, batch size) point: the repeats' mean against the model."""

    arm: str
    batch: int
    k: int  # the K that ran at this batch size (a schedule's tier, not its maximum)
    drafter: bool  # the arm had a drafter loaded
    measured_tok_s: float
    noise: float  # relative: twice the repeats' coefficient of variation, at least NOISE_FLOOR
    predicted_tok_s: float

    @property
    def miss(self) -> float:
        """measured / predicted - 1."""
        if not self.predicted_tok_s > 0 or not math.isfinite(self.predicted_tok_s):
            return math.nan
        return self.measured_tok_s / self.predicted_tok_s - 1.0

    @property
    def misses(self) -> bool:
        """The model is off by more than the arm's noise here."""
        return math.isfinite(self.miss) and abs(self.miss) > self.noise

    def loses_to(self, other: Observation) -> bool:
        band = math.sqrt(self.noise ** 2 + other.noise ** 2 + ARM_DRIFT ** 2)
        return self.measured_tok_s < other.measured_tok_s * (1.0 - band)


def noise_of(mean: float, sd: float | None) -> float:
    if sd is None or not mean > 0 or not math.isfinite(sd):
        return NOISE_FLOOR
    return max(NOISE_FLOOR, 2.0 * sd / mean)


@dataclass(frozen=True, slots=True)
class Tier:
    start: int
    end: int
    k: int
    basis: str  # measured | model | extrapolated
    evidence: str  # which arm at which batch sizes, or why there is none
    contradicted: str  # '' or which measurement lost
    confidence: float  # P(K beats the runner-up) with the model's error added
    band: Band
    lost_at: tuple[int, ...] = ()  # batch sizes where an arm ran this K and lost
    # the stated 90 % interval of the gain: the bootstrap's for a measured tier, with the model's
    # left-out error (rocmseat.speculation.advise.modelerror) for a model or extrapolated one
    gain_low: float = math.nan
    gain_high: float = math.nan
    tie: str = ""  # '' or why this tier's gain is not measurable (rocmseat...advise.ties)


@dataclass(frozen=True, slots=True)
class Decision:
    advice: Advice  # the proposal, with what the measurements rule out
    free: Advice  # the model's unconstrained staircase
    tiers: tuple[Tier, ...]
    observations: tuple[Observation, ...]
    model_error: float | None  # RMS of the relative misses over the observations, else the fit's
    model_error_from: str  # which of the two
    k0_allowed: bool
    notes: tuple[str, ...]
    left_out: ModelError | None = None  # the model's error on what it was not fitted to

    @property
    def unmeasured(self) -> tuple[Tier, ...]:
        """The proposed tiers no arm measured (a tied tier proposes nothing: the seat keeps
        its K there)."""
        return tuple(t for t in self.tiers if t.basis != MEASURED and not t.tie)


def _ranges(batches: Sequence[int]) -> str:
    return ", ".join(str(b) for b in sorted(set(batches)))


def _tier(band: Band, obs: Sequence[Observation], drafter: bool,
          model_error: float | None, *, error: ModelError | None = None,
          floor: Callable[[int, int], float | None] | None = None) -> Tier:
    here = [o for o in obs if o.drafter == drafter and o.k == band.k
            and band.start <= o.batch <= band.end]
    lost = [(o, q) for o in here for q in obs if q.batch == o.batch and o.loses_to(q)]
    contradicted = "; ".join(
        f"{o.arm} ran K={o.k} at {o.batch}: {o.measured_tok_s:.1f} tok/s against {q.arm}'s "
        f"{q.measured_tok_s:.1f}" for o, q in lost[:3])
    if band.extrapolated:
        basis, evidence = EXTRAPOLATED, band.why_extrapolated
    elif here and not lost:
        arms = sorted({o.arm for o in here})
        basis = MEASURED
        evidence = f"{' and '.join(arms)} ran K={band.k} at concurrency " \
                   f"{_ranges([o.batch for o in here])} and held"
    else:
        basis = MODEL
        evidence = (f"no gate arm ran K={band.k} at batch sizes {band.start}-{band.end}: "
                    "predicted from the measured acceptance and step costs") if not here \
            else contradicted
    low, high = band.gain_low, band.gain_high
    if error is not None and basis != MEASURED:
        # the model's error measured on what it was not fitted to, in the interval and the
        # confidence (rocmseat.speculation.advise.modelerror)
        interval = widened(band.gain, band.gain_low, band.gain_high, error,
                           floor=floor(band.start, band.k) if floor else None,
                           extrapolated=basis == EXTRAPOLATED)
        low, high = interval.low, interval.high
        conf = (1.0 if band.runner_up is None
                else confidence(band.margin, band.margin_sd, error))
    else:
        conf = _confidence(band, model_error)
    return Tier(band.start, band.end, band.k, basis, evidence, contradicted, conf, band,
                tuple(sorted({o.batch for o, _ in lost})), low, high)


def _confidence(band: Band, model_error: float | None) -> float:
    sd = math.hypot(band.margin_sd, model_error or 0.0)
    if band.runner_up is None or math.isinf(band.margin):
        return 1.0
    if sd == 0.0:
        return 1.0 if band.margin > 0 else 0.5
    return 0.5 * (1.0 + math.erf(band.margin / (sd * math.sqrt(2.0))))


def _model_error(obs: Sequence[Observation]) -> float | None:
    misses = [o.miss for o in obs if math.isfinite(o.miss)]
    if not misses:
        return None
    return math.sqrt(sum(m * m for m in misses) / len(misses))


def seat_k0_trap(method: str | None, schedule: Sequence[Sequence[int]] | None) -> str:
    """The K=0 trap in a seat's own schedule: '' or what is wrong with it."""
    if not keeps_hidden_state(method) or not schedule:
        return ""
    zero = [f"{start}-{end}" for start, end, k in schedule if k == 0]
    if not zero:
        return ""
    return (f"the seat's schedule {[list(e) for e in schedule]} turns the {method} drafter off "
            f"(K=0) at batch sizes {', '.join(zero)}: the K=0 trap (its hidden state goes stale "
            "and acceptance collapses when K comes back, vllm#53426, TensorRT-LLM#16888); use "
            "K=1 there unless a gate arm measured that K=0 tier paying")


def k0_rule(obs: Sequence[Observation], method: str | None) -> tuple[bool, str]:
    """(K=0 tiers may be proposed, why not). A K=0 tier with the drafter loaded pays when it
    held against the base measured at the same batch size."""
    base = [o for o in obs if not o.drafter]
    zero = [o for o in obs if o.drafter and o.k == 0]
    slow = [(o, b) for o in zero for b in base if b.batch == o.batch and o.loses_to(b)]
    held = [o for o in zero if not any(o is s for s, _ in slow)
            and any(b.batch == o.batch for b in base)]
    if slow:
        o, b = max(slow, key=lambda pair: pair[0].batch)
        return False, (
            f"K=0 tiers measured slow: {o.arm} ran K=0 at concurrency "
            f"{_ranges([s.batch for s, _ in slow])} below the base ({o.measured_tok_s:.1f} "
            f"against {b.measured_tok_s:.1f} tok/s at {o.batch}, "
            f"{o.measured_tok_s / b.measured_tok_s:.2f}x; the model predicted "
            f"{o.predicted_tok_s:.1f}): with the drafter loaded its forward pass keeps running "
            "at K=0 (vllm#53426), so no K=0 tier is proposed; the floor is K=1")
    if keeps_hidden_state(method) and not held:
        return False, (
            f"K=0 trap: the {method} drafter keeps hidden state that only its forward pass "
            "refreshes; a K=0 tier that skips it leaves that state stale and acceptance collapses "
            "when K comes back (vllm#53426, TensorRT-LLM#16888), and keeping the sync costs "
            "4-11 % of decode; no measured K=0 tier held, so the floor is K=1")
    return True, ""


def decide(run: Callable[[Allowed | None], Advice], obs: Sequence[Observation],
           method: str | None, predict: Callable[[int, int], float], *,
           fit_error: float | None = None, left_out: ModelError | None = None,
           floor: Callable[[int, int], float | None] | None = None) -> Decision:
    """The staircase, then again without what the measurements rule out, until nothing
    proposed is contradicted. Without measured arms the model's error is the step-cost fit's
    (`fit_error`, relative RMS over the measured cells). `left_out`: the model's error on
    measurements left out of its fit, in the interval and confidence of every model or
    extrapolated tier, with `floor(batch, K)` the monotone lower bound of the gain."""
    free = run(None)
    error = _model_error(obs)
    error_from = "the measured arms"
    if error is None:
        error, error_from = fit_error, "the step-cost fit (no measured arms)"
    notes: list[str] = []
    speculates = max(free.best_k) > 0
    k0_ok, why = k0_rule(obs, method) if speculates else (True, "")
    excluded: set[tuple[int, int, int]] = set()

    def allowed(batch: int, k: int) -> bool:
        if k == 0 and not k0_ok:
            return False
        return not any(s <= batch <= e and k == kk for s, e, kk in excluded)

    advice = free if k0_ok else run(allowed)
    if why:
        notes.append(why)
    def judged(advice: Advice) -> tuple[Tier, ...]:
        drafter = advice.num_speculative_tokens is not None
        return tuple(_tier(b, obs, drafter, error, error=left_out, floor=floor)
                     for b in advice.bands)

    # each round rules out at least one (range, K) of at most MAX_K + 1 per batch size; a
    # contradiction left after the last round stays in the tier's evidence
    tiers = judged(advice)
    for _ in range(MAX_K + 2):
        bad = [t for t in tiers if t.contradicted]
        if not bad:
            break
        for t in bad:
            lo, hi = _spoken_for(t, obs)  # t.lost_at is not empty: t is contradicted
            notes.append(f"batch {lo}-{hi} K={t.k} not proposed: {t.contradicted}")
            excluded.add((lo, hi, t.k))
        advice = run(allowed)
        tiers = judged(advice)
    if not k0_ok:
        zero = [b + 1 for b, k in enumerate(free.best_k) if k == 0]
        if zero:
            at = zero[-1]
            k_now = advice.best_k[at - 1]
            loss = 1.0 - predict(at, k_now) / predict(at, 0)
            notes.append(
                f"batch sizes {zero[0]}-{zero[-1]}: the model's best is no drafting (K=0), which "
                f"a schedule does not deliver here; K={k_now} is predicted {loss:.0%} below a "
                "seat without a drafter at "
                f"{at}: whether to speculate at all is the gate's verdict")
    return Decision(advice, free, tiers, tuple(obs), error, error_from, k0_ok, tuple(notes),
                    left_out)


def _spoken_for(tier: Tier, obs: Sequence[Observation]) -> tuple[int, int]:
    """The batch sizes of `tier` that its losing measurements speak for: from just above the
    measured batch size below the first loss to just below the one above the last."""
    measured = sorted({o.batch for o in obs})
    below = [b for b in measured if b < tier.lost_at[0]]
    above = [b for b in measured if b > tier.lost_at[-1]]
    return (max(tier.start, below[-1] + 1 if below else tier.start),
            min(tier.end, above[0] - 1 if above else tier.end))


def current_table(k_now: int | None, schedule: Sequence[Sequence[int]] | None,
                  max_num_seqs: int) -> tuple[int, ...]:
    """The K a seat's [drafter] drafts at batch sizes 1..max_num_seqs (0: no drafter)."""
    if not k_now:
        return (0,) * max_num_seqs
    if schedule:
        return lookup(schedule, max_num_seqs, k_now)
    return (k_now,) * max_num_seqs


@dataclass(frozen=True, slots=True)
class WritePlan:
    """What `--write` writes into a seat whose [drafter] drafts `current` now."""

    table: tuple[int, ...]  # K per batch size to write (index 0 = batch size 1)
    changes: bool  # the table differs from the seat's
    held_back: bool  # a model or extrapolated tier was not written (no --accept-model)
    basis: str  # one line per tier: its basis, and the K kept where it was not written


def write_plan(decision: Decision, current: Sequence[int], *, accept_model: bool) -> WritePlan:
    table = writable(decision, current, accept_model=accept_model)
    held = not accept_model and bool(decision.unmeasured)

    def kept(t: Tier) -> str:
        ks = ",".join(str(k) for k in sorted(set(table[t.start - 1:t.end])))
        if t.tie:
            return f" (a tie: batch sizes {t.start}-{t.end} keep K={ks})"
        if t.basis == MEASURED or accept_model:
            return ""
        return f" (not written: batch sizes {t.start}-{t.end} keep K={ks})"

    basis = "\n".join(f"  batch {t.start}-{t.end} K={t.k}: {t.basis}{kept(t)}"
                      for t in decision.tiers)
    return WritePlan(table, tuple(table) != tuple(current[:len(table)]), held, basis)


def writable(decision: Decision, current: Sequence[int], *, accept_model: bool
             ) -> tuple[int, ...]:
    """The K per batch size `--write` may write: the proposal's measured tiers, and where a tier
    is only the model's, the seat's current K (`current`, index 0 = batch size 1) unless
    `accept_model`."""
    proposal = list(decision.advice.best_k)
    out = list(current[:len(proposal)]) + [current[-1] if current else 0] * max(
        0, len(proposal) - len(current))
    for t in decision.tiers:
        # a tied tier keeps the written seat's K (rocmseat.speculation.advise.ties)
        if not t.tie and (t.basis == MEASURED or accept_model):
            for b in range(t.start, t.end + 1):
                out[b - 1] = proposal[b - 1]
    return tuple(out)
