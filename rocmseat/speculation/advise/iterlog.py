"""Per-iteration log lines of `--enable-logging-iteration-details` -> engine steps (pure).

vLLM's /metrics has no step-time histogram; the only per-step timing is this log line
(vllm/v1/metrics/loggers.py, `_log_iteration_details`, vLLM 0.32.0 and 0.33.0):

    Engine 000: Iteration(99): 0 context requests, 0 context tokens, 3 generation requests,
    12 generation tokens, iteration elapsed time: 3.64 ms, CPU KV cache usage: 0.1%

`generation tokens` = sum over decoding requests of (1 + K), so the draft length of a step is
recoverable when every decoding request drafted the same K. `(dummy)` marks a padding step of a
data-parallel rank; those are skipped. With async scheduling (vLLM's default) the elapsed time
is the blocking wait for the step, a lower bound of the step (docs/spec.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# Counts are at most 18 digits: int() refuses more than 4300 (a ValueError, not a parse miss).
_LINE = re.compile(
    r"Iteration\((?P<n>\d{1,18})\): (?P<creq>\d{1,18}) context requests, (?P<ctok>\d{1,18}) "
    r"context tokens, (?P<greq>\d{1,18}) generation requests, (?P<gtok>\d{1,18}) generation "
    r"tokens, iteration elapsed "
    # "%.2f ms" in vllm/v1/metrics/loggers.py: digits, a point, digits; not [0-9.]+, which
    # hands "1.2.3" to float() (a traceback). 400 digits float() reads as inf: checked below.
    r"time: (?P<ms>\d+(?:\.\d+)?) ms(?P<dummy> \(dummy\))?"
)


@dataclass(frozen=True, slots=True)
class Step:
    iteration: int
    context_requests: int
    context_tokens: int
    generation_requests: int
    generation_tokens: int
    elapsed_ms: float

    @property
    def batch_size(self) -> int:
        """Requests scheduled in the step, prefill chunks included: the batch size vLLM's
        num_speculative_tokens_per_batch_size looks K up by (vllm/v1/core/sched/scheduler.py)."""
        return self.context_requests + self.generation_requests

    @property
    def draft_length(self) -> int | None:
        """K of this step's decoding requests, or None (no decode, or a mix of draft lengths)."""
        if self.generation_requests == 0:
            return None
        per_request, rest = divmod(self.generation_tokens, self.generation_requests)
        if rest or per_request < 1:
            return None
        return per_request - 1


@dataclass(frozen=True, slots=True)
class IterationLog:
    steps: tuple[Step, ...]
    skipped_dummy: int
    malformed: int  # lines that named an Iteration but did not parse (reported, not guessed)


def parse_iteration_log(text: str) -> IterationLog:
    steps: list[Step] = []
    dummy = malformed = 0
    for line in text.splitlines():
        if "Iteration(" not in line:
            continue
        m = _LINE.search(line)
        if m is None:
            malformed += 1
            continue
        if m.group("dummy"):
            dummy += 1
            continue
        elapsed = float(m.group("ms"))
        if not math.isfinite(elapsed):
            malformed += 1
            continue
        steps.append(Step(
            iteration=int(m.group("n")),
            context_requests=int(m.group("creq")),
            context_tokens=int(m.group("ctok")),
            generation_requests=int(m.group("greq")),
            generation_tokens=int(m.group("gtok")),
            elapsed_ms=elapsed,
        ))
    return IterationLog(tuple(steps), dummy, malformed)
