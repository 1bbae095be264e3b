"""vLLM's num_speculative_tokens_per_batch_size rules and lookup, re-implemented before launch
(vllm/v1/spec_decode/dynamic/utils.py, vLLM 0.32.0/0.33.0; the texts are vLLM's)."""

from __future__ import annotations

import pytest

from rocmseat.speculation.advise.schedule import (
    ScheduleError,
    as_lists,
    from_crossover,
    from_table,
    lookup,
    validate,
)


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        (None, "is required for dynamic speculative decoding"),
        ("1-16:3", "must be a non-empty list"),
        ([], "must not be empty"),
        ([(1, 4)], "must be a 3-item sequence"),
        ([(1, 4, True)], "must be a 3-item sequence"),
        ([(1, 4, 2.5)], "must be a 3-item sequence"),
        ([(0, 4, 3)], "Batch-size range (0, 4) must be positive"),
        ([(1, -2, 3)], "Batch-size range (1, -2) must be positive"),
        ([(5, 4, 3)], "Batch-size range start must be <= end for (5, 4, 3)"),
        ([(1, 4, -1)], "values must be >= 0"),
        ([(1, 8, 3), (8, 16, 1)], "must be non-overlapping and sorted"),
        ([(2, 8, 3)], "The first batch-size range must start at 1"),
    ],
)
def test_the_nine_rules(schedule, message):
    with pytest.raises(ScheduleError) as info:
        validate(schedule)
    assert message in str(info.value)


def test_input_order_is_free():
    assert validate([(9, 16, 0), (1, 8, 3)]) == ((1, 8, 3), (9, 16, 0))


def test_lookup_gaps_inherit_tail_carries_and_k_is_clamped():
    # [(1,16,3),(32,128,2)] maps 17-31 to 3 (the reference's example); K above the maximum is
    # clamped silently; past the last range the last K carries on.
    table = lookup([(1, 16, 3), (32, 128, 2)], 200, 3)
    assert table[0] == 3 and table[15] == 3 and table[16] == 3 and table[30] == 3
    assert table[31] == 2 and table[127] == 2 and table[199] == 2
    assert lookup([(1, 4, 9)], 6, 5) == (5,) * 6
    assert lookup([(1, 2, 3), (3, 4, 1)], 4, 3) == (3, 3, 1, 1)


def test_lookup_refuses_nonpositive_sizes():
    with pytest.raises(ScheduleError):
        lookup([(1, 4, 3)], 0, 3)


def test_from_table_merges_equal_neighbours():
    assert from_table([5, 5, 3, 3, 3, 0, 0]) == ((1, 2, 5), (3, 5, 3), (6, 7, 0))
    assert from_table([2]) == ((1, 1, 2),)


def test_from_crossover():
    assert from_crossover(3, 4, 16) == ((1, 4, 3), (5, 16, 0))
    assert from_crossover(3, 16, 16) == ((1, 16, 3),)
    assert as_lists(from_crossover(2, 1, 8)) == [[1, 1, 2], [2, 8, 0]]
