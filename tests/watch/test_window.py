"""Window statistics: vLLM's formulas, the K-free quantities, restarts."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmseat.watch.metrics import Reading, read_page
from rocmseat.watch.window import Snapshot, Window, is_restart, window_between
from tests.watch.conftest import page


def counters(accepted_per_draft, k):
    """What vLLM's SpecDecodingStats.observe_draft accumulates for these drafts."""
    per_pos = [0.0] * k
    for a in accepted_per_draft:
        for i in range(a):
            per_pos[i] += 1
    return float(len(accepted_per_draft)), float(len(accepted_per_draft) * k), float(
        sum(accepted_per_draft)), tuple(per_pos)


def make_window(accepted_per_draft, k, duration_s=10.0, gen=None, running=1.0):
    n, d, a, pos = counters(accepted_per_draft, k)
    return Window(duration_s, n, d, a, pos, gen, None, None, None, None, running, 0.0, None, True)


def test_vllm_log_example_four_drafts():
    # vllm/v1/spec_decode/metrics.py semantics: four drafts (k=3) accepting 3, 1, 0, 2 ->
    # AL 2.50, rate 50 %,
    # per position 0.750, 0.500, 0.250.
    w = make_window([3, 1, 0, 2], 3)
    assert w.acceptance_length == 2.5
    assert w.draft_acceptance_rate == 0.5
    assert w.position_acceptance == (0.75, 0.5, 0.25)
    assert w.effective_k == 3.0
    assert w.conditional_acceptance == (0.75, 2 / 3, 0.5)
    # alpha = S / (N + S - c_{K-1}) = 6 / (4 + 6 - 1)
    assert w.alpha == pytest.approx(6 / 9)


@given(st.lists(st.integers(0, 7), min_size=1, max_size=200))
def test_per_draft_variance_from_position_counters_is_exact(accepted):
    w = make_window(accepted, 7)
    mean = sum(accepted) / len(accepted)
    expected = sum((a - mean) ** 2 for a in accepted) / len(accepted)
    assert w.accepted_per_draft_variance == pytest.approx(expected, abs=1e-9)


def test_window_between_two_fixture_scrapes():
    a = Snapshot(100.0, read_page(page("00-healthy.txt")))
    b = Snapshot(110.0, read_page(page("01-healthy.txt")))
    w = window_between(a, b)
    assert w is not None
    assert w.drafts == 600 and w.duration_s == 10.0
    assert w.drafts_per_s == 60.0
    assert w.acceptance_length == pytest.approx(1 + (480 + 384 + 307) / 600)
    assert w.generation_tokens_per_s == 190.0


def test_counter_reset_starts_a_new_window():
    a = Snapshot(100.0, read_page(page("03-collapse.txt")))
    b = Snapshot(110.0, read_page(page("04-restarted.txt")))
    assert window_between(a, b) is None


def test_restart_seen_by_created_stamp_even_when_counters_grew():
    before = read_page(page("00-healthy.txt"))
    after = dataclasses.replace(before, drafts=(before.drafts or 0) + 10,
                                created_s=(before.created_s or 0) + 60)
    assert is_restart(before, after)
    assert not is_restart(before, dataclasses.replace(before, drafts=(before.drafts or 0) + 10))


def test_blind_window_has_no_spec_stats():
    a = Snapshot(0.0, read_page(page("vllm-nospec.txt")))
    b = Snapshot(10.0, dataclasses.replace(a.reading, generation_tokens=50_000.0))
    w = window_between(a, b)
    assert w is not None and not w.spec_present
    assert w.acceptance_length is None and w.generation_tokens == 50_000 - 41_230


def test_merge_pools_counts():
    w = make_window([3, 0], 3).merge(make_window([1], 3))
    assert w.drafts == 3 and w.accepted_tokens == 4 and w.accepted_per_pos == (2, 1, 1)
    assert w.duration_s == 20.0


def test_empty_reading_fields_stay_none():
    r = Reading()
    assert not r.spec_present and r.generation_tokens is None
