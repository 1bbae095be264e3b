"""The engine seam: what every room asks of an engine instead of naming vLLM (docs/engines.md).

One module per engine (`vllm`, `sglang`, `llamacpp`) builds its `Engine` record (`ENGINE`)
from its pure functions; `rocmseat.engines.by_kind(kind)` is the one way a room gets it, from
the seat's `[engine] kind`. The seam is data and pure functions: the serve argv from a seat,
the key factors the engine adds, the cache variables it honours, what its readiness probe
means, the startup lines that are facts, and how its /metrics page maps to one normalised
`Reading` (the page grammar itself is read by rocmseat.watch.metrics, driven by the engine's
`PageSpec`).

Layer: above seat (an engine reads the seat's schema), below hip/node and every room that asks
(pyproject.toml, the rooms contract).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from rocmseat.errors import RocmseatError

if TYPE_CHECKING:
    from rocmseat.seat.model import Seat

EngineKind = Literal["vllm", "sglang", "llamacpp"]
KINDS: Final[tuple[str, ...]] = ("vllm", "sglang", "llamacpp")

# What the acceptance figure of a reading rests on (Reading.basis): said with every verdict.
BASIS_PER_POSITION: Final = "per-position"  # drafts, draft tokens, accepted, c_0..c_{K-1}
# drafts, draft tokens, accepted, no per-position counters (a llama.cpp slot that has not
# drafted yet, or a build before them): the acceptance is accepted / drafts alone
BASIS_ACCEPTED_PER_DRAFT: Final = "accepted-per-draft"
# SGLang: emitted / verify steps, valid only while every running request speculates
BASIS_VERIFY_STEPS: Final = "verify-steps"
BASIS_NONE: Final = "none"  # no spec-decode counters on the page: the detector cannot judge

# A float counts exactly up to 2**53; a counter beyond that cannot come from a real server, and
# its deltas would be rounding noise.
MAX_VALUE: Final = float(2**53)
# Cumulative invariants of the spec-decode counters (vLLM SpecDecodingStats.observe_draft adds 1
# to c_0..c_{a-1} for a draft with a accepted tokens; llama.cpp's n_accepted_per_pos the same):
# checked with a slack of 1 % + 1 for torn reads of a multi-process registry, which reads each
# process's counters one after the other.
SLACK_RATIO: Final = 0.01


class PageError(RocmseatError):
    """The page is not a usable /metrics page of the engine (HTML, truncated, garbage): a scrape
    error."""


@dataclass(frozen=True, slots=True)
class Reading:
    """The normalised reading of one scrape, summed over engines, ranks and models.

    `None` means the series is absent from the page. Normalised names (docs/engines.md): verify
    steps = `drafts` (a draft is one verification step of one request), drafted = `draft_tokens`,
    accepted = `accepted_tokens`, accepted per position = `accepted_per_pos` (`[i]` counts drafts
    whose first i+1 tokens were accepted), emitted = `generation_tokens`, then prompt tokens,
    iterations (engine steps), running, waiting, KV usage (0..1). With `basis` per-position the
    four spec-decode counters are either all present or all None (`PageError` otherwise); with
    basis verify-steps (SGLang) `accepted_tokens` is emitted - verify steps and `draft_tokens`
    and `accepted_per_pos` are None. `windowed_acceptance_length`: an engine's own windowed gauge
    (SGLang's `spec_accept_length`), shown, never judged.
    """

    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_pos: tuple[float, ...] | None = None
    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    iterations: float | None = None
    preemptions: float | None = None
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    created_s: float | None = None
    engines: int = 0
    engine: str = "vllm"
    basis: str = BASIS_PER_POSITION
    windowed_acceptance_length: float | None = None

    @property
    def spec_present(self) -> bool:
        return self.drafts is not None

    @property
    def verify_steps(self) -> float | None:
        return self.drafts

    @property
    def emitted_tokens(self) -> float | None:
        return self.generation_tokens

    @property
    def acceptance_basis(self) -> str:
        """The basis of this reading's acceptance figure (BASIS_NONE without spec counters)."""
        return self.basis if self.spec_present else BASIS_NONE


Sums = dict[str, float]


@dataclass(frozen=True, slots=True)
class PageSpec:
    """How rocmseat.watch.metrics reads one engine's page: the series it wants and how the sums
    become a Reading. Names are exposition names with the engine's prefix (`vllm:`, ...)."""

    engine: str
    prefix: str  # "vllm:"
    escaped: str  # the prefix as prometheus_client >= 0.22 escapes it in OpenMetrics: "vllm_"
    summed: Mapping[str, str]  # series -> Reading field, summed over every label set
    maxed: Mapping[str, str]  # series -> Reading field, the largest label set (gauges)
    per_pos: str | None  # the per-position counter (label `position`)
    created: frozenset[str]  # `_created` stamps (prometheus_client): the smallest is the start
    engine_series: str | None  # its label sets count the engines (`model_name`/`engine`)
    assemble: Callable[[Sums, Sums, dict[int, float], float | None, int], Reading]
    wanted: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        names = {*self.summed, *self.maxed, *self.created}
        if self.per_pos is not None:
            names.add(self.per_pos)
        object.__setattr__(self, "wanted", frozenset(names))

    def unescape(self, name: str) -> str:
        """`vllm_x` -> `vllm:x` (the OpenMetrics escaping of prometheus_client >= 0.22)."""
        if name.startswith(self.escaped):
            return self.prefix + name[len(self.escaped):]
        return name


def check_value(name: str, value: float, where: str) -> None:
    """NaN, infinities, negative or astronomically large values are not counts: the scrape is
    an error (could not check), never a window (NaN would reset the CUSUM and pass every
    threshold test, docs/watch.md "Bad pages")."""
    if not math.isfinite(value):
        raise PageError(f"{where}: {name} is {value!r}, not a finite number")
    if value < 0:
        raise PageError(f"{where}: {name} is negative ({value!r})")
    if value > MAX_VALUE:
        raise PageError(f"{where}: {name} is {value!r}, beyond what a counter can hold exactly")


def _slack(total: float) -> float:
    return 1.0 + SLACK_RATIO * total


def check_spec_counts(
    drafts: float, draft_tokens: float, accepted: float, per_pos: tuple[float, ...], what: str
) -> None:
    """The invariants of the spec-decode counters (cumulative on a page, or the deltas of a
    window): accepted <= draft tokens <= K * drafts, c_0 <= drafts, c_i <= c_{i-1}, and
    sum c_i == accepted. Breaking one means an acceptance length above 1 + K or a position rate
    above 1: the numbers are not counts of one server, and judging them would be a guess."""
    k = len(per_pos)
    if draft_tokens > k * drafts + _slack(k * drafts):
        raise PageError(f"{what}: {draft_tokens:g} draft tokens in {drafts:g} drafts of at "
                        f"most {k} tokens")
    if accepted > draft_tokens + _slack(draft_tokens):
        raise PageError(f"{what}: {accepted:g} accepted tokens of {draft_tokens:g} drafted")
    previous, previous_name = drafts, "drafts"
    for i, count in enumerate(per_pos):
        if count > previous + _slack(previous):
            raise PageError(f"{what}: position {i} accepted {count:g} times, more than "
                            f"{previous_name} ({previous:g}): a rate above 1")
        previous, previous_name = count, f"position {i}"
    if abs(sum(per_pos) - accepted) > _slack(accepted):
        raise PageError(f"{what}: the per-position counts sum to {sum(per_pos):g}, the "
                        f"accepted tokens are {accepted:g}")


@dataclass(frozen=True, slots=True)
class Readiness:
    """What the engine's health endpoint means (launch's readiness probe)."""

    path: str  # "/health"
    loading_statuses: frozenset[int]  # answered while the model loads: wait, not a failure
    note: str  # the source of the rule


@dataclass(frozen=True, slots=True)
class MemoryFact:
    """One memory line of the startup log, as the engine states its plan."""

    name: str  # "kv_cache_tokens", "kv_cache_gib", "model_weights_gib", ...
    value: float
    unit: str  # "tokens", "GiB", "MiB"


def python_target(program: Sequence[str]) -> tuple[str, str] | None:
    """What a `python[3[.N]] [options] ...` argv runs: ("module", name) for `-m name` or
    `-mname`, ("script", its file name) for a script; None for a program that is not a Python,
    or a Python that runs neither. The engines' `looks_like` read it."""
    if not program or not os.path.basename(program[0]).startswith("python"):
        return None
    words = program[1:]
    for i, word in enumerate(words):
        if word == "-m":
            return ("module", words[i + 1]) if i + 1 < len(words) else None
        if word.startswith("-m") and len(word) > 2:
            return ("module", word[2:])
        if not word.startswith("-"):
            return ("script", os.path.basename(word))
    return None


@dataclass(frozen=True, slots=True)
class Engine:
    """One engine behind the seam: a record of its facts and its module's pure functions, one
    per engine module (its `ENGINE`)."""

    kind: str
    label: str  # "vLLM", "SGLang", "llama.cpp"
    page: PageSpec
    readiness: Readiness
    cache_subdirs: Mapping[str, str]  # variable -> subdir of the cache root
    neutral_flags: frozenset[str]  # serve flags that change no graph
    # whether an argv (after the wrappers, rocmseat.launch.container.look_through) starts this
    # engine's server
    looks_like: Callable[[Sequence[str]], bool]
    # the engine's serve argv for one replica of a seat on a port
    serve_argv: Callable[[Seat, int], tuple[str, ...]]
    # the speculative part of the config key in this engine's terms (None: no drafter)
    speculative_factors: Callable[[Seat], dict[str, Any] | None]
    # the memory facts one startup-log line states (empty for most lines)
    memory_facts: Callable[[str], tuple[MemoryFact, ...]]
