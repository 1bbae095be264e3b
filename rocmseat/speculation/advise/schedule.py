"""`num_speculative_tokens_per_batch_size`: vLLM's rules, its lookup, and schedules built from
a best-K-per-batch-size table (pure).

Rules and lookup as vLLM 0.32.0/0.33.0 implement them (vllm/v1/spec_decode/dynamic/utils.py,
`validate_and_normalize_dynamic_sd_schedule`, `build_dynamic_sd_schedule_lookup`): entries
`[start, end, K]` with inclusive ranges; the first starts at 1; sorted, no overlap; K >= 0
(0 drafts nothing); a gap or the tail inherits the previous K; K is silently clamped to
`num_speculative_tokens`. The batch size looked up is the number of requests scheduled in a
step, prefill chunks included (vllm/v1/core/sched/scheduler.py). vLLM checks the semantic rules
only after weights load and compile, so a proposal is checked here first.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

Schedule = tuple[tuple[int, int, int], ...]


class ScheduleError(ValueError):
    pass


def validate(schedule: Sequence[Sequence[int]]) -> Schedule:
    """vLLM's nine rules; returns the schedule sorted by start. ScheduleError with vLLM's text."""
    if schedule is None:
        raise ScheduleError("num_speculative_tokens_per_batch_size is required for dynamic "
                            "speculative decoding.")
    if not isinstance(schedule, list | tuple):
        raise ScheduleError("num_speculative_tokens_per_batch_size must be a non-empty list of "
                            "(range_start, range_end, num_speculative_tokens) entries.")
    if not schedule:
        raise ScheduleError("num_speculative_tokens_per_batch_size must not be empty.")
    entries: list[tuple[int, int, int]] = []
    for entry in schedule:
        if (not isinstance(entry, list | tuple) or len(entry) != 3
                or any(isinstance(v, bool) or not isinstance(v, int) for v in entry)):
            raise ScheduleError("Each num_speculative_tokens_per_batch_size entry must be a "
                                "3-item sequence: (range_start, range_end, "
                                "num_speculative_tokens).")
        start, end, k = entry
        if start <= 0 or end <= 0:
            raise ScheduleError(f"Batch-size range ({start}, {end}) must be positive.")
        if start > end:
            raise ScheduleError(f"Batch-size range start must be <= end for ({start}, {end}, "
                                f"{k}).")
        if k < 0:
            raise ScheduleError("num_speculative_tokens_per_batch_size values must be >= 0.")
        entries.append((start, end, k))
    entries.sort()
    for (_, prev_end, _), (start, _, _) in itertools.pairwise(entries):
        if start <= prev_end:
            raise ScheduleError("Batch-size ranges must be non-overlapping and sorted.")
    if entries[0][0] != 1:
        raise ScheduleError("The first batch-size range must start at 1 so every runtime batch "
                            "size has a defined schedule.")
    return tuple(entries)


def lookup(schedule: Sequence[Sequence[int]], max_num_seqs: int,
           num_speculative_tokens: int) -> tuple[int, ...]:
    """K for batch sizes 1..max_num_seqs (index 0 is batch size 1), as vLLM builds it."""
    if max_num_seqs <= 0 or num_speculative_tokens <= 0:
        raise ScheduleError("max_num_seqs and num_speculative_tokens must be > 0")
    entries = validate(schedule)
    table = []
    current = min(entries[0][2], num_speculative_tokens)
    for batch in range(1, max_num_seqs + 1):
        for start, end, k in entries:
            if start <= batch <= end:
                current = min(k, num_speculative_tokens)
                break
        table.append(current)
    return tuple(table)


def from_table(best_k: Sequence[int]) -> Schedule:
    """A best-K-per-batch-size table (index 0 = batch size 1) -> merged ranges."""
    if not best_k:
        raise ScheduleError("empty table")
    out: list[tuple[int, int, int]] = []
    for index, k in enumerate(best_k, start=1):
        if out and out[-1][2] == k:
            out[-1] = (out[-1][0], index, k)
        else:
            out.append((index, index, k))
    return validate(out)


def from_crossover(k: int, last_winning: int, max_num_seqs: int, above: int = 0) -> Schedule:
    """Speculate with K up to `last_winning` running requests and with `above` (0: not at all)
    above it."""
    if last_winning >= max_num_seqs:
        return ((1, max_num_seqs, k),)
    return validate([(1, last_winning, k), (last_winning + 1, max_num_seqs, above)])


def as_lists(schedule: Schedule) -> list[list[int]]:
    return [list(entry) for entry in schedule]
