"""The bracketed gate (`--aba`): the base arm runs again after the candidate (pure).

Arms run one after the other, so whatever the host does in between moves the figures (the
drift, rocmseat.speculation.gate.judge). Running the base before and after the candidate measures
that drift
instead of assuming it, and the two base arms together are the comparison: their pooled repeats
sit on both sides of the candidate in time, which cancels a drift that is linear in time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from rocmseat.speculation.gate.judge import ArmFigures, GateConfig, Series

SECOND_BASE = "base-2"


def _pool(a: Mapping[int, Series], b: Mapping[int, Series]) -> dict[int, Series]:
    return {c: Series(a.get(c, Series(())).values + b.get(c, Series(())).values)
            for c in sorted(set(a) | set(b))}


def measured_drift(first: ArmFigures, second: ArmFigures) -> float | None:
    """The largest |ln(second / first)| of the mean throughput over the common concurrencies."""
    steps = []
    for c in set(first.throughput) & set(second.throughput):
        a, b = first.throughput[c].mean, second.throughput[c].mean
        if a and b:
            steps.append(abs(math.log(b / a)))
    return max(steps) if steps else None


def pooled_base(first: ArmFigures, second: ArmFigures) -> ArmFigures:
    colds = [v for v in (first.cold_ttft_ms, second.cold_ttft_ms) if v is not None]
    kv = [v for v in (first.kv_tokens, second.kv_tokens) if v is not None]
    counters = first.counters
    if counters is not None and second.counters is not None:
        counters = counters + second.counters
    return ArmFigures(
        name="base", k=first.k,
        throughput=_pool(first.throughput, second.throughput),
        itl_ms=_pool(first.itl_ms, second.itl_ms),
        tpot_ms=_pool(first.tpot_ms, second.tpot_ms),
        cold_ttft_ms=math.exp(sum(math.log(v) for v in colds) / len(colds)) if colds else None,
        warm_ttft_ms=Series(first.warm_ttft_ms.values + second.warm_ttft_ms.values),
        prefix_hit_rate=Series(first.prefix_hit_rate.values + second.prefix_hit_rate.values),
        kv_tokens=min(kv) if kv else None,
        max_concurrency=first.max_concurrency,
        failed_requests=first.failed_requests + second.failed_requests,
        hangs=first.hangs + second.hangs,
        counters=counters,
        schedule=first.schedule,
        problems=first.problems + second.problems,
        watch_gaps=first.watch_gaps + second.watch_gaps,
    )


def bracketed_config(config: GateConfig, drift: float | None) -> GateConfig:
    """The drift the gates use: the measured one when it is larger than the assumed one."""
    if drift is None or drift <= config.drift:
        return config
    return replace(config, drift=drift)
