"""Step cost: the linear step-time model, the measured table, and when each is used
(rocmseat/speculation/advise/stepcost.py)."""

from __future__ import annotations

import random

import pytest

from rocmseat.speculation.advise.iterlog import parse_iteration_log
from rocmseat.speculation.advise.stepcost import (
    Cell,
    StepCost,
    StepCostError,
    cells_from_runs,
    cells_from_steps,
    choose,
    perturbed,
)


def linear(b: float, k: float) -> float:
    return 20.0 + 0.5 * b + k * (4.0 + 0.3 * b)


def test_an_exactly_linear_cost_is_fitted_exactly():
    cells = cells_from_runs([(b, k, linear(b, k)) for b in (1, 4, 8, 16) for k in (0, 3)])
    cost = choose(cells)
    assert cost.kind == "linear fit" and cost.rms_relative < 1e-9
    assert cost.params == pytest.approx((20.0, 0.5, 4.0, 0.3))
    assert cost.predict(32, 5) == pytest.approx(linear(32, 5))
    assert cost.measured_k() == (0, 3) and cost.measured_batches() == (1, 4, 8, 16)


def test_one_batch_size_fits_without_batch_dependence():
    cost = choose(cells_from_runs([(1, 0, 24.0), (1, 3, 39.0)]))
    assert cost.kind == "linear fit" and "one batch size" in cost.why
    assert cost.predict(1, 1) == pytest.approx(29.0)


def test_a_misfit_uses_the_measured_table():
    # a compute knee: flat up to 8 requests, then steep (not linear in B)
    def knee(b: float, k: float) -> float:
        tokens = b * (k + 1)
        return 30.0 + (0.0 if tokens <= 16 else 3.0 * (tokens - 16))

    cells = cells_from_runs([(b, k, knee(b, k)) for b in (1, 4, 8, 16) for k in (0, 3)])
    cost = choose(cells)
    assert cost.kind == "measured table" and "misfits" in cost.why
    for b in (1, 4, 8, 16):
        for k in (0, 3):
            assert cost.predict(b, k) == pytest.approx(knee(b, k))
    assert cost.predict(6, 0) == pytest.approx(30.0)  # interpolated in B
    mid = cost.predict(16, 1.5)
    assert knee(16, 0) < mid < knee(16, 3)  # interpolated in K


def test_one_draft_length_cannot_separate_drafting_from_verifying():
    with pytest.raises(StepCostError, match="one draft length only"):
        choose(cells_from_runs([(1, 3, 39.0), (4, 3, 46.0)]))
    with pytest.raises(StepCostError, match="no step-time"):
        choose([])


def test_repeats_make_one_cell_with_their_spread():
    (cell,) = cells_from_runs([(4, 3, 46.0), (4, 3, 48.0), (4, 3, 47.0)])
    assert (cell.count, cell.mean_ms) == (3, 47.0) and cell.sd_ms == pytest.approx(1.0)


def test_perturbed_draws_stay_near_the_fit():
    cells = [Cell(b, k, linear(b, k), 0.5, 3, "bench") for b in (1, 8) for k in (0, 3)]
    cost = choose(cells)
    rng = random.Random(5)
    for _ in range(20):
        other = perturbed(cost, rng)
        assert other.kind == "linear fit"
        assert other.predict(4, 2) == pytest.approx(cost.predict(4, 2), rel=0.1)


def test_iteration_log_cells_take_pure_decode_steps():
    text = "\n".join([
        "Engine 000: Iteration(1): 1 context requests, 32 context tokens, 0 generation requests, "
        "0 generation tokens, iteration elapsed time: 9.00 ms, CPU KV cache usage: 0.1%",
        *[f"Engine 000: Iteration({i}): 0 context requests, 0 context tokens, 2 generation "
          f"requests, 8 generation tokens, iteration elapsed time: 3{i % 10}.00 ms, CPU KV cache "
          "usage: 0.1%" for i in range(2, 12)],
        "Engine 000: Iteration(12): 0 context requests, 0 context tokens, 2 generation requests, "
        "5 generation tokens, iteration elapsed time: 30.00 ms, CPU KV cache usage: 0.1%",
    ])
    (cell,) = cells_from_steps(parse_iteration_log(text).steps)
    assert (cell.batch, cell.k, cell.count, cell.source) == (2, 3, 10, "iteration-log")


def test_a_saturated_fit_says_it_tests_nothing():
    cost = choose(cells_from_runs([(b, k, linear(b, k)) for b in (1, 4) for k in (0, 3)]))
    assert cost.kind == "linear fit" and "4 cells for 4 parameters" in cost.why
    cost = choose(cells_from_runs([(b, k, linear(b, k)) for b in (1, 4, 8) for k in (0, 3)]))
    assert "parameters" not in cost.why


def test_a_saturated_fit_is_never_extrapolated_into_a_non_positive_step():
    # 4 cells, 4 parameters: the fit goes through them exactly; at K=3 the step got faster
    # with the batch (noise), so the fit says T(8, 3) = -30 ms and predict() once clamped that
    # to 1e-6 ms: 8 requests / 1e-6 ms = billions of tokens/s
    cost = choose(cells_from_runs([(1, 0, 20.0), (4, 0, 22.0), (1, 3, 40.0), (4, 3, 10.0)]))
    assert cost.kind == "linear fit" and cost.rms_relative < 1e-9
    t0, t1, u0, u1 = cost.params
    assert t0 + t1 * 8 + 3 * (u0 + u1 * 8) < 0
    # beyond the measured batch sizes: the measured table, and a step with more requests never
    # takes less time than the largest measured one
    assert cost.predict(8, 3) == pytest.approx(10.0)
    assert cost.predict(8, 0) == pytest.approx(22.0 + 2.0 / 3.0 * 4)  # linear in B from 1, 4
    assert cost.predict(4, 3) == pytest.approx(10.0)  # inside: the fit (exact here)
    assert all(cost.predict(b, k) > 1.0 for b in (1, 2, 4, 8, 64) for k in range(7))
    assert cost.within(4, 3) and not cost.within(8, 3) and not cost.within(4, 4)


def test_inside_the_measurements_a_non_positive_fit_falls_back_to_the_table():
    cells = tuple(cells_from_runs([(2, 0, 30.0), (2, 2, 6.0), (2, 4, 6.0)]))
    cost = StepCost("linear fit", "a fit that crosses zero inside the cells",
                    (30.0, 0.0, -12.0, 0.0), 0.0, cells)
    assert cost.within(2, 3)
    assert cost.predict(2, 1) == pytest.approx(18.0)  # the fit, where it is positive
    assert cost.predict(2, 3) == pytest.approx(6.0)  # the fit says -6 ms: the table instead


def test_beyond_the_measured_batch_sizes_a_step_never_gets_faster():
    # the shape of the iteration logs in tests/fixtures/spec: K=0 steps flat (even falling a
    # little) in B, K=3 steps growing; the fit's t1 < 0 must not make 64 requests faster than 8
    cost = choose(cells_from_runs([(1, 0, 30.0), (4, 0, 30.5), (8, 0, 29.0),
                                   (1, 3, 36.0), (4, 3, 42.0), (8, 3, 49.0)]))
    assert cost.kind == "linear fit" and cost.params[1] < 0
    assert cost.predict(64, 0) == pytest.approx(cost.predict(8, 0))
    assert cost.predict(64, 3) > cost.predict(64, 0)  # drafting never makes a step cheaper
    assert cost.predict(64, 5) > cost.predict(64, 3)
