"""Acceptance from vLLM's per-position counters (pure): E(k), the constant-acceptance estimate,
and whether acceptance really is geometric.

Counter semantics (vllm/v1/spec_decode/metrics.py, SpecDecodingStats.observe_draft): over a
window N = Δnum_drafts, D = Δnum_draft_tokens, S = Δnum_accepted_tokens and
c_i = Δnum_accepted_tokens_per_pos{position=i}, the drafts whose first i+1 tokens were all
accepted (c_{-1} = N). For a chain drafter whose drafts all had K tokens (D = K N):

- E(k) for every k <= K needs no model: truncating a draft at k keeps the outcomes of its first
  k positions, so E(k) = 1 + sum_{i<k} c_i / N (tokens per verify pass, bonus token included);
- the histogram of accepted counts is exact: n_a = c_{a-1} - c_a (a < K), n_K = c_{K-1};
- under a constant per-token acceptance alpha (capped geometric) the MLE is
  alpha = S / (N + S - c_{K-1}) (vLLM's "acceptance rate" S/D is not alpha and changes with K);
- the likelihood-ratio test of constant against position-specific rates alpha_i = c_i/c_{i-1}
  is chi-square with K-1 degrees of freedom; rising alpha_i is heterogeneity (easy and hard
  contexts mixed), falling alpha_i is draft-error compounding;
- Pearson's X^2 of the accepted-count histogram against the geometric: K+1 cells, their total
  fixed and alpha fitted, so K-1 degrees of freedom. When either test rejects at 5 % the advice
  says so (`fit_note`) instead of leaning on the model silently;
- beyond K only a model can say: the Beta-geometric (alpha ~ Beta(a, b) per draft), which fits
  over-dispersed acceptance, or the geometric. The extrapolation is anchored to the measured
  E(K): E(k) = E(K) + (E_model(k) - E_model(K)) for k > K, so one more drafted token never
  "lowers" the tokens per pass below what was measured (the model's increments are >= 0).
  Those values are labelled extrapolation.

docs/architecture.md "Speculation facts"; docs/spec.md "The model".
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from rocmseat.speculation.stats import chi2_sf, nelder_mead
from rocmseat.watch.metrics import PageError, check_window_counts

GOF_LEVEL = 0.05  # a goodness-of-fit test below this p rejects the geometric model

# Up to this share of untried positions (n-gram misses, max-model-len truncation, a per-batch
# schedule) the per-position counters are still read as full-length drafts.
MAX_SHORTFALL = 0.05


class CountersError(ValueError):
    """Counters that cannot come from vLLM (negative, increasing with position, S != sum c_i)."""


@dataclass(frozen=True, slots=True)
class Counters:
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    per_position: tuple[float, ...]

    @property
    def k(self) -> int:
        return len(self.per_position)

    def __add__(self, other: Counters) -> Counters:
        width = max(self.k, other.k)
        pos = tuple((self.per_position[i] if i < self.k else 0.0)
                    + (other.per_position[i] if i < other.k else 0.0) for i in range(width))
        return Counters(self.drafts + other.drafts, self.draft_tokens + other.draft_tokens,
                        self.accepted_tokens + other.accepted_tokens, pos)


def check_counters(c: Counters) -> None:
    """Counters one vLLM server can produce: finite whole counts >= 0 (a delta of counters of
    counts; `drafts = 1e-300` is no window), and the invariants the watchdog applies to every
    window, with its slack (rocmseat.watch.metrics.check_window_counts: one rule for both)."""
    values = (c.drafts, c.draft_tokens, c.accepted_tokens, *c.per_position)
    if any(not math.isfinite(v) or v < 0 for v in values):
        raise CountersError("a spec-decode counter delta is negative or not finite")
    if any(v != math.floor(v) for v in values):
        raise CountersError("a spec-decode counter delta is not a whole number (counters count "
                            "drafts and tokens)")
    try:
        check_window_counts(c.drafts, c.draft_tokens, c.accepted_tokens, c.per_position)
    except PageError as exc:
        raise CountersError(exc.message.removeprefix("impossible window: ")) from None


@dataclass(frozen=True, slots=True)
class Fit:
    name: str  # "geometric" or "beta-geometric"
    params: tuple[float, ...]  # (alpha,) or (a, b)
    log_likelihood: float


@dataclass(frozen=True, slots=True)
class Acceptance:
    k: int
    drafts: float
    shortfall: float  # 1 - D / (K N): share of draft positions never tried
    alpha: float  # constant-acceptance MLE
    alpha_se: float  # sqrt(alpha (1 - alpha) / trials): optimistic (requests are clustered)
    trials: float
    conditional: tuple[float | None, ...]  # alpha_i = c_i / c_{i-1}
    e_measured: tuple[float, ...]  # E(1..K), model-free
    histogram: tuple[float, ...]  # n_0 .. n_K
    geometric: Fit
    beta_geometric: Fit | None
    lrt_g: float | None  # constant vs position-specific, chi-square(K-1)
    lrt_p: float | None
    pearson_x2: float | None  # the histogram against the geometric
    pearson_df: int | None  # K - 1
    pearson_p: float | None
    trend: str  # "rising", "falling", "flat" or "single position"
    extrapolation_model: str  # the fit used beyond K

    @property
    def geometric_rejected(self) -> bool:
        """A goodness-of-fit test (the LRT or Pearson's) rejects the geometric model at 5 %."""
        return any(p is not None and p < GOF_LEVEL for p in (self.lrt_p, self.pearson_p))

    @property
    def fit_note(self) -> str:
        """What the goodness-of-fit tests say, in one sentence for the advice."""
        if self.lrt_p is None or self.pearson_p is None:
            return ("the geometric model cannot be tested with one measured position (K=1); "
                    "extrapolation beyond K=1 uses it untested")
        tests = (f"LRT G = {self.lrt_g:.2f}, p = {self.lrt_p:.3g}; Pearson X^2 = "
                 f"{self.pearson_x2:.2f} on {self.pearson_df} df, p = {self.pearson_p:.3g}")
        if not self.geometric_rejected:
            return f"the geometric model fits ({tests})"
        beyond = (f"extrapolation beyond K={self.k} uses the Beta-geometric model, which fits "
                  "better by a likelihood-ratio test" if self.extrapolation_model
                  == "beta-geometric" else f"extrapolation beyond K={self.k} uses it anyway "
                  "(the Beta-geometric fits no better): read E(k) and every K beyond "
                  f"{self.k} with caution")
        return (f"the geometric model does not fit these counts ({tests}; conditional rates "
                f"{self.trend}): {beyond}; the staircase's alpha thresholds assume the geometric "
                "model")

    def e(self, k: int) -> float:
        """E(k): measured for k <= K; beyond it the measured E(K) plus the extrapolation
        model's increments (anchored: never below the measured value)."""
        if k <= 0:
            return 1.0
        if k <= self.k:
            return self.e_measured[k - 1]
        return self.e_measured[-1] + max(self.e_model(k) - self.e_model(self.k), 0.0)

    def e_model(self, k: int) -> float:
        """The extrapolation model's own E(k) (not anchored)."""
        if self.extrapolation_model == "beta-geometric" and self.beta_geometric is not None:
            a, b = self.beta_geometric.params
            return 1.0 + sum(_moments(a, b, k)[1:])
        return expected_tokens(self.alpha, k)

    def is_extrapolated(self, k: int) -> bool:
        return k > self.k


def expected_tokens(alpha: float, k: int) -> float:
    """E(k) = (1 - alpha^(k+1)) / (1 - alpha) (Leviathan et al. 2023, eq. 1)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def histogram(c: Counters) -> tuple[float, ...]:
    out = []
    previous = c.drafts
    for count in c.per_position:
        out.append(max(previous - count, 0.0))
        previous = count
    out.append(previous)
    return tuple(out)


def _xlogy(x: float, y: float) -> float:
    return 0.0 if x == 0 else x * math.log(y)


def _geometric_ll(c: Counters, alpha: float) -> float:
    total = 0.0
    previous = c.drafts
    for count in c.per_position:
        total += _xlogy(count, alpha) + _xlogy(previous - count, 1.0 - alpha)
        previous = count
    return total


def _moments(a: float, b: float, k: int) -> list[float]:
    """m_i = E[alpha^i] for alpha ~ Beta(a, b), i = 0..k."""
    out = [1.0]
    for t in range(k):
        out.append(out[-1] * (a + t) / (a + b + t))
    return out


def _beta_geometric_ll(hist: Sequence[float], a: float, b: float) -> float:
    k = len(hist) - 1
    m = _moments(a, b, k)
    total = 0.0
    for j, n in enumerate(hist):
        p = m[j] - m[j + 1] if j < k else m[k]
        if n > 0:
            if p <= 0:
                return -math.inf
            total += n * math.log(p)
    return total


def _fit_beta_geometric(hist: Sequence[float], alpha: float) -> Fit | None:
    if len(hist) < 3 or sum(hist) <= 0:
        return None  # K = 1: two parameters from one free cell
    start_alpha = min(max(alpha, 0.02), 0.98)

    def loss(p: Sequence[float]) -> float:
        a, b = math.exp(p[0]), math.exp(p[1])
        ll = _beta_geometric_ll(hist, a, b)
        return -ll if math.isfinite(ll) else 1e300

    best = nelder_mead(loss, [math.log(start_alpha * 4), math.log((1 - start_alpha) * 4)])
    a, b = math.exp(best[0]), math.exp(best[1])
    return Fit("beta-geometric", (a, b), _beta_geometric_ll(hist, a, b))


def estimate(c: Counters) -> Acceptance:
    """The acceptance picture of one window of constant K (CountersError when impossible)."""
    check_counters(c)
    if c.k == 0 or c.drafts <= 0:
        raise CountersError("no drafts in the window: nothing to estimate")
    n = c.drafts
    k = c.k
    shortfall = max(0.0, 1.0 - c.draft_tokens / (k * n))
    s = c.accepted_tokens
    trials = n + s - c.per_position[-1]
    alpha = s / trials if trials > 0 else 1.0
    alpha_se = math.sqrt(alpha * (1 - alpha) / trials) if trials > 0 else 0.0
    conditional: list[float | None] = []
    previous = n
    for count in c.per_position:
        conditional.append(count / previous if previous > 0 else None)
        previous = count
    e_measured = []
    running = 1.0
    for count in c.per_position:
        running += count / n
        e_measured.append(running)
    hist = histogram(c)
    geo = Fit("geometric", (alpha,), _geometric_ll(c, alpha))
    g = p = x2 = x2_p = None
    x2_df: int | None = None
    if k >= 2:
        full = 0.0
        previous = n
        for count in c.per_position:
            rate = count / previous if previous > 0 else 0.0
            full += _xlogy(count, rate) + _xlogy(previous - count, 1.0 - rate)
            previous = count
        g = max(0.0, 2.0 * (full - geo.log_likelihood))
        p = chi2_sf(g, k - 1)
        expected = [n * alpha**a * (1 - alpha) for a in range(k)] + [n * alpha**k]
        x2 = sum((o - e) ** 2 / e for o, e in zip(hist, expected, strict=True) if e > 0)
        x2_df = k - 1  # K+1 cells, less their fixed total and the fitted alpha
        x2_p = chi2_sf(x2, x2_df)
    beta = _fit_beta_geometric(hist, alpha)
    # Beyond K: the Beta-geometric when it explains the counts better than chance (LR test,
    # 1 df, 5 %), else the simpler geometric.
    use_beta = beta is not None and 2 * (beta.log_likelihood - geo.log_likelihood) > 3.841
    return Acceptance(
        k=k, drafts=n, shortfall=shortfall, alpha=alpha, alpha_se=alpha_se, trials=trials,
        conditional=tuple(conditional), e_measured=tuple(e_measured), histogram=hist,
        geometric=geo, beta_geometric=beta, lrt_g=g, lrt_p=p, pearson_x2=x2,
        pearson_df=x2_df, pearson_p=x2_p, trend=_trend(conditional),
        extrapolation_model="beta-geometric" if use_beta else "geometric",
    )


def _trend(conditional: Sequence[float | None]) -> str:
    known = [v for v in conditional if v is not None]
    if len(known) < 2:
        return "single position"
    step = known[-1] - known[0]
    if abs(step) < 0.02:
        return "flat"
    return "rising" if step > 0 else "falling"


def _binomial(rng: random.Random, n: float, p: float) -> float:
    """A Binomial(n, p) draw whose cost does not grow with n (counters can be 1e8 drafts):
    the normal approximation where the variance is large, else exact by waiting times. With
    q = min(p, 1 - p) and n q (1 - q) <= 25, the count of the rarer outcome has mean n q <= 50
    (q <= 1/2), so summing geometric gaps between successes ends after about n q + 1 draws
    (Devroye, Non-Uniform Random Variate Generation, X.4.3, the "second waiting time method")."""
    n_int = round(n)
    if n_int <= 0 or p <= 0:
        return 0.0
    if p >= 1:
        return float(n_int)
    if n_int * p * (1 - p) > 25:
        draw = rng.gauss(n_int * p, math.sqrt(n_int * p * (1 - p)))
        return float(min(max(round(draw), 0), n_int))
    q = min(p, 1.0 - p)
    log_miss = math.log1p(-q)  # < 0 for every q in (0, 1/2]
    successes = 0
    position = 0
    while True:
        # the gap to the next success: Geometric(q) on {1, 2, ...}, by inversion
        position += 1 + int(math.log(1.0 - rng.random()) / log_miss)
        if position > n_int:
            break
        successes += 1
    return float(successes if q == p else n_int - successes)


def resample(c: Counters, rng: random.Random) -> Counters:
    """A parametric bootstrap draw of the counters: c_0 ~ Bin(N, a_0), c_i ~ Bin(c_{i-1}, a_i)
    with the measured conditional rates (vLLM's prefix rule)."""
    previous = c.drafts
    prev_drawn = c.drafts
    out = []
    for count in c.per_position:
        rate = count / previous if previous > 0 else 0.0
        drawn = _binomial(rng, prev_drawn, rate)
        out.append(drawn)
        previous, prev_drawn = count, drawn
    return Counters(c.drafts, c.draft_tokens, sum(out), tuple(out))
