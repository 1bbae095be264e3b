"""llama.cpp's llama-server behind the engine seam.

/metrics (llama-server `--metrics`): ggml-org/llama.cpp tools/server/server-task.cpp,
`server_task_result_metrics::to_metrics` (2026): counters `llamacpp:prompt_tokens_total`,
`tokens_predicted_total`, `n_decode_total` (llama_decode() calls, speculative ones excluded),
`spec_decode_num_draft_tokens_total`, `spec_decode_num_accepted_tokens_total`,
`spec_decode_num_drafts_total` ("verification steps"), the labeled counter
`spec_decode_num_accepted_tokens_per_pos_total{position}` (only once a slot has drafted), and
the gauges `requests_processing`, `requests_deferred`. Unlabeled: one server is one engine.
Builds before the spec counters have none of them: `Reading.spec_present` is False and the
detector says it cannot judge (`unknown`), never ok. `llamacpp:kv_cache_usage_ratio` is read where
a build has it (older tools/server/server.cpp); current builds have no KV-usage gauge.

Serve flags (common/arg.cpp, 2026 names): `-m/--model`, `--alias`, `--host`, `--port`,
`--metrics`, `-c/--ctx-size`, `-np/--parallel`, `-b/--batch-size`, `-ngl/--n-gpu-layers`
(`--spec-draft-ngl` for the drafter), and the draft flags
renamed in 2026: `--spec-type` (draft-simple: a draft model), `--spec-draft-model` (was
`--model-draft`/`-md`), `--spec-draft-n-max` (was `--draft-max`). llama.cpp has no compile
cache (its kernels are built ahead of time): no cache variables.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from rocmseat.engines.base import (
    BASIS_ACCEPTED_PER_DRAFT,
    BASIS_PER_POSITION,
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

if TYPE_CHECKING:
    from rocmseat.seat.model import Seat

P: Final = "llamacpp:"
DRAFTS: Final = P + "spec_decode_num_drafts_total"
PER_POS: Final = P + "spec_decode_num_accepted_tokens_per_pos_total"
SUMMED: Final[dict[str, str]] = {
    DRAFTS: "drafts",
    P + "spec_decode_num_draft_tokens_total": "draft_tokens",
    P + "spec_decode_num_accepted_tokens_total": "accepted_tokens",
    P + "tokens_predicted_total": "generation_tokens",
    P + "prompt_tokens_total": "prompt_tokens",
    P + "n_decode_total": "iterations",
}
# gauges: never summed (one server; a proxy that merges pages would double them)
MAXED: Final[dict[str, str]] = {
    P + "requests_processing": "running",
    P + "requests_deferred": "waiting",
    P + "kv_cache_usage_ratio": "kv_usage",
}

# The drafter types the seat's [drafter] method maps to (--spec-type values of common/arg.cpp).
SPEC_TYPES: Final[dict[str, str]] = {
    "draft_model": "draft-simple",
    "eagle3": "draft-eagle3",
    "mtp": "draft-mtp",
    "dflash": "draft-dflash",
    "ngram": "ngram-simple",
}
NEUTRAL_FLAGS: Final = frozenset(
    {"--host", "--port", "--alias", "-a", "--api-key", "--api-key-file", "--metrics",
     "--log-disable", "--log-file", "--log-verbosity", "-lv", "--log-colors", "--slots",
     "--no-slots", "--props", "--timeout", "-to", "--threads-http", "--ssl-key-file",
     "--ssl-cert-file", "--path", "--api-prefix", "--no-webui", "--webui"}
)


def assemble(sums: Sums, maxima: Sums, per_pos: dict[int, float], created: float | None,
             engines: int) -> Reading:
    if "generation_tokens" not in sums:
        raise PageError(f"incomplete page: no {P}tokens_predicted_total (truncated, or "
                        "llama-server without --metrics?)")
    spec = [name in sums for name in ("drafts", "draft_tokens", "accepted_tokens")]
    if any(spec) and not all(spec):
        raise PageError("incomplete spec-decode series (truncated page?)")
    positions: tuple[float, ...] | None = None
    if per_pos:
        if not all(spec):
            raise PageError("per-position series without the draft counters (truncated page?)")
        if sorted(per_pos) != list(range(len(per_pos))):
            raise PageError(f"spec-decode per-position series not 0..K-1 (got "
                            f"{sorted(per_pos)}): truncated?")
        positions = tuple(per_pos[i] for i in range(len(per_pos)))
    kv = maxima.get("kv_usage")
    if kv is not None and kv > 1.0:
        raise PageError(f"impossible values: KV-cache usage {kv!r} is above 1")
    if positions is not None:
        check_spec_counts(sums["drafts"], sums["draft_tokens"], sums["accepted_tokens"],
                          positions, "impossible values")
    elif all(spec) and sums["accepted_tokens"] > sums["draft_tokens"] * 1.01 + 1:
        raise PageError(f"impossible values: {sums['accepted_tokens']:g} accepted tokens of "
                        f"{sums['draft_tokens']:g} drafted")
    return Reading(
        drafts=sums.get("drafts"),
        draft_tokens=sums.get("draft_tokens"),
        accepted_tokens=sums.get("accepted_tokens"),
        accepted_per_pos=positions,
        generation_tokens=sums.get("generation_tokens"),
        prompt_tokens=sums.get("prompt_tokens"),
        iterations=sums.get("iterations"),
        running=maxima.get("running"),
        waiting=maxima.get("waiting"),
        kv_usage=kv,
        created_s=created,
        engines=engines,
        engine="llamacpp",
        # no per-position counters yet (no slot drafted, or a build before them): the
        # acceptance is accepted / drafts alone
        basis=BASIS_PER_POSITION if positions is not None else BASIS_ACCEPTED_PER_DRAFT,
    )


PAGE: Final = PageSpec(
    engine="llamacpp", prefix=P, escaped="llamacpp_", summed=SUMMED, maxed=MAXED,
    per_pos=PER_POS, created=frozenset(), engine_series=DRAFTS, assemble=assemble,
)


def speculative_factors(seat: Seat) -> dict[str, Any] | None:
    if seat.drafter is None:
        return None
    return {
        "spec_type": SPEC_TYPES.get(seat.drafter.method, seat.drafter.method),
        "spec_draft_n_max": seat.drafter.num_speculative_tokens,
        "extra": dict(seat.drafter.extra),
    }


def serve_argv(seat: Seat, port: int) -> tuple[str, ...]:
    """llama-server's argv: the model, its alias, the context and slots, the drafter in the
    2026 flag names, `--metrics` (the watchdog reads /metrics), the listen address."""
    serve = seat.serve
    argv = list(seat.engine.command)
    argv += [seat.engine.model_flag or "--model", str(seat.model.path)]
    argv += ["--alias", seat.model.served_name or seat.name]
    argv += ["--ctx-size", str(serve.max_model_len), "--parallel", str(serve.max_num_seqs)]
    if serve.max_num_batched_tokens is not None:
        argv += ["--batch-size", str(serve.max_num_batched_tokens)]
    gpu = seat.backend == "rocm"
    if gpu:
        # every layer on the replica's GPUs (HIP_VISIBLE_DEVICES shows only its pair; llama.cpp
        # splits the layers over the visible devices by default, --split-mode layer)
        argv += ["--n-gpu-layers", "999"]
    drafter = seat.drafter
    if drafter is not None:
        argv += ["--spec-type", SPEC_TYPES.get(drafter.method, drafter.method)]
        if drafter.path is not None:
            argv += ["--spec-draft-model", str(drafter.path)]
        argv += ["--spec-draft-n-max", str(drafter.num_speculative_tokens)]
        if gpu and drafter.path is not None:
            argv += ["--spec-draft-ngl", "999"]
    argv += ["--metrics", "--host", seat.engine.host, "--port", str(port), *serve.extra_args]
    return tuple(argv)


def looks_like(program: Sequence[str]) -> bool:
    """`llama-server ...` (or a name that says llama-server / llama_server / llamacpp: a site's
    wrapper, rocmseat's own xllamacpp entry point)."""
    if not program:
        return False
    name = os.path.basename(program[0]).lower()
    if any(word in name for word in ("llama-server", "llama_server", "llamacpp", "llama.cpp")):
        return True
    target = python_target(program)  # python -m <llama...> / python <llama...>.py
    return target is not None and "llama" in target[1].lower()


# llama.cpp's memory lines (src/llama-kv-cache.cpp `llama_kv_cache: size = %7.2f MiB (%6u cells,
# ...`, src/llama-model-loader.cpp / llama-model.cpp `load_tensors: ... model buffer size =
# %8.2f MiB`, src/llama-context.cpp `... compute buffer size = %8.2f MiB`).
_KV = re.compile(r"llama_kv_cache(?:_unified)?: +size = +(?P<mib>\d+(?:\.\d+)?) MiB "
                 r"\( *(?P<cells>\d+) cells")
_MODEL = re.compile(r"load_tensors: +\S+ model buffer size = +(?P<mib>\d+(?:\.\d+)?) MiB")
_COMPUTE = re.compile(r"\S+ compute buffer size = +(?P<mib>\d+(?:\.\d+)?) MiB")


def memory_facts(line: str) -> tuple[MemoryFact, ...]:
    if (m := _KV.search(line)) is not None:
        return (MemoryFact("kv_cache_mib", float(m.group("mib")), "MiB"),
                MemoryFact("kv_cache_tokens", float(m.group("cells")), "tokens"))
    if (m := _MODEL.search(line)) is not None:
        return (MemoryFact("model_buffer_mib", float(m.group("mib")), "MiB"),)
    if (m := _COMPUTE.search(line)) is not None:
        return (MemoryFact("compute_buffer_mib", float(m.group("mib")), "MiB"),)
    return ()


READINESS: Final = Readiness("/health", frozenset({503}),
                             "tools/server/server.cpp (503 while loading the model)")


ENGINE: Final = Engine(
    kind="llamacpp", label="llama.cpp", page=PAGE,
    # /health: 503 {"error": {"message": "Loading model"}} while the model loads, 200 once
    # ready (tools/server/server.cpp, the `ex_wrapper`/middleware on SERVER_STATE_LOADING_MODEL):
    # launch keeps waiting on 503, it is not a failure.
    readiness=READINESS,
    cache_subdirs={},
    neutral_flags=NEUTRAL_FLAGS,
    looks_like=looks_like, serve_argv=serve_argv, speculative_factors=speculative_factors,
    memory_facts=memory_facts,
)
