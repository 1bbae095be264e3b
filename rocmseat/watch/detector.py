"""The acceptance detector of one replica: a gated one-sided CUSUM and the drafter-dead signature.

Method (docs/watch.md has the derivation and the simulated figures):

- Statistic: accepted tokens per draft, m = S/N, in windows pooled until they hold at least
  `min_drafts` drafts (few drafts never alarm, however bad they look).
- Like with like: the reference is the baseline's expected accepted tokens per draft at the
  window's effective K (Δdraft_tokens/Δdrafts), from the baseline per-position profile, so a
  schedule that cuts K under load is not a fault. A window mixing draft lengths is judged
  against the least value any mix with that mean K can give (the chord from K=1 to K_max,
  Baseline.accepted_per_draft_floor): a schedule can lower the reference, never raise it.
- Allowance for the workload mix: the in-control lower edge is mu_lo = rho * floor_b(K). Field
  figures (tokens per update 2.55 prose, 2.83 chat, 5.11 math, 5.43 file edits against a mixed
  3.3) put an hour of pure prose at 1.55/2.3 = 0.67 of the mixed baseline; rho = 0.55 leaves a
  margin below that and still sits above a drafter at AL 2.0 (1.0/2.3 = 0.43).
- Variance from the per-position counters: the window's per-draft variance of accepted tokens
  is exact from c_i (sum (2i+1) c_i / N - m^2), inflated by a design effect for drafts of one
  request being correlated, floored so a window of all-zero drafts still has a scale.
- z = (mu_lo - m) / sqrt(v * deff / N);  C = min(max(0, C + z - k), 2h);  fire at C >= h,
  resolve when C has stayed at 0 for `resolve_windows` judged windows. The cap keeps the
  resolve time after a long incident short; the hold stops flapping at the edge.
- Drafter dead: position-0 acceptance c_0/N <= `dead_p0` over at least `dead_min_drafts`
  drafts fires at once (no baseline needed: a drafter that no longer matches its target);
  resolves at >= `dead_resolve_p0`, or when the engine restarts (`restart`: a new process is
  judged on its own drafts).
- Without per-position counters (an SGLang page: accepted = emitted - verify steps; a llama.cpp
  build or slot without them; Reading.basis, docs/engines.md) the same CUSUM runs on the mean
  alone: the reference is the baseline's full-K accepted tokens per draft (pinned, stored, or
  learned from this process's own windows, kept in memory), the variance the baseline profile's
  (or the mean itself when there is no profile), floored. Drafter dead on the mean: m <=
  `dead_p0` (sound: c_0/N <= m). On SGLang the mean counts every finished request's tokens, so
  a request served without speculation inflates it: a collapse may be hidden, never invented.
- The other direction (`implausible`): a draft acceptance rate (accepted / drafted) >=
  `implausible_rate` over pools of >= `implausible_min_drafts` drafts for `implausible_windows`
  pools in a row is the signature of a repetition loop (vLLM PR #44487, which proposes a
  per-request acceptance histogram for it: very high acceptance means repetition, very low
  garbled output). A warning only: never a remediation trigger (rocmseat/watch/remediate/
  policy.py LADDER has no step on it). Windows holding the drafter canary's requests are not
  judged (its fixed prompts are its own traffic); a page without draft tokens (SGLang) is not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rocmseat.watch.baseline import Baseline, learned_baseline, pinned_baseline
from rocmseat.watch.window import Window


@dataclass(frozen=True, slots=True)
class DetectorParams:
    rho: float = 0.55
    reference_k: float = 0.5
    threshold_h: float = 8.0
    design_effect: float = 2.0
    variance_floor: float = 0.25
    min_drafts: float = 50.0
    dead_p0: float = 0.10
    dead_resolve_p0: float = 0.20
    dead_min_drafts: float = 50.0
    resolve_windows: int = 6
    learn_min_drafts: float = 3000.0
    learn_min_s: float = 900.0
    implausible_rate: float = 0.98
    implausible_min_drafts: float = 500.0
    implausible_windows: int = 3


@dataclass(frozen=True, slots=True)
class SpecVerdict:
    evaluated: bool
    drop: bool
    dead: bool
    cusum: float
    z: float | None
    judged: Window | None
    expected_al: float | None
    lower_al: float | None
    learning: bool
    learned: Baseline | None = None
    implausible: bool = False
    mean_only: bool = False  # judged without per-position counters (Reading.basis)


@dataclass(slots=True)
class SpecDetector:
    """Per-replica detector state. `observe` is deterministic: windows in, verdict out."""

    params: DetectorParams = field(default_factory=DetectorParams)
    baseline: Baseline | None = None
    key: str = "unkeyed"
    pinned_al: float | None = None
    cusum: float = 0.0
    drop: bool = False
    dead: bool = False
    _pending: Window | None = None
    _dead_pending: Window | None = None
    _learn: Window | None = None
    _learn_windows: int = 0
    _quiet_windows: int = 0
    implausible: bool = False
    _high_pending: Window | None = None
    _high_pools: int = 0
    _mean_learned: float | None = None  # accepted per draft learned without per-position counts

    def reset(self, baseline: Baseline | None, key: str) -> None:
        """A new config key: forget the baseline, the learning pool and the CUSUM."""
        self.baseline, self.key = baseline, key
        self.cusum, self.drop = 0.0, False
        self._pending = self._learn = self._dead_pending = None
        self._learn_windows = self._quiet_windows = 0
        self._mean_learned = None

    def restart(self) -> None:
        """The engine restarted: its drafts so far say nothing about the new process. Clear the
        verdicts and every pool (the baseline, a property of the config key, stays)."""
        self.cusum, self.drop, self.dead = 0.0, False, False
        self._pending = self._learn = self._dead_pending = None
        self._learn_windows = self._quiet_windows = 0
        self.implausible, self._high_pending, self._high_pools = False, None, 0

    def observe(self, window: Window, now_s: float, *, canary: bool = False) -> SpecVerdict:
        """Judge one window. `canary`: the window held the drafter canary's requests (taken out
        of its counts already): not judged for implausibly high acceptance."""
        if window.spec_present and not canary:
            self._judge_high(window)
        if not window.spec_present:
            return self._verdict(False, None, None, None)
        if not window.accepted_per_pos:
            return self._observe_mean(window, now_s)
        if self.baseline is None and self.pinned_al is not None:
            self.baseline = pinned_baseline(self.pinned_al, window.num_positions, self.key)
        self._judge_dead(window)
        self._pending = window if self._pending is None else self._pending.merge(window)
        if self._pending.drafts < self.params.min_drafts:
            return self._verdict(False, None, None, None)
        judged, self._pending = self._pending, None
        if self.baseline is None:
            learned = self._learn_from(judged, now_s)
            return self._verdict(True, None, judged, None, learned=learned)
        p = self.params
        mu_b = self.baseline.accepted_per_draft(judged.effective_k)
        mu_lo = p.rho * self.baseline.accepted_per_draft_floor(judged.effective_k)
        mean = judged.accepted_tokens / judged.drafts
        variance = max(judged.accepted_per_draft_variance or 0.0, p.variance_floor)
        z = (mu_lo - mean) / math.sqrt(variance * p.design_effect / judged.drafts)
        self.cusum = min(max(0.0, self.cusum + z - p.reference_k), 2 * p.threshold_h)
        self._quiet_windows = self._quiet_windows + 1 if self.cusum == 0.0 else 0
        if self.cusum >= p.threshold_h:
            self.drop = True
        elif self._quiet_windows >= p.resolve_windows:
            self.drop = False
        return self._verdict(True, z, judged, (1.0 + mu_b, 1.0 + mu_lo))

    def _judge_high(self, window: Window) -> None:
        if window.draft_tokens <= 0 and window.drafts <= 0:
            return  # nothing drafted: an idle window neither keeps nor breaks the run
        pool = window if self._high_pending is None else self._high_pending.merge(window)
        if pool.drafts < self.params.implausible_min_drafts:
            self._high_pending = pool
            return
        self._high_pending = None
        rate = pool.draft_acceptance_rate
        if rate is None:  # no draft tokens on the page (SGLang): cannot say
            return
        if rate >= self.params.implausible_rate:
            self._high_pools += 1
            if self._high_pools >= self.params.implausible_windows:
                self.implausible = True
        else:
            self._high_pools = 0
            self.implausible = False

    def _mean_reference(self) -> tuple[float, float] | None:
        """(accepted per draft, its per-draft variance) of the reference without per-position
        counters, or None while there is none."""
        p = self.params
        if self.baseline is not None:
            rates = self.baseline.position_rates
            mu = self.baseline.accepted_per_draft(None)
            second = sum((2 * i + 1) * r for i, r in enumerate(rates))
            return mu, max(second - mu * mu, p.variance_floor)
        if self.pinned_al is not None:
            mu = self.pinned_al - 1.0
            return mu, max(mu, p.variance_floor)
        if self._mean_learned is not None:
            return self._mean_learned, max(self._mean_learned, p.variance_floor)
        return None

    def _observe_mean(self, window: Window, now_s: float) -> SpecVerdict:
        p = self.params
        self._pending = window if self._pending is None else self._pending.merge(window)
        if self._pending.drafts < p.min_drafts:
            return self._verdict(False, None, None, None, mean_only=True)
        judged, self._pending = self._pending, None
        mean = judged.accepted_tokens / judged.drafts
        if mean <= p.dead_p0:
            self.dead = True
        elif mean >= p.dead_resolve_p0:
            self.dead = False
        reference = self._mean_reference()
        if reference is None:
            self._learn_mean(judged)
            return self._verdict(True, None, judged, None, mean_only=True)
        mu_b, variance = reference
        mu_lo = p.rho * mu_b
        z = (mu_lo - mean) / math.sqrt(variance * p.design_effect / judged.drafts)
        self.cusum = min(max(0.0, self.cusum + z - p.reference_k), 2 * p.threshold_h)
        self._quiet_windows = self._quiet_windows + 1 if self.cusum == 0.0 else 0
        if self.cusum >= p.threshold_h:
            self.drop = True
        elif self._quiet_windows >= p.resolve_windows:
            self.drop = False
        return self._verdict(True, z, judged, (1.0 + mu_b, 1.0 + mu_lo), mean_only=True)

    def _learn_mean(self, judged: Window) -> None:
        if self.dead:
            return
        self._learn = judged if self._learn is None else self._learn.merge(judged)
        pool = self._learn
        if pool.drafts < self.params.learn_min_drafts or pool.duration_s < self.params.learn_min_s:
            return
        self._mean_learned = pool.accepted_tokens / pool.drafts
        self._learn = None

    def _judge_dead(self, window: Window) -> None:
        pool = window if self._dead_pending is None else self._dead_pending.merge(window)
        if pool.drafts < self.params.dead_min_drafts:
            self._dead_pending = pool
            return
        self._dead_pending = None
        p0 = pool.accepted_per_pos[0] / pool.drafts
        if p0 <= self.params.dead_p0:
            self.dead = True
        elif p0 >= self.params.dead_resolve_p0:
            self.dead = False

    def _learn_from(self, judged: Window, now_s: float) -> Baseline | None:
        # Only full-K windows teach the profile, and never a window with the dead signature:
        # learning AL 1.08 from a stale-cache launch would make the fault the norm.
        if self.dead or judged.effective_k is None:
            return None
        # Full K within 0.1 token: grammar-invalidated draft tokens are subtracted from
        # num_draft_tokens (vllm/v1/core/sched/scheduler.py), so structured output sits just below.
        if judged.effective_k < judged.num_positions - 0.1:
            return None
        if judged.accepted_per_pos[0] / judged.drafts <= self.params.dead_resolve_p0:
            return None
        self._learn = judged if self._learn is None else self._learn.merge(judged)
        self._learn_windows += 1
        pool = self._learn
        if pool.drafts < self.params.learn_min_drafts or pool.duration_s < self.params.learn_min_s:
            return None
        self.baseline = learned_baseline(
            drafts=pool.drafts, per_pos=pool.accepted_per_pos, accepted=pool.accepted_tokens,
            windows=self._learn_windows, key=self.key, now_s=now_s,
        )
        self._learn, self._learn_windows = None, 0
        return self.baseline

    def _verdict(
        self,
        evaluated: bool,
        z: float | None,
        judged: Window | None,
        levels: tuple[float, float] | None,
        *,
        learned: Baseline | None = None,
        mean_only: bool = False,
    ) -> SpecVerdict:
        return SpecVerdict(
            evaluated=evaluated,
            drop=self.drop,
            dead=self.dead,
            cusum=self.cusum,
            z=z,
            judged=judged,
            expected_al=levels[0] if levels else None,
            lower_al=levels[1] if levels else None,
            learning=(self._mean_reference() is None) if mean_only else self.baseline is None,
            learned=learned,
            implausible=self.implausible,
            mean_only=mean_only,
        )
