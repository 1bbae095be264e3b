"""Window statistics: the deltas between two scrapes of one replica and what follows from them.

Formulas as vLLM computes them (vllm/v1/spec_decode/metrics.py, SpecDecodingLogging.log):
acceptance length 1 + Δaccepted/Δdrafts, draft acceptance rate Δaccepted/Δdraft_tokens,
per-position acceptance Δper_pos[i]/Δdrafts. Plus what the detector needs (docs/architecture.md,
"Speculation facts"): effective K = Δdraft_tokens/Δdrafts, conditional per-position rates
c_i/c_{i-1}, the constant-acceptance estimate alpha = S/(N + S - c_{K-1}), and the per-draft
variance of accepted tokens, which the per-position counters give exactly: a draft that accepted
a tokens contributes 1 to c_0..c_{a-1}, so sum_i (2i+1) c_i = sum_drafts a^2.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmseat.watch.metrics import PageError, Reading, check_window_counts

# Two _created stamps of one process differ by microseconds; a restart moves them by seconds.
_CREATED_TOLERANCE_S = 0.5


@dataclass(frozen=True, slots=True)
class Snapshot:
    time_s: float
    reading: Reading


@dataclass(frozen=True, slots=True)
class Window:
    duration_s: float
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    accepted_per_pos: tuple[float, ...]
    generation_tokens: float | None
    prompt_tokens: float | None
    preemptions: float | None
    prefix_queries: float | None
    prefix_hits: float | None
    running: float | None
    waiting: float | None
    kv_usage: float | None
    spec_present: bool
    # engine progress besides generated tokens (the stall judge): engine steps with output, and
    # how far the KV-cache usage moved (a chunked prefill fills blocks every step and emits
    # nothing until its first token)
    iterations: float | None = None
    kv_usage_moved: float | None = None

    @property
    def progressed(self) -> bool | None:
        """Any engine progress in the window: generated or prompt tokens counted, engine steps
        that emitted output, or KV-cache usage moving. None when no series could say."""
        moved = [v for v in (self.generation_tokens, self.prompt_tokens, self.iterations,
                             self.kv_usage_moved) if v is not None]
        if not moved:
            return None
        return any(v > 0 for v in moved)

    @property
    def num_positions(self) -> int:
        return len(self.accepted_per_pos)

    @property
    def acceptance_length(self) -> float | None:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts > 0 else None

    @property
    def draft_acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None

    @property
    def position_acceptance(self) -> tuple[float, ...] | None:
        if self.drafts <= 0:
            return None
        return tuple(c / self.drafts for c in self.accepted_per_pos)

    @property
    def conditional_acceptance(self) -> tuple[float | None, ...] | None:
        """c_i / c_{i-1} (c_{-1} = drafts): the per-position rates that do not depend on K."""
        if self.drafts <= 0:
            return None
        out: list[float | None] = []
        previous = self.drafts
        for count in self.accepted_per_pos:
            out.append(count / previous if previous > 0 else None)
            previous = count
        return tuple(out)

    @property
    def effective_k(self) -> float | None:
        return self.draft_tokens / self.drafts if self.drafts > 0 else None

    @property
    def alpha(self) -> float | None:
        """S / (N + S - c_{K-1}): per-token acceptance under a constant-acceptance model."""
        if self.drafts <= 0 or not self.accepted_per_pos:
            return None
        trials = self.drafts + self.accepted_tokens - self.accepted_per_pos[-1]
        return self.accepted_tokens / trials if trials > 0 else None

    @property
    def accepted_per_draft_variance(self) -> float | None:
        if self.drafts <= 0:
            return None
        second = sum((2 * i + 1) * c for i, c in enumerate(self.accepted_per_pos)) / self.drafts
        mean = self.accepted_tokens / self.drafts
        return max(second - mean * mean, 0.0)

    @property
    def drafts_per_s(self) -> float | None:
        if not self.spec_present or self.duration_s <= 0:
            return None
        return self.drafts / self.duration_s

    @property
    def generation_tokens_per_s(self) -> float | None:
        if self.generation_tokens is None or self.duration_s <= 0:
            return None
        return self.generation_tokens / self.duration_s

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        if not self.prefix_queries or self.prefix_hits is None:
            return None
        return self.prefix_hits / self.prefix_queries

    def merge(self, later: Window) -> Window:
        """Pool two consecutive windows (the minimum-drafts gate accumulates quiet windows)."""
        width = max(self.num_positions, later.num_positions)
        pos = tuple(
            _at(self.accepted_per_pos, i) + _at(later.accepted_per_pos, i) for i in range(width)
        )
        return Window(
            duration_s=self.duration_s + later.duration_s,
            drafts=self.drafts + later.drafts,
            draft_tokens=self.draft_tokens + later.draft_tokens,
            accepted_tokens=self.accepted_tokens + later.accepted_tokens,
            accepted_per_pos=pos,
            generation_tokens=_add(self.generation_tokens, later.generation_tokens),
            prompt_tokens=_add(self.prompt_tokens, later.prompt_tokens),
            preemptions=_add(self.preemptions, later.preemptions),
            prefix_queries=_add(self.prefix_queries, later.prefix_queries),
            prefix_hits=_add(self.prefix_hits, later.prefix_hits),
            running=later.running,
            waiting=later.waiting,
            kv_usage=later.kv_usage,
            spec_present=self.spec_present and later.spec_present,
            iterations=_add(self.iterations, later.iterations),
            kv_usage_moved=_add(self.kv_usage_moved, later.kv_usage_moved),
        )


def _at(values: tuple[float, ...], i: int) -> float:
    return values[i] if i < len(values) else 0.0


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def _delta(new: float | None, old: float | None) -> float | None:
    return None if new is None or old is None else new - old


def is_restart(prev: Reading, cur: Reading) -> bool:
    """A counter went down, the per-position set changed, or the `_created` stamp moved."""
    old_created, new_created = prev.created_s, cur.created_s
    if old_created is not None and new_created is not None:
        return abs(new_created - old_created) > _CREATED_TOLERANCE_S or _went_down(prev, cur)
    return _went_down(prev, cur)


def _went_down(prev: Reading, cur: Reading) -> bool:
    pairs = [
        (prev.drafts, cur.drafts),
        (prev.draft_tokens, cur.draft_tokens),
        (prev.accepted_tokens, cur.accepted_tokens),
        (prev.generation_tokens, cur.generation_tokens),
        (prev.prompt_tokens, cur.prompt_tokens),
        (prev.iterations, cur.iterations),
        (prev.preemptions, cur.preemptions),
        (prev.prefix_queries, cur.prefix_queries),
        (prev.prefix_hits, cur.prefix_hits),
    ]
    if any(old is not None and new is not None and new < old for old, new in pairs):
        return True
    old_pos, new_pos = prev.accepted_per_pos, cur.accepted_per_pos
    if old_pos is None or new_pos is None:
        return False
    return len(old_pos) != len(new_pos) or any(
        n < o for o, n in zip(old_pos, new_pos, strict=True)
    )


def window_between(prev: Snapshot, cur: Snapshot) -> Window | None:
    """The window from `prev` to `cur`, or None when the replica restarted in between (a counter
    reset starts a new window: no negative deltas, and no guessing what happened before)."""
    a, b = prev.reading, cur.reading
    if is_restart(a, b):
        return None
    spec = a.spec_present and b.spec_present
    per_pos: tuple[float, ...] = ()
    if spec and a.accepted_per_pos is not None and b.accepted_per_pos is not None:
        per_pos = tuple(n - o for o, n in zip(a.accepted_per_pos, b.accepted_per_pos, strict=False))
    return Window(
        duration_s=max(cur.time_s - prev.time_s, 0.0),
        drafts=(_delta(b.drafts, a.drafts) or 0.0) if spec else 0.0,
        draft_tokens=(_delta(b.draft_tokens, a.draft_tokens) or 0.0) if spec else 0.0,
        accepted_tokens=(_delta(b.accepted_tokens, a.accepted_tokens) or 0.0) if spec else 0.0,
        accepted_per_pos=per_pos,
        generation_tokens=_delta(b.generation_tokens, a.generation_tokens),
        prompt_tokens=_delta(b.prompt_tokens, a.prompt_tokens),
        preemptions=_delta(b.preemptions, a.preemptions),
        prefix_queries=_delta(b.prefix_queries, a.prefix_queries),
        prefix_hits=_delta(b.prefix_hits, a.prefix_hits),
        running=b.running,
        waiting=b.waiting,
        kv_usage=b.kv_usage,
        spec_present=spec,
        iterations=_delta(b.iterations, a.iterations),
        kv_usage_moved=None if a.kv_usage is None or b.kv_usage is None
        else abs(b.kv_usage - a.kv_usage),
    )


def window_problem(window: Window) -> str | None:
    """Why the window cannot be judged (an acceptance length above 1 + K, a position rate above
    1, more accepted than drafted ...), or None. Each page can be valid on its own while the two
    together are not counts of one server."""
    if not window.spec_present:
        return None
    try:
        check_window_counts(window.drafts, window.draft_tokens, window.accepted_tokens,
                            window.accepted_per_pos)
    except PageError as exc:
        return exc.message
    return None
