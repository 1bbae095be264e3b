"""The `[canary]` table of a seat file: the drafter canary of `rocmseat watch` (docs/watch.md,
"Drafter canary"). Off by default. It is not a config-key factor: with it on, launch adds
`--per-request-spec-decode-metrics summary`, an observability flag (vLLM 0.32
vllm/config/observability.py `ObservabilityConfig.compute_hash` hashes no factor: it does not
change the compiled graph), which rocmseat.cache.key lists among its neutral flags.

The watchdog sends the fixed `prompts` at temperature 0 every `interval_s` (only while the
replica runs no request with `when = "idle"`), reads each response's own acceptance
(`metrics.speculative_decoding`, vllm/v1/metrics/stats.py `RequestSpecDecodeMetrics.to_dict`),
and judges each prompt against that prompt's baseline for the replica's config key; it spends at
most `tokens_per_hour` tokens (prompt and completion) in any hour.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

DEFAULT_PROMPTS = (
    "The history of the printing press begins",
    "A recipe for bread: mix the flour and",
    "def fibonacci(n):",
)


def _float(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


Prompt = Annotated[str, Field(min_length=1, max_length=4096)]


class Canary(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: Annotated[bool, Field(strict=True)] = False
    prompts: Annotated[tuple[Prompt, ...], Field(min_length=1, max_length=32)] = DEFAULT_PROMPTS
    interval_s: Annotated[float, BeforeValidator(_float),
                          Field(strict=True, allow_inf_nan=False, ge=1, le=86_400)] = 60.0
    # "idle": only while the replica runs no request; "always": also beside traffic
    when: Literal["idle", "always"] = "idle"
    tokens_per_hour: Annotated[int, Field(strict=True, ge=100, le=100_000_000)] = 50_000
    max_tokens: Annotated[int, Field(strict=True, ge=4, le=4096)] = 32
    # a prompt collapsed when its acceptance rate falls below this share of its baseline
    collapse_ratio: Annotated[float, BeforeValidator(_float),
                              Field(strict=True, allow_inf_nan=False, gt=0, lt=1)] = 0.5
