"""A tie is said as a tie (pure): a tier whose gain the measurements cannot tell from K=0, or from
the K the seat drafts there now, is not a reason to change the seat.

A tier ties with K=0 when its stated 90 % interval (with the model's error for a model or
extrapolated tier, rocmseat.speculation.advise.modelerror) contains 1.0x, or, for a measured tier,
when at every concurrency inside it the drafted arm and the base are within each other's noise and
the drift between arms (basis.Observation.loses_to, both ways). It ties with the seat's current K
there when the interval of throughput(K) / throughput(current K), bootstrap and model error alike,
contains 1.0x. Either way the proposal leaves those batch sizes as the seat has them, so `--write`
changes nothing there, and the advice says "no measurable gain at batch a-b".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from rocmseat.speculation.advise.acceptance import Acceptance
from rocmseat.speculation.advise.basis import MEASURED, Decision, Observation, Tier
from rocmseat.speculation.advise.decide import Advice, proposal_of, throughput
from rocmseat.speculation.advise.modelerror import Z90
from rocmseat.speculation.advise.stepcost import StepCost


def _measured_tie(tier: Tier, obs: Sequence[Observation]) -> bool:
    here = [o for o in obs if o.drafter and o.k == tier.k and tier.start <= o.batch <= tier.end]
    pairs = [(o, b) for o in here for b in obs
             if not b.drafter and b.batch == o.batch]
    return bool(pairs) and all(not o.loses_to(b) and not b.loses_to(o) for o, b in pairs)


def _ratio_interval(draws: Sequence[tuple[Acceptance, StepCost]], acceptance: Acceptance,
                    cost: StepCost, *, at: tuple[int, int, int], sigma: float
                    ) -> tuple[float, float, float]:
    """throughput(K) / throughput(other) at `batch`: the prediction and its 90 % interval with
    the bootstrap's spread and the model's log error `sigma`. `at`: (batch, K, other K)."""
    batch, k, other = at
    ratio = throughput(acceptance, cost, batch, k) / throughput(acceptance, cost, batch, other)
    logs = [math.log(throughput(a, c, batch, k) / throughput(a, c, batch, other))
            for a, c in draws]
    boot = 0.0
    if len(logs) > 1:
        m = sum(logs) / len(logs)
        boot = math.sqrt(sum((v - m) ** 2 for v in logs) / (len(logs) - 1))
    spread = Z90 * math.hypot(boot, sigma)
    return ratio, ratio * math.exp(-spread), ratio * math.exp(spread)


def tie_reason(tier: Tier, obs: Sequence[Observation], current_k: int, *,
               ratio: tuple[float, float, float] | None) -> str:
    """'' or the sentence that says this tier changes nothing measurable."""
    span = f"batch {tier.start}-{tier.end}"
    if tier.basis == MEASURED and _measured_tie(tier, obs):
        return (f"no measurable gain at {span}: K=0 and K={tier.k} are equivalent here (the "
                "measured arms tie within their noise and the drift between arms)")
    if ratio is None and tier.k > 0 and tier.gain_low <= 1.0 <= tier.gain_high:
        return (f"no measurable gain at {span}: K=0 and K={tier.k} are equivalent here "
                f"(predicted {tier.band.gain:.2f}x, 90 % {tier.gain_low:.2f}..{tier.gain_high:.2f}"
                " contains 1.0x)")
    if ratio is not None and ratio[1] <= 1.0 <= ratio[2]:
        return (f"no measurable gain at {span}: K={tier.k} and the seat's K={current_k} are "
                f"equivalent here (K={tier.k} over K={current_k}: {ratio[0]:.2f}x, 90 % "
                f"{ratio[1]:.2f}..{ratio[2]:.2f} contains 1.0x)")
    return ""


def settle(decision: Decision, current: Sequence[int], acceptance: Acceptance, cost: StepCost
           ) -> Decision:
    """Every tier judged for a tie; the proposal keeps the seat's K (`current`, index 0 = batch
    size 1) on the tied tiers."""
    sigma = decision.left_out.sigma if decision.left_out is not None else (
        decision.model_error or 0.0)
    table = list(decision.advice.best_k)
    here = list(current[:len(table)]) + [current[-1] if current else 0] * max(
        0, len(table) - len(current))
    tiers = []
    for t in decision.tiers:
        now = here[t.start - 1]
        ratio = None
        if now not in (0, t.k) and all(k == now for k in here[t.start - 1:t.end]):
            ratio = _ratio_interval(decision.advice.draws, acceptance, cost,
                                    at=(t.start, t.k, now),
                                    sigma=0.0 if t.basis == MEASURED else sigma)
        why = tie_reason(t, decision.observations, now, ratio=ratio)
        if why:
            table[t.start - 1:t.end] = here[t.start - 1:t.end]
        tiers.append(replace(t, tie=why))
    if tuple(table) == decision.advice.best_k:
        return replace(decision, tiers=tuple(tiers))
    k, schedule = proposal_of(table)
    advice: Advice = replace(decision.advice, best_k=tuple(table), num_speculative_tokens=k,
                             schedule=schedule)
    return replace(decision, advice=advice, tiers=tuple(tiers))
