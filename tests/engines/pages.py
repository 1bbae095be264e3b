"""/metrics pages of SGLang and llama.cpp, written from each engine's own metrics code.

SGLang cannot serve on these CPUs and its collector does not import without torch, so its pages
are made here the way SGLang makes them: prometheus_client metric objects with SGLang's names,
documentation, label names and kinds, from sglang 0.5.23 (PyPI)
`sglang/srt/observability/metrics_collector.py`:

- `TokenizerMetricsCollector.__init__` (Counters `sglang:prompt_tokens_total`,
  `sglang:generation_tokens_total` with labels + `is_streaming`, `sglang:spec_verify_calls_total`
  with the labels), labels `tokenizer_metric_labels()` = {model_name, engine_type};
  `observe_one_finished_request` increments them once per finished request, the verify counter
  only when spec_verify_ct > 0;
- `SchedulerMetricsCollector.__init__` (Gauges `sglang:num_running_reqs`, `num_queue_reqs`,
  `token_usage`, `spec_accept_length`, `spec_accept_rate`), labels {model_name, engine_type,
  tp_rank, pp_rank, moe_ep_rank} (`SchedulerMetricsMixin` in the same file): one series per TP
  rank, each rank setting the same values.

llama.cpp's pages are its `server_task_result_metrics::to_metrics` text (ggml-org/llama.cpp
tools/server/server-task.cpp, 2026): `# HELP`/`# TYPE` and one unlabeled sample per metric,
the per-position counter labeled `position` only once a slot has drafted.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

TOKENIZER_LABELS = ("model_name", "engine_type")
SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")


def sglang_page(*, generated: float, prompt: float, verify: float | None,
                running: float = 4.0, queued: float = 0.0, token_usage: float = 0.25,
                accept_length: float | None = None, tp: int = 2,
                streaming_share: float = 0.5) -> str:
    """One SGLang page: the counters as totals over finished requests (split over
    is_streaming), the scheduler gauges on every TP rank. `verify` None: no speculating request
    has finished (the labeled counter has no child yet, so no sample)."""
    registry = CollectorRegistry()
    labels = {"model_name": "tiny", "engine_type": "unified"}
    prompt_c = Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.",
                       [*TOKENIZER_LABELS, "is_streaming"], registry=registry)
    gen_c = Counter("sglang:generation_tokens_total", "Number of generation tokens processed.",
                    [*TOKENIZER_LABELS, "is_streaming"], registry=registry)
    verify_c = Counter("sglang:spec_verify_calls_total",
                       "Number of speculative decoding verification calls.",
                       list(TOKENIZER_LABELS), registry=registry)
    for streaming, share in (("true", streaming_share), ("false", 1.0 - streaming_share)):
        prompt_c.labels(**labels, is_streaming=streaming).inc(prompt * share)
        gen_c.labels(**labels, is_streaming=streaming).inc(generated * share)
    if verify is not None:
        verify_c.labels(**labels).inc(verify)
    gauges = {
        "sglang:num_running_reqs": ("The number of running requests.", running),
        "sglang:num_queue_reqs": ("The number of requests in the waiting queue.", queued),
        "sglang:token_usage": ("The token usage.", token_usage),
    }
    if accept_length is not None:
        gauges["sglang:spec_accept_length"] = (
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per "
            "forward).", accept_length)
        gauges["sglang:spec_accept_rate"] = (
            "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
            max(accept_length - 1.0, 0.0) / 3.0)
    for name, (doc, value) in gauges.items():
        gauge = Gauge(name, doc, list(SCHEDULER_LABELS), registry=registry)
        for rank in range(tp):
            gauge.labels(model_name="tiny", engine_type="unified", tp_rank=str(rank),
                         pp_rank="0", moe_ep_rank="0").set(value)
    return generate_latest(registry).decode()


_LLAMA_COUNTERS = (
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "Total time spent processing prompts"),
    ("tokens_predicted_total", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens"),
    ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding "
     "and multimodal decoding"),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)"),
)
_LLAMA_SPEC = (
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total",
     "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps"),
)
_LLAMA_GAUGES = (
    ("prompt_tokens_seconds", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "Average generation throughput in tokens/s"),
    ("requests_processing", "Number of requests processing"),
    ("requests_deferred", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call"),
)


def _num(value: float) -> str:
    # std::stringstream << double: 6 significant digits, integers without a point
    return f"{value:.6g}"


def llama_page(*, predicted: float, prompt: float, decodes: float,
               drafts: float | None = None, draft_tokens: float = 0.0, accepted: float = 0.0,
               per_pos: Sequence[float] | None = None, processing: float = 1.0,
               deferred: float = 0.0) -> str:
    """One llama-server page. `drafts` None: a build before the spec counters."""
    values = {
        "prompt_tokens_total": prompt, "prompt_tokens_cached_total": 0.0,
        "prompt_seconds_total": prompt / 1000.0, "tokens_predicted_total": predicted,
        "tokens_predicted_seconds_total": predicted / 50.0, "n_decode_total": decodes,
        "n_tokens_max": 512.0, "prompt_tokens_seconds": 1000.0,
        "predicted_tokens_seconds": 50.0, "requests_processing": processing,
        "requests_deferred": deferred, "n_busy_slots_per_decode": 1.0,
        "spec_decode_num_draft_tokens_total": draft_tokens,
        "spec_decode_num_accepted_tokens_total": accepted,
        "spec_decode_num_drafts_total": drafts or 0.0,
    }
    lines: list[str] = []
    counters = _LLAMA_COUNTERS + (_LLAMA_SPEC if drafts is not None else ())
    for kind, items in (("counter", counters), ("gauge", _LLAMA_GAUGES)):
        for name, doc in items:
            lines += [f"# HELP llamacpp:{name} {doc}", f"# TYPE llamacpp:{name} {kind}",
                      f"llamacpp:{name} {_num(values[name])}"]
    if per_pos:
        lines += ["# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens "
                  "per draft position",
                  "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter"]
        lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} '
                  f"{_num(v)}" for i, v in enumerate(per_pos)]
    return "\n".join(lines) + "\n"
