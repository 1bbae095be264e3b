"""The decision: throughput per (K, B), the staircase, bands, the proposal and its uncertainty
(rocmseat/speculation/advise/decide.py)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmseat.speculation.advise.acceptance import Counters, estimate
from rocmseat.speculation.advise.decide import advise, best_k, staircase, throughput
from rocmseat.speculation.advise.schedule import lookup, validate
from rocmseat.speculation.advise.stepcost import Cell, cells_from_runs, choose


def geometric_counters(alpha: float, k: int, n: int = 100_000) -> Counters:
    """Expected counters of n drafts under a constant acceptance alpha (c_i = n alpha^(i+1))."""
    per_pos = tuple(round(n * alpha ** (i + 1)) for i in range(k))
    return Counters(n, n * k, sum(per_pos), per_pos)


# Step costs with the shape measured on vLLM's CPU build (docs/spec.md): a target step ~24 ms
# that barely grows with batch, a one-layer drafter at ~5 ms per drafted token.
def cpu_like(b: float, k: float) -> float:
    return 24.0 + 0.3 * b + k * (5.0 + 0.8 * b)


COST = choose(cells_from_runs([(b, k, cpu_like(b, k)) for b in (1, 4, 8, 16) for k in (0, 3)]))


def test_throughput_is_batch_times_e_over_step():
    acc = estimate(geometric_counters(0.8, 3))
    assert throughput(acc, COST, 4, 2) == pytest.approx(4 * acc.e(2) / cpu_like(4, 2) * 1000)
    assert throughput(acc, COST, 4, 0) == pytest.approx(4 / cpu_like(4, 0) * 1000)


def test_the_best_k_climbs_with_acceptance():
    ks = [best_k(estimate(geometric_counters(a, 6)), COST, 1, 6)
          for a in (0.1, 0.3, 0.5, 0.7, 0.85, 0.95)]
    assert ks == sorted(ks) and ks[0] == 0 and ks[-1] >= 4


def test_the_best_k_falls_with_batch_size():
    acc = estimate(geometric_counters(0.7, 5))
    ks = [best_k(acc, COST, b, 5) for b in (1, 4, 16, 64)]
    assert ks == sorted(ks, reverse=True) and ks[0] > ks[-1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=1.0, max_value=100.0), min_size=4, max_size=7),
       st.integers(min_value=1, max_value=64))
def test_staircase_is_monotone_for_any_cost(costs, batch):
    """k*(alpha) never steps down, whatever the step cost (it must not depend on alpha)."""
    cells = [Cell(batch, k, c, None, 1, "bench") for k, c in enumerate(costs)]
    cost = choose(cells)
    steps = staircase(cost, batch, len(costs) - 1, step=0.01)
    ks = [t.k for t in steps]
    assert ks == sorted(ks)
    assert [t.alpha_from for t in steps] == sorted(t.alpha_from for t in steps)


def test_advice_bands_schedule_and_uncertainty():
    counters = geometric_counters(0.7, 5, n=20_000)
    advice = advise(counters, COST, max_num_seqs=64, report_batches=(1, 4, 16),
                    rng=random.Random(1), draws=60)
    assert len(advice.best_k) == 64
    assert advice.best_k == tuple(sorted(advice.best_k, reverse=True))
    assert advice.num_speculative_tokens == max(advice.best_k)
    assert advice.schedule is not None
    validate(advice.schedule)
    table = lookup(advice.schedule, 64, advice.num_speculative_tokens)
    assert table == advice.best_k  # the schedule reproduces the staircase exactly
    for band in advice.bands:
        assert band.gain_low <= band.gain <= band.gain_high or band.k == 0
        assert 0.0 <= band.bootstrap_agreement <= 1.0
    assert {p.batch for p in advice.points} == {1, 4, 16}
    assert any(p.extrapolated for p in advice.points)  # K above the measured 5 is labelled


def test_same_seed_same_advice():
    counters = geometric_counters(0.6, 3, n=5_000)
    one = advise(counters, COST, max_num_seqs=8, report_batches=(1, 4), rng=random.Random(3),
                 draws=40)
    two = advise(counters, COST, max_num_seqs=8, report_batches=(1, 4), rng=random.Random(3),
                 draws=40)
    assert one == two


def test_nothing_pays_means_do_not_speculate():
    counters = geometric_counters(0.05, 3)
    advice = advise(counters, COST, max_num_seqs=16, report_batches=(1,), draws=20)
    assert advice.num_speculative_tokens is None and advice.schedule is None
    assert set(advice.best_k) == {0}


def test_batch_sizes_beyond_the_measurements_are_flagged_extrapolated():
    # step costs measured at batch sizes 1 and 4 only; the advice covers 1..8
    cost = choose(cells_from_runs([(b, k, cpu_like(b, k)) for b in (1, 4) for k in (0, 3)]))
    advice = advise(geometric_counters(0.7, 3, n=5_000), cost, max_num_seqs=8,
                    report_batches=(1, 4, 8), k_limit=3, rng=random.Random(2), draws=20)
    flags = {(p.batch, p.k): p.extrapolated for p in advice.points}
    assert not flags[(4, 3)] and not flags[(1, 0)]
    assert flags[(8, 0)] and flags[(8, 3)]  # only K was flagged before
    last = advice.bands[-1]
    assert last.end == 8 and last.extrapolated
    assert "batch sizes above 4 were not measured" in last.why_extrapolated
    assert all(not b.extrapolated for b in advice.bands if b.end <= 4)
