"""SGLang behind the engine seam.

Source read: sglang 0.5.23 (PyPI, `pip install sglang --no-deps`), whose metrics moved from
python/sglang/srt/metrics/collector.py to sglang/srt/observability/metrics_collector.py:

- `TokenizerMetricsCollector` counters `sglang:prompt_tokens_total`,
  `sglang:generation_tokens_total` (labels + `is_streaming`) and `sglang:spec_verify_calls_total`,
  all incremented once per *finished* request (`observe_one_finished_request`: the verify
  count only when > 0, so the series is absent until a speculating request has finished);
- `SchedulerMetricsCollector` gauges `sglang:num_running_reqs`, `num_queue_reqs`, `token_usage`,
  and `spec_accept_length` / `spec_accept_rate`, set per log interval from per-interval sums
  that are reset after each log (sglang/srt/managers/scheduler_components/metrics_reporter.py:
  `spec_num_accept_tokens / spec_num_forward_ct`, then both set to 0): a windowed figure.

So the acceptance is read from the counters: acceptance length = Δgeneration / Δverify calls,
accepted drafted tokens = Δgeneration - Δverify calls (each verify step emits its accepted drafts
plus one token of its own). Valid only while every running request speculates (a request served
without speculation adds tokens and no verify call); the basis says so. The windowed gauges are
shown, never judged. Counters are summed over every label set (model, engine, DP/TP ranks);
gauges are never summed (every TP rank reports the same running count): the largest.

Serve flags: sglang 0.5.23 sglang/srt/arg_groups/fields/*.py (each field `x_y` is `--x-y`,
sglang/srt/arg_groups/arg_utils.py), checked against tests/fixtures/engines/
sglang-0.5.23-flags.txt. Caches: sglang/srt/environ.py `third_party_cache_defaults` (Triton,
TorchInductor, TileLang, FlashInfer under SGLANG_CACHE_DIR) and SGLANG_CACHE_DIR's own
(deep_gemm, cute_aot, jit), plus the ROCm ones every engine on the node uses.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from rocmseat.engines.base import (
    BASIS_VERIFY_STEPS,
    Engine,
    MemoryFact,
    PageError,
    PageSpec,
    Readiness,
    Reading,
    Sums,
    python_target,
)

if TYPE_CHECKING:
    from rocmseat.seat.model import Seat

P: Final = "sglang:"
VERIFY: Final = P + "spec_verify_calls_total"
SUMMED: Final[dict[str, str]] = {
    VERIFY: "drafts",
    P + "generation_tokens_total": "generation_tokens",
    P + "prompt_tokens_total": "prompt_tokens",
}
MAXED: Final[dict[str, str]] = {
    P + "num_running_reqs": "running",
    P + "num_queue_reqs": "waiting",
    P + "token_usage": "kv_usage",
    P + "spec_accept_length": "windowed_acceptance_length",
}

# [drafter] method -> --speculative-algorithm (sglang/srt/arg_groups/fields/spec.py: "Builtins:
# EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO")
ALGORITHMS: Final[dict[str, str]] = {
    "eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN", "draft_model": "STANDALONE",
    "ngram": "NGRAM", "dflash": "DFLASH", "dspark": "DSPARK",
}
NEUTRAL_FLAGS: Final = frozenset(
    {"--host", "--port", "--served-model-name", "--api-key", "--enable-metrics",
     "--log-level", "--log-level-http", "--log-requests", "--log-requests-level",
     "--show-time-cost", "--decode-log-interval", "--admin-api-key"}
)
CACHE_SUBDIRS: Final[dict[str, str]] = {
    "SGLANG_CACHE_DIR": "sglang",
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TILELANG_CACHE_DIR": "tilelang",
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "MIOPEN_USER_DB_PATH": "miopen/db",
    "MIOPEN_CUSTOM_CACHE_DIR": "miopen/cache",
    "AMD_COMGR_CACHE_DIR": "comgr",
    "AITER_JIT_DIR": "aiter-jit",
    "XDG_CACHE_HOME": "xdg-cache",
}


def assemble(sums: Sums, maxima: Sums, per_pos: dict[int, float], created: float | None,
             engines: int) -> Reading:
    del per_pos  # SGLang has no per-position counters
    verify = sums.get("drafts")
    generated = sums.get("generation_tokens")
    accepted: float | None = None
    if verify is not None:
        if generated is None:
            raise PageError(f"incomplete page: {VERIFY} without {P}generation_tokens_total "
                            "(truncated?)")
        if generated + 1.0 + 0.01 * generated < verify:
            raise PageError(f"impossible values: {verify:g} verify steps emitted only "
                            f"{generated:g} tokens (each emits at least one)")
        accepted = max(generated - verify, 0.0)
    kv = maxima.get("kv_usage")
    if kv is not None and kv > 1.0:
        raise PageError(f"impossible values: token usage {kv!r} is above 1")
    return Reading(
        drafts=verify,
        accepted_tokens=accepted,
        generation_tokens=generated,
        prompt_tokens=sums.get("prompt_tokens"),
        running=maxima.get("running"),
        waiting=maxima.get("waiting"),
        kv_usage=kv,
        created_s=created,
        engines=engines,
        engine="sglang",
        basis=BASIS_VERIFY_STEPS,
        windowed_acceptance_length=maxima.get("windowed_acceptance_length"),
    )


PAGE: Final = PageSpec(
    engine="sglang", prefix=P, escaped="sglang_", summed=SUMMED, maxed=MAXED, per_pos=None,
    created=frozenset(), engine_series=VERIFY, assemble=assemble,
)


def _draft_flags(seat: Seat) -> list[str]:
    drafter = seat.drafter
    if drafter is None:
        return []
    k = drafter.num_speculative_tokens
    flags = ["--speculative-algorithm", ALGORITHMS.get(drafter.method, drafter.method.upper())]
    if drafter.path is not None:
        flags += ["--speculative-draft-model-path", str(drafter.path)]
    # a chain (top-k 1) of K steps verifies K + 1 tokens (sglang docs, speculative decoding:
    # num_draft_tokens = num_steps + 1 when eagle_topk is 1)
    flags += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
              "--speculative-num-draft-tokens", str(k + 1)]
    return flags


def speculative_factors(seat: Seat) -> dict[str, Any] | None:
    if seat.drafter is None:
        return None
    k = seat.drafter.num_speculative_tokens
    return {
        "speculative_algorithm": ALGORITHMS.get(seat.drafter.method, seat.drafter.method.upper()),
        "speculative_num_steps": k,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": k + 1,
        "extra": dict(seat.drafter.extra),
    }


def serve_argv(seat: Seat, port: int) -> tuple[str, ...]:
    serve = seat.serve
    argv = list(seat.engine.command)
    argv += [seat.engine.model_flag or "--model-path", str(seat.model.path)]
    argv += ["--served-model-name", seat.model.served_name or seat.name]
    if seat.backend == "rocm":
        argv += ["--tp-size", str(seat.tp)]
    argv += _draft_flags(seat)
    argv += ["--context-length", str(serve.max_model_len),
             "--max-running-requests", str(serve.max_num_seqs)]
    if serve.max_num_batched_tokens is not None:
        argv += ["--chunked-prefill-size", str(serve.max_num_batched_tokens)]
    if seat.backend == "rocm" and serve.gpu_memory_utilization is not None:
        argv += ["--mem-fraction-static", f"{serve.gpu_memory_utilization:g}"]
    argv += ["--dtype", serve.dtype]
    if serve.quantization:
        argv += ["--quantization", serve.quantization]
    # SGLang serves no /metrics without it (sglang/srt/arg_groups/fields/observability.py)
    argv += ["--enable-metrics", "--host", seat.engine.host, "--port", str(port),
             *serve.extra_args]
    return tuple(argv)


def looks_like(program: Sequence[str]) -> bool:
    """`python -m sglang.launch_server ...`, `sglang serve ...`, or a name that says sglang."""
    if not program:
        return False
    name = os.path.basename(program[0]).lower()
    if "sglang" in name:
        return True
    target = python_target(program)
    return (target is not None and target[0] == "module"
            and target[1].split(".", 1)[0] == "sglang")


# sglang 0.5.23 sglang/srt/model_executor/model_runner.py "Load weight end. elapsed=..., avail
# mem=%.2f GB, mem usage=%.2f GB." and sglang/srt/mem_cache/memory_pool.py "<cache> is allocated.
# dtype: ..., #tokens: N, K size: x GB, V size: y GB" (or "KV size: z GB" for one pool); SGLang's
# GB is 1 << 30 bytes (memory_pool.py GB).
_WEIGHTS = re.compile(r"Load weight end\..*?mem usage=(?P<gb>\d+(?:\.\d+)?) GB")
_KV = re.compile(r"is allocated\. dtype: \S+, #tokens: (?P<tokens>\d+), (?:K size: "
                 r"(?P<k>\d+(?:\.\d+)?) GB, V size: (?P<v>\d+(?:\.\d+)?) GB|KV size: "
                 r"(?P<kv>\d+(?:\.\d+)?) GB)")


def memory_facts(line: str) -> tuple[MemoryFact, ...]:
    if (m := _KV.search(line)) is not None:
        gib = (float(m.group("kv")) if m.group("kv") is not None
               else float(m.group("k")) + float(m.group("v")))
        return (MemoryFact("kv_cache_tokens", float(m.group("tokens")), "tokens"),
                MemoryFact("kv_cache_gib", gib, "GiB"))
    if (m := _WEIGHTS.search(line)) is not None:
        return (MemoryFact("model_weights_gib", float(m.group("gb")), "GiB"),)
    return ()


READINESS: Final = Readiness("/health", frozenset({503}),
                             "sglang/srt/entrypoints/http_server.py (health_generate)")


ENGINE: Final = Engine(
    kind="sglang", label="SGLang", page=PAGE,
    # /health answers 200 once the server and a scheduler answered a health generation, 503
    # while it warms up or after it failed (sglang/srt/entrypoints/http_server.py health_generate)
    readiness=READINESS,
    cache_subdirs=dict(CACHE_SUBDIRS),
    neutral_flags=NEUTRAL_FLAGS,
    looks_like=looks_like, serve_argv=serve_argv, speculative_factors=speculative_factors,
    memory_facts=memory_facts,
)
