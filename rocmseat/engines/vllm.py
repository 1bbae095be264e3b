"""vLLM behind the engine seam: the serve argv, the speculative key factors, the /metrics page.

Names: vLLM 0.33 `vllm/v1/spec_decode/metrics.py` (SpecDecodingProm) and
`vllm/v1/metrics/loggers.py` (PrometheusStatLogger). Every series carries `model_name` and
`engine`; values are summed over both (a DP replica has one series per engine), except KV-cache
usage, where the fullest engine is the one that matters (max). The serve flags are vLLM's
(`vllm serve --help`, vllm/engine/arg_utils.py; --speculative-config: vllm/config/speculative.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from rocmseat import jsonio
from rocmseat.engines.base import (
    Engine,
    MemoryFact,
    PageError,
    PageSpec,
    Readiness,
    Reading,
    Sums,
    check_spec_counts,
    python_target,
)
from rocmseat.seat.envclass import CACHE_ENV_SUBDIRS

if TYPE_CHECKING:
    from rocmseat.seat.model import Seat

DRAFTS: Final = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS: Final = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED: Final = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS: Final = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
DRAFTS_CREATED: Final = "vllm:spec_decode_num_drafts_created"
GEN_CREATED: Final = "vllm:generation_tokens_created"

# exposition name -> Reading field. Legacy names (vLLM before the V1 renames, absent
# from 0.33.0's vllm/v1/metrics/loggers.py) are read as fallbacks for old images.
SUMMED: Final[dict[str, str]] = {
    DRAFTS: "drafts",
    DRAFT_TOKENS: "draft_tokens",
    ACCEPTED: "accepted_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:num_preemptions_total": "preemptions",
    # engine steps that emitted output (the histogram's count; vllm/v1/metrics/loggers.py
    # PrometheusStatLogger.record observes it once per IterationStats)
    "vllm:iteration_tokens_total_count": "iterations",
    "vllm:prefix_cache_queries_total": "prefix_queries",
    "vllm:prefix_cache_hits_total": "prefix_hits",
    "vllm:gpu_prefix_cache_queries_total": "prefix_queries",
    "vllm:gpu_prefix_cache_hits_total": "prefix_hits",
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
}
MAXED: Final[dict[str, str]] = {
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage",
}
# `_created` (prometheus_client's per-child creation time) changes when the server restarts even
# if the counters happen to have grown past their old values between two scrapes.
CREATED: Final = frozenset({DRAFTS_CREATED, GEN_CREATED})

# Engine arguments that cannot change what is compiled (network, names, logging, auth).
NEUTRAL_FLAGS: Final = frozenset(
    {
        "--port", "--host", "--served-model-name", "--api-key", "--uvicorn-log-level",
        "--disable-log-requests", "--enable-log-requests", "--disable-log-stats",
        "--disable-uvicorn-access-log", "--max-log-len", "--ssl-keyfile", "--ssl-certfile",
        "--root-path", "--allowed-origins", "--allowed-methods", "--allowed-headers",
        "--enable-server-load-tracking", "--middleware", "--chat-template-content-format",
        # observability: ObservabilityConfig.compute_hash has no factors (vllm/config/
        # observability.py, vLLM 0.32): the drafter canary's per-request acceptance
        "--per-request-spec-decode-metrics",
    }
)


def assemble(sums: Sums, maxima: Sums, per_pos: dict[int, float], created: float | None,
             engines: int) -> Reading:
    # Every vLLM page has these two (and spec decode comes before them in the exposition): a
    # page cut at a line boundary inside the spec block would otherwise read as a smaller K.
    for name, series in (("running", "vllm:num_requests_running"),
                         ("generation_tokens", "vllm:generation_tokens_total")):
        if name not in sums:
            raise PageError(f"incomplete page: no {series} (truncated?)")
    spec = [name in sums for name in ("drafts", "draft_tokens", "accepted_tokens")]
    if any(spec) and not all(spec):
        raise PageError("incomplete spec-decode series (truncated page?)")
    positions: tuple[float, ...] | None = None
    if all(spec):
        if sorted(per_pos) != list(range(len(per_pos))) or not per_pos:
            raise PageError(
                f"spec-decode per-position series not 0..K-1 (got {sorted(per_pos)}): truncated?"
            )
        positions = tuple(per_pos[i] for i in range(len(per_pos)))
    elif per_pos:
        raise PageError("per-position series without the draft counters (truncated page?)")
    kv = maxima.get("kv_usage")
    if kv is not None and kv > 1.0:
        raise PageError(f"impossible values: KV-cache usage {kv!r} is above 1")
    if positions is not None:
        check_spec_counts(sums["drafts"], sums["draft_tokens"], sums["accepted_tokens"],
                          positions, "impossible values")
    return Reading(
        drafts=sums.get("drafts"),
        draft_tokens=sums.get("draft_tokens"),
        accepted_tokens=sums.get("accepted_tokens"),
        accepted_per_pos=positions,
        generation_tokens=sums.get("generation_tokens"),
        prompt_tokens=sums.get("prompt_tokens"),
        iterations=sums.get("iterations"),
        preemptions=sums.get("preemptions"),
        prefix_queries=sums.get("prefix_queries"),
        prefix_hits=sums.get("prefix_hits"),
        running=sums.get("running"),
        waiting=sums.get("waiting"),
        kv_usage=maxima.get("kv_usage"),
        created_s=created,
        engines=engines,
    )


PAGE: Final = PageSpec(
    engine="vllm", prefix="vllm:", escaped="vllm_", summed=SUMMED, maxed=MAXED,
    per_pos=PER_POS, created=CREATED, engine_series=DRAFTS, assemble=assemble,
)


def speculative_config(seat: Seat) -> dict[str, Any] | None:
    """The --speculative-config object (vllm/config/speculative.py field names)."""
    drafter = seat.drafter
    if drafter is None:
        return None
    config: dict[str, Any] = {"method": drafter.method}
    if drafter.path is not None:
        config["model"] = str(drafter.path)
    config["num_speculative_tokens"] = drafter.num_speculative_tokens
    if drafter.num_speculative_tokens_per_batch_size is not None:
        config["num_speculative_tokens_per_batch_size"] = [
            list(entry) for entry in drafter.num_speculative_tokens_per_batch_size
        ]
    config.update(sorted(drafter.extra.items()))
    return config


def speculative_factors(seat: Seat) -> dict[str, Any] | None:
    """The key's `speculative` factor (what --speculative-config says, minus the drafter's
    path: the drafter enters the key by its fingerprint)."""
    if seat.drafter is None:
        return None
    schedule = seat.drafter.num_speculative_tokens_per_batch_size
    return {
        "method": seat.drafter.method,
        "num_speculative_tokens": seat.drafter.num_speculative_tokens,
        "num_speculative_tokens_per_batch_size": (
            [list(entry) for entry in schedule] if schedule is not None else None
        ),
        "extra": dict(seat.drafter.extra),
    }


def serve_argv(seat: Seat, port: int) -> tuple[str, ...]:
    serve = seat.serve
    argv = list(seat.engine.command)
    if seat.engine.model_flag:
        argv += [seat.engine.model_flag, str(seat.model.path)]
    else:
        argv.append(str(seat.model.path))
    argv += ["--served-model-name", seat.model.served_name or seat.name]
    if seat.backend == "rocm":
        argv += ["--tensor-parallel-size", str(seat.tp)]
    spec = speculative_config(seat)
    if spec is not None:
        argv += ["--speculative-config", jsonio.dumps_line(spec)]
        if seat.canary.enabled:
            # each response carries its own acceptance for the watchdog's drafter canary
            # (vllm/entrypoints/openai/completion/serving.py: metrics.speculative_decoding);
            # vLLM refuses the flag without a speculative config (vllm/config/vllm.py)
            argv += ["--per-request-spec-decode-metrics", "summary"]
    argv += ["--max-model-len", str(serve.max_model_len), "--max-num-seqs", str(serve.max_num_seqs)]
    if serve.max_num_batched_tokens is not None:
        argv += ["--max-num-batched-tokens", str(serve.max_num_batched_tokens)]
    if seat.backend == "rocm" and serve.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", f"{serve.gpu_memory_utilization:g}"]
    argv += ["--dtype", serve.dtype]
    if serve.quantization:
        argv += ["--quantization", serve.quantization]
    argv += ["--host", seat.engine.host, "--port", str(port), *serve.extra_args]
    return tuple(argv)


def looks_like(program: Sequence[str]) -> bool:
    """`vllm serve ...`, `python -m vllm.entrypoints.openai.api_server ...`, or a program whose
    name says vllm (a site's own wrapper script `vllm-serve`, `run-vllm`)."""
    if not program:
        return False
    name = os.path.basename(program[0]).lower()
    if "vllm" in name:
        return True
    target = python_target(program)
    return target is not None and target[0] == "module" and target[1].split(".", 1)[0] == "vllm"


def memory_facts(line: str) -> tuple[MemoryFact, ...]:
    """vLLM's memory lines are read by rocmseat.launch.startuplog's own patterns (KV cache size,
    available KV cache memory, model loading, graph capture): nothing more here."""
    del line
    return ()


READINESS: Final = Readiness("/health", frozenset(),
                             "vllm/entrypoints/serve/instrumentator/health.py")


ENGINE: Final = Engine(
    kind="vllm", label="vLLM", page=PAGE,
    # /health answers 200 once the API server is up and the engine core is alive, 503 when the
    # engine died (vllm/entrypoints/serve/instrumentator/health.py, vLLM 0.33.0): launch waits
    # for it and a canary completion (rocmseat.launch.readiness).
    readiness=READINESS,
    # every cache the engine, torch.compile, Triton, MIOpen, comgr and AITER write
    # (rocmseat.seat.envclass.CACHE_ENV_SUBDIRS, docs/cache.md)
    cache_subdirs=dict(CACHE_ENV_SUBDIRS),
    neutral_flags=NEUTRAL_FLAGS,
    looks_like=looks_like, serve_argv=serve_argv, speculative_factors=speculative_factors,
    memory_facts=memory_facts,
)
