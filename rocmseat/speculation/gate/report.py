"""The gate's verdicts as a document (`rocmseat.gate/v1`) and as a table (pure)."""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat import exitcodes
from rocmseat.speculation.advise.acceptance import CountersError, estimate
from rocmseat.speculation.advise.schedule import Schedule, as_lists
from rocmseat.speculation.gate.judge import (
    ArmFigures,
    Crossover,
    GateResult,
    Noise,
    Series,
    Verdict,
    overall,
    ratio_gate,
)
from rocmseat.speculation.plot import RatioSeries, gate_picture

SCHEMA = "rocmseat.gate/v1"
VERDICT_WORDS = {exitcodes.OK: "ship", exitcodes.PROBLEM: "do not ship",
                 exitcodes.CANNOT_CHECK: "could not decide"}


def _f(value: float | None, digits: int = 4) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


def series_json(s: Series) -> dict[str, Any]:
    return {"mean": _f(s.mean), "sd": _f(s.sd), "n": s.n, "values": [_f(v) for v in s.values]}


def acceptance_json(fig: ArmFigures) -> dict[str, Any] | None:
    if fig.counters is None:
        return None
    c = fig.counters
    out: dict[str, Any] = {
        "drafts": c.drafts, "draft_tokens": c.draft_tokens, "accepted_tokens": c.accepted_tokens,
        "accepted_per_position": list(c.per_position),
        "acceptance_length": _f(1 + c.accepted_tokens / c.drafts) if c.drafts else None,
        "effective_k": _f(c.draft_tokens / c.drafts) if c.drafts else None,
    }
    try:
        a = estimate(c)
    except CountersError as exc:
        out["error"] = str(exc)
        return out
    out.update({
        "alpha": _f(a.alpha), "alpha_se": _f(a.alpha_se), "shortfall": _f(a.shortfall),
        "conditional": [_f(v) for v in a.conditional],
        "e_measured": [_f(v) for v in a.e_measured],
        "lrt_p": _f(a.lrt_p), "trend": a.trend,
    })
    return out


def figures_json(fig: ArmFigures) -> dict[str, Any]:
    return {
        "throughput_tok_s": {str(c): series_json(s) for c, s in sorted(fig.throughput.items())},
        "itl_ms": {str(c): series_json(s) for c, s in sorted(fig.itl_ms.items())},
        "tpot_ms": {str(c): series_json(s) for c, s in sorted(fig.tpot_ms.items())},
        "cold_ttft_ms": _f(fig.cold_ttft_ms),
        "warm_ttft_ms": series_json(fig.warm_ttft_ms),
        "prefix_hit_rate": series_json(fig.prefix_hit_rate),
        "kv_tokens": fig.kv_tokens,
        "max_concurrency": _f(fig.max_concurrency),
        "failed_requests": fig.failed_requests,
        "hangs": list(fig.hangs),
        "watch_gaps": list(fig.watch_gaps),
        "acceptance": acceptance_json(fig),
    }


def gate_json(g: GateResult) -> dict[str, Any]:
    return {"gate": g.gate, "verdict": g.verdict.value, "base": _f(g.base),
            "candidate": _f(g.candidate), "value": _f(g.value), "threshold": _f(g.threshold),
            "low": _f(g.low), "high": _f(g.high), "repeats_to_decide": g.repeats_to_decide,
            "repeats_to_decide_unit": g.decide_unit, "detail": g.detail}


def crossover_json(c: Crossover) -> dict[str, Any]:
    return {"concurrency": c.concurrency, "last_winning": c.last_winning,
            "threshold": c.threshold, "within_noise": c.within_noise,
            "ratios": {str(k): [_f(x) for x in v] for k, v in sorted(c.ratios.items())}}


def exit_code(results: Sequence[GateResult]) -> int:
    """The exit code of the gates' overall verdict (one rule: gates.overall)."""
    return {Verdict.FAIL: exitcodes.PROBLEM, Verdict.INCONCLUSIVE: exitcodes.CANNOT_CHECK,
            Verdict.PASS: exitcodes.OK}[overall(results)]


def single_stream(base: ArmFigures, cand: ArmFigures, floor: float,
                  drift: float = 0.0) -> GateResult | None:
    if 1 not in base.throughput or 1 not in cand.throughput:
        return None
    return ratio_gate("single_stream", base.throughput[1], cand.throughput[1], 1.0,
                      higher_is_better=True, noise=Noise(floor, drift), unit=" tok/s")


@dataclass(frozen=True, slots=True)
class Comparison:
    """One arm judged against the base."""

    arm: ArmFigures
    gates: tuple[GateResult, ...]
    crossover: Crossover | None
    speedup: GateResult | None

    def json(self) -> dict[str, Any]:
        return {"arm": self.arm.name, "gates": [gate_json(g) for g in self.gates],
                "verdict": VERDICT_WORDS[exit_code(self.gates)],
                "crossover": None if self.crossover is None else crossover_json(self.crossover),
                "single_stream_speedup": None if self.speedup is None else gate_json(
                    self.speedup)}


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def _mean_sd(series: Mapping[int, Series], c: int, spec: str) -> str:
    s = series.get(c)
    if s is None or s.mean is None:
        return "-"
    return _fmt(s.mean, spec) + ("" if s.sd is None else f"±{s.sd:{spec}}")


def verify_schedule_command(base_seat: Path, candidate_seat: Path, concurrency: Sequence[int],
                   repeats: int, out: Path) -> str:
    """The gate again with the proposal as a third arm (a runnable command line)."""
    levels = ",".join(str(c) for c in concurrency)
    return (f"rocmseat spec gate {shlex.quote(str(base_seat))} "
            f"{shlex.quote(str(candidate_seat))} --verify-schedule --concurrency {levels} "
            f"--repeats {repeats} --out {shlex.quote(f'{out}-verify')}")


def render_table(arms: Sequence[ArmFigures], memory: Mapping[str, str], *,
                 comparisons: Sequence[Comparison], proposal: Schedule | None,
                 proposal_note: str, picture: str, verify: str | None = None,
                 answer: Sequence[str] = ()) -> str:
    levels = sorted({c for a in arms for c in a.throughput})
    lines = []
    head = f"{'':<22}" + "".join(f"{a.name:>22}" for a in arms)
    lines.append(head)

    def row(label: str, cells: Sequence[str]) -> None:
        lines.append(f"{label:<22}" + "".join(f"{c:>22}" for c in cells))

    row("draft length K", [str(a.k) + (" (schedule)" if a.schedule else "") for a in arms])
    for c in levels:
        row(f"tok/s @{c}", [_mean_sd(a.throughput, c, ".1f") for a in arms])
    for c in levels:
        row(f"TPOT ms @{c}", [_mean_sd(a.tpot_ms, c, ".2f") for a in arms])
    row("cold TTFT ms", [_fmt(a.cold_ttft_ms, ".1f") for a in arms])
    row("warm TTFT ms", [_fmt(a.warm_ttft_ms.mean, ".1f") for a in arms])
    row("prefix hit rate", [_fmt(a.prefix_hit_rate.mean, ".3f") for a in arms])
    row("acceptance length", [_fmt(1 + a.counters.accepted_tokens / a.counters.drafts, ".2f")
                              if a.counters and a.counters.drafts else "-" for a in arms])
    row("KV pool tokens", ["-" if a.kv_tokens is None else f"{a.kv_tokens:,}" for a in arms])
    row("max concurrency", [_fmt(a.max_concurrency, ".2f") for a in arms])
    row("memory plan", [memory.get(a.name, "-") for a in arms])
    row("failed requests", [str(a.failed_requests) for a in arms])
    row("hangs", [str(len(a.hangs)) for a in arms])
    for comp in comparisons:
        lines.append("")
        lines.append(f"gates: {comp.arm.name} vs base -> {VERDICT_WORDS[exit_code(comp.gates)]}")
        for g in comp.gates:
            more = ""
            if g.verdict is Verdict.INCONCLUSIVE:
                more = (f"; {g.repeats_to_decide} {g.decide_unit} would decide"
                        if g.repeats_to_decide else
                        f"; no number of {g.decide_unit.removesuffix(' per arm')} decides it "
                        "(the difference lies inside the drift between arms)")
            lines.append(f"  {g.verdict.value:<12} {g.gate:<16} {g.detail}{more}")
        if comp.speedup is not None:
            lines.append(f"  {'(info)':<12} {'single stream':<16} {comp.speedup.detail}")
        if comp.crossover is not None:
            cx = comp.crossover
            if cx.concurrency is None:
                lines.append(f"  {'(info)':<12} {'crossover':<16} none: the {comp.arm.name} "
                             "holds at every measured concurrency")
            else:
                noise = " (inside the noise)" if cx.within_noise else ""
                lines.append(f"  {'(info)':<12} {'crossover':<16} concurrency {cx.concurrency}"
                             f"{noise}; last held at {cx.last_winning or '-'}")
    lines.append("")
    failed = next((c for c in comparisons if proposal is not None and c.arm.schedule is not None
                   and as_lists(c.arm.schedule) == as_lists(proposal)
                   and exit_code(c.gates) == exitcodes.PROBLEM), None)
    if failed is not None and proposal is not None:
        # its own third arm measured it: not a proposal any more (one answer, issue 27)
        lines.append(f"the crossover's num_speculative_tokens_per_batch_size = "
                     f"{as_lists(proposal)} ran as the arm '{failed.arm.name}': "
                     f"{VERDICT_WORDS[exit_code(failed.gates)]}; not proposed")
    elif proposal is not None:
        lines.append(f"proposed num_speculative_tokens_per_batch_size = {as_lists(proposal)}")
    lines.append(proposal_note)
    lines += answer  # the one answer with `spec advise` (rocmseat.speculation.advise.verdict)
    if proposal is not None and verify is not None and not any(a.schedule for a in arms):
        lines.append("next: the proposal is interpolated from the crossover, not measured; run "
                     "it as a third arm before it serves:")
        lines.append(f"  {verify}")
    lines.append(f"picture: {picture}")
    return "\n".join(lines) + "\n"


def ratio_series(comparisons: Sequence[Comparison]) -> list[RatioSeries]:
    """What gate.png's upper panel draws: each compared arm's ratio to the base with its 95 %
    band, its crossover and its verdict."""
    return [RatioSeries(c.arm.name, _verdict_words(c),
                        dict(c.crossover.ratios) if c.crossover else {},
                        c.crossover.concurrency if c.crossover else None)
            for c in comparisons]


def _verdict_words(c: Comparison) -> str:
    """'do not ship (FAIL aggregate@64 0.536x)': the verdict and the gates that are not PASS."""
    shown = [f"{g.verdict.value} {g.gate}" + (f" {g.value:.3g}x" if g.value is not None
                                               and g.gate.startswith("aggregate") else "")
             for g in c.gates if g.verdict is not Verdict.PASS]
    words = VERDICT_WORDS[exit_code(c.gates)]
    return f"{words} ({', '.join(shown)})" if shown else words


def draw(path: Path, arms: Sequence[ArmFigures], comparisons: Sequence[Comparison],
         threshold: float) -> Path:
    """gate.png: the ratio to the base (does it pay, up to which load) and the tokens/s."""
    series = [(a.name, {c: list(s.values) for c, s in a.throughput.items()}) for a in arms]
    return gate_picture(path, series, ratio_series(comparisons), threshold)
