"""Read one `vllm bench serve --save-result` file (pure: text in, values out).

Keys as vLLM 0.32.0/0.33.0 writes them (vllm/benchmarks/serve.py, `benchmark()` result dict and
`main_async`): flat JSON, `date, backend, model_id, num_prompts, max_concurrency, duration,
completed, failed, total_input_tokens, total_output_tokens, request_throughput,
output_throughput`, per metric `mean_/median_/std_/p<P>_<metric>_ms`, with `--save-detailed` the
per-request lists (`ttfts` in seconds, `output_lens`, `errors`), and when the server exposes
spec-decode counters `spec_decode_acceptance_length, spec_decode_num_drafts,
spec_decode_draft_tokens, spec_decode_accepted_tokens,
spec_decode_per_position_acceptance_rates` (server-wide /metrics deltas around the run).

Where its figures mislead (docs/spec.md): ITL and "peak output tokens/s" count stream chunks,
not tokens (with speculation a chunk carries several tokens), so ITL here is the time between
engine steps as a request sees it; TPOT is the per-token figure. Python's json writes NaN for a
metric with no samples: accepted only when no request completed, else the file is refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rocmseat.errors import ParseError
from rocmseat.speculation.documents import DocumentError, load_document


@dataclass(frozen=True, slots=True)
class BenchSpec:
    """The spec-decode section of a result (server-wide deltas over the run)."""

    acceptance_length: float
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    per_position_rates: tuple[float, ...]  # c_i / N (unconditional, non-increasing)


@dataclass(frozen=True, slots=True)
class BenchResult:
    num_prompts: int
    completed: int
    failed: int
    max_concurrency: int | None  # None: no --max-concurrency (all requests at once)
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    output_tokens_per_s: float
    requests_per_s: float
    mean_ttft_ms: float | None
    median_ttft_ms: float | None
    p99_ttft_ms: float | None
    mean_tpot_ms: float | None
    median_tpot_ms: float | None
    p99_tpot_ms: float | None
    mean_itl_ms: float | None  # time between stream chunks = between engine steps
    median_itl_ms: float | None
    ttfts_s: tuple[float, ...] | None  # per request, in request order (--save-detailed)
    spec: BenchSpec | None
    metadata: Mapping[str, str]


_REQUIRED_INTS = ("num_prompts", "completed", "failed", "total_input_tokens",
                  "total_output_tokens")
_REQUIRED_FLOATS = ("duration", "output_throughput", "request_throughput")
_LATENCY = ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
            "p99_tpot_ms", "mean_itl_ms", "median_itl_ms")
# vLLM writes every --metadata KEY=VALUE as a top-level key; these are ours (docs/spec.md).
METADATA_KEYS = ("rocmseat_arm", "rocmseat_phase", "rocmseat_repeat", "rocmseat_k")


# Larger than any count, duration (ms or s) or rate of one benchmark run (1e15 ms is 31,700
# years): a figure beyond it is forged or corrupt, and its square would overflow a float in the
# statistics (mean_itl_ms 1e308 once raised OverflowError in stats.sample_sd).
MAX_FIGURE = 1e15


def _reject_constant(name: str) -> float:
    return float(name)  # NaN / Infinity: parsed, then judged per key below


def parse_bench_result(text: str, name: str) -> BenchResult:
    """One result file's text -> BenchResult; ParseError naming `name` and the key otherwise."""
    try:
        doc = load_document(text, parse_constant=_reject_constant)
    except DocumentError as exc:
        raise ParseError(name, text[:80], f"not a vllm bench serve result ({exc})") from None
    if not isinstance(doc, dict):
        raise ParseError(name, text[:80], "not a vllm bench serve result (not a JSON object)")

    def number(key: str, *, optional: bool = False) -> float | None:
        value = doc.get(key)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ParseError(name, repr(value)[:80], f"key {key!r}: expected a number")
        if not math.isfinite(value):
            if optional and doc.get("completed") == 0:
                return None
            raise ParseError(name, repr(value), f"key {key!r}: not a finite number")
        if value < 0:
            raise ParseError(name, repr(value), f"key {key!r}: negative")
        if value > MAX_FIGURE:
            raise ParseError(name, repr(value)[:80], f"key {key!r}: {value:g} is beyond any "
                             f"figure of a benchmark run (at most {MAX_FIGURE:g})")
        return float(value)

    def integer(key: str) -> int:
        value = number(key)
        assert value is not None
        if value != int(value):
            raise ParseError(name, repr(value), f"key {key!r}: expected a whole number")
        return int(value)

    ints = {key: integer(key) for key in _REQUIRED_INTS}
    floats = {key: number(key) for key in _REQUIRED_FLOATS}
    if ints["completed"] + ints["failed"] > ints["num_prompts"]:
        raise ParseError(name, f"{ints['completed']}+{ints['failed']}",
                         f"completed + failed exceeds num_prompts {ints['num_prompts']}")
    latency = {key: number(key, optional=True) for key in _LATENCY}
    concurrency = doc.get("max_concurrency")
    if concurrency is not None and (isinstance(concurrency, bool)
                                    or not isinstance(concurrency, int) or concurrency < 1):
        raise ParseError(name, repr(concurrency)[:80],
                         "key 'max_concurrency': expected a positive whole number or null")
    return BenchResult(
        num_prompts=ints["num_prompts"],
        completed=ints["completed"],
        failed=ints["failed"],
        max_concurrency=concurrency,
        duration_s=floats["duration"] or 0.0,
        total_input_tokens=ints["total_input_tokens"],
        total_output_tokens=ints["total_output_tokens"],
        output_tokens_per_s=floats["output_throughput"] or 0.0,
        requests_per_s=floats["request_throughput"] or 0.0,
        mean_ttft_ms=latency["mean_ttft_ms"],
        median_ttft_ms=latency["median_ttft_ms"],
        p99_ttft_ms=latency["p99_ttft_ms"],
        mean_tpot_ms=latency["mean_tpot_ms"],
        median_tpot_ms=latency["median_tpot_ms"],
        p99_tpot_ms=latency["p99_tpot_ms"],
        mean_itl_ms=latency["mean_itl_ms"],
        median_itl_ms=latency["median_itl_ms"],
        ttfts_s=_ttfts(doc, name),
        spec=_spec(doc, name),
        metadata={key: str(doc[key]) for key in METADATA_KEYS if key in doc},
    )


def _finite_list(doc: Mapping[str, Any], key: str, name: str) -> tuple[float, ...] | None:
    values = doc.get(key)
    if values is None:
        return None
    if not isinstance(values, list):
        raise ParseError(name, repr(values)[:80], f"key {key!r}: expected a list")
    out: list[float] = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
                value) or not 0 <= value <= MAX_FIGURE:
            raise ParseError(name, repr(value)[:80], f"key {key!r}: not a finite number from 0 "
                             f"to {MAX_FIGURE:g}")
        out.append(float(value))
    return tuple(out)


def _ttfts(doc: Mapping[str, Any], name: str) -> tuple[float, ...] | None:
    values = _finite_list(doc, "ttfts", name)
    if values is None:
        return None
    # A failed request keeps ttft 0.0 in the detailed list (RequestFuncOutput default): drop
    # them by the errors list, which has one entry per request ("" when it succeeded).
    errors = doc.get("errors")
    if isinstance(errors, list) and len(errors) == len(values):
        return tuple(v for v, e in zip(values, errors, strict=True) if not e)
    return values


def _spec(doc: Mapping[str, Any], name: str) -> BenchSpec | None:
    if "spec_decode_num_drafts" not in doc:
        return None
    rates = _finite_list(doc, "spec_decode_per_position_acceptance_rates", name) or ()
    values = {}
    for key in ("spec_decode_num_drafts", "spec_decode_draft_tokens",
                "spec_decode_accepted_tokens", "spec_decode_acceptance_length"):
        value = doc.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(
                value) or not 0 <= value <= MAX_FIGURE:
            raise ParseError(name, repr(value)[:80], f"key {key!r}: not a finite number from 0 "
                             f"to {MAX_FIGURE:g}")
        values[key] = value
    return BenchSpec(
        acceptance_length=float(values["spec_decode_acceptance_length"]),
        drafts=int(values["spec_decode_num_drafts"]),
        draft_tokens=int(values["spec_decode_draft_tokens"]),
        accepted_tokens=int(values["spec_decode_accepted_tokens"]),
        per_position_rates=rates,
    )
