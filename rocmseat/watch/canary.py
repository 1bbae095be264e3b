"""The drafter canary (pure): what one canary request measured, each prompt judged against its own
baseline for the replica's config key, and the canary's tokens taken out of the traffic window.

Why a canary: the /metrics counters judge the drafter on live traffic, so a replica without
traffic says nothing, and a change of traffic mix moves acceptance as much as a broken drafter.
Fixed prompts at temperature 0 ask the same thing of the same drafter every time; each response
carries its own acceptance when the engine runs with `--per-request-spec-decode-metrics summary`
(vllm/entrypoints/openai/completion/serving.py: `metrics.speculative_decoding`, built by
vllm/v1/metrics/stats.py `RequestSpecDecodeMetrics.to_dict`: num_spec_steps, num_draft_tokens,
num_accepted_draft_tokens, acceptance_histogram[j] = verify steps that accepted j drafts).

Per engine (the seat's `[engine] kind`), what one response says:

- vLLM: as above;
- llama.cpp (llama-server): the response's `timings.draft_n` (drafted tokens) and
  `timings.draft_n_accepted` (tools/server/server-context.cpp, `result_timings` filled from the
  slot's `n_draft_total` / `n_draft_accepted`), `usage.completion_tokens` / `prompt_tokens`.
  Its verify steps and per-position counts are not in the response: `subtract` takes them out
  of a window in proportion to the canary's share of the window's drafted tokens
  (`Usage.drafts_known` False), the rate is exact;
- SGLang (native `POST /generate`): `meta_info.spec_verify_ct` (verify steps, set when the
  request finishes with a speculative algorithm: python/sglang/srt/managers/tokenizer_manager.py)
  and `meta_info.completion_tokens` / `prompt_tokens`: accepted = completion - verify steps
  (each step emits its accepted drafts plus one token of the target), drafted = verify steps x
  the seat's draft length.

A round is every prompt once. The first complete round under a config key is that key's
baseline (per prompt: its draft acceptance rate). A prompt collapsed when its rate falls below
`collapse_ratio` times its baseline; a round in which every prompt with a drafting baseline
collapsed raises `drafter_canary_failed` (one round decides: the prompts are greedy, so a healthy
drafter repeats its rate; the alert comes within one canary interval of the first round on the
broken drafter, two at most). A round that is not complete (a prompt failed) judges nothing.

The canary's tokens are not the seat's traffic: `subtract` takes every canary request that
finished inside a /metrics window out of that window's counters (drafts = its verify steps,
accepted per position i = its steps that accepted more than i drafts, generation tokens = its
completion tokens), so the detector and every window-based figure see the traffic alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rocmseat.watch.window import Window

MIN_BASELINE_RATE = 0.05  # a prompt whose baseline drafts almost nothing cannot collapse


class CanaryResponseError(ValueError):
    """A completion response that does not carry a usable per-request acceptance."""


@dataclass(frozen=True, slots=True)
class Usage:
    """What one canary request added to the engine's counters."""

    drafts: int  # verify steps with drafted tokens (vLLM's num_drafts)
    draft_tokens: int
    accepted_tokens: int
    accepted_per_pos: tuple[int, ...]  # steps whose first i+1 drafts were all accepted
    generation_tokens: int
    prompt_tokens: int
    # False: the engine does not say the request's verify steps or per-position counts
    # (llama.cpp): `subtract` scales them by the request's share of drafted tokens
    drafts_known: bool = True

    @property
    def rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else None


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 40:
        raise CanaryResponseError(f"{what}: not a count")
    return value


def parse_response(doc: Any, engine: str = "vllm", draft_length: int | None = None) -> Usage:
    """One canary response (parsed JSON) of the engine -> the request's usage (see the module
    docstring); `draft_length`: the seat's draft tokens per step (SGLang). Hostile input:
    anything that is not the engine's shape is a CanaryResponseError, never a guess."""
    if engine == "llamacpp":
        return parse_llamacpp_response(doc)
    if engine == "sglang":
        return parse_sglang_response(doc, draft_length)
    return parse_vllm_response(doc)


def parse_llamacpp_response(doc: Any) -> Usage:
    """llama-server's /v1/completions response: `timings.draft_n`, `draft_n_accepted`."""
    if not isinstance(doc, Mapping):
        raise CanaryResponseError("the response is not a JSON object")
    timings, usage = doc.get("timings"), doc.get("usage")
    if not isinstance(timings, Mapping) or "draft_n" not in timings:
        raise CanaryResponseError("no timings.draft_n in the response (llama-server without a "
                                  "draft model, or a build before per-request draft timings?)")
    if not isinstance(usage, Mapping):
        raise CanaryResponseError("no usage in the response")
    drafted = _count(timings.get("draft_n"), "timings.draft_n")
    accepted = _count(timings.get("draft_n_accepted"), "timings.draft_n_accepted")
    if accepted > drafted:
        raise CanaryResponseError("more accepted than drafted tokens")
    return Usage(0, drafted, accepted, (),
                 _count(usage.get("completion_tokens"), "usage.completion_tokens"),
                 _count(usage.get("prompt_tokens"), "usage.prompt_tokens"), drafts_known=False)


def parse_sglang_response(doc: Any, draft_length: int | None) -> Usage:
    """SGLang's native /generate response: `meta_info.spec_verify_ct`, `completion_tokens`."""
    if isinstance(doc, list) and len(doc) == 1:
        doc = doc[0]
    meta = doc.get("meta_info") if isinstance(doc, Mapping) else None
    if not isinstance(meta, Mapping):
        raise CanaryResponseError("no meta_info in the response")
    if "spec_verify_ct" not in meta:
        raise CanaryResponseError("no meta_info.spec_verify_ct in the response (the server "
                                  "runs without --speculative-algorithm?)")
    steps = _count(meta.get("spec_verify_ct"), "meta_info.spec_verify_ct")
    completion = _count(meta.get("completion_tokens"), "meta_info.completion_tokens")
    if draft_length is None or draft_length < 1:
        raise CanaryResponseError("the seat's draft length is not known")
    if steps > completion:
        raise CanaryResponseError("more verify steps than completion tokens")
    accepted = completion - steps
    if accepted > steps * draft_length:
        raise CanaryResponseError(f"{accepted} accepted tokens in {steps} steps of at most "
                                  f"{draft_length} drafts")
    return Usage(steps, steps * draft_length, accepted, (), completion,
                 _count(meta.get("prompt_tokens"), "meta_info.prompt_tokens"),
                 drafts_known=True)


def parse_vllm_response(doc: Any) -> Usage:
    """A vLLM /v1/completions response with `metrics.speculative_decoding`."""
    if not isinstance(doc, Mapping):
        raise CanaryResponseError("the response is not a JSON object")
    metrics = doc.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, Mapping) else None
    if not isinstance(spec, Mapping):
        raise CanaryResponseError("no metrics.speculative_decoding in the response (the engine "
                                  "runs without --per-request-spec-decode-metrics?)")
    usage = doc.get("usage")
    if not isinstance(usage, Mapping):
        raise CanaryResponseError("no usage in the response")
    hist = spec.get("acceptance_histogram")
    if not isinstance(hist, list) or not hist or len(hist) > 65:
        raise CanaryResponseError("acceptance_histogram: not a list of counts")
    counts = [_count(h, "acceptance_histogram") for h in hist]
    steps = _count(spec.get("num_spec_steps"), "num_spec_steps")
    drafted = _count(spec.get("num_draft_tokens"), "num_draft_tokens")
    accepted = _count(spec.get("num_accepted_draft_tokens"), "num_accepted_draft_tokens")
    if sum(counts) != steps or sum(j * n for j, n in enumerate(counts)) != accepted:
        raise CanaryResponseError("the histogram does not add up to the steps and accepted "
                                  "tokens it came with")
    if accepted > drafted:
        raise CanaryResponseError("more accepted than drafted tokens")
    per_pos = tuple(sum(counts[j] for j in range(i + 1, len(counts)))
                    for i in range(len(counts) - 1))
    return Usage(steps, drafted, accepted, per_pos,
                 _count(usage.get("completion_tokens"), "usage.completion_tokens"),
                 _count(usage.get("prompt_tokens"), "usage.prompt_tokens"))


def subtract(window: Window, used: Sequence[Usage]) -> Window:
    """The window without the canary requests that finished inside it (never below zero: a
    request counted partly in the window before is cut at zero, not made negative)."""
    if not used:
        return window

    def less(value: float | None, minus: int) -> float | None:
        return None if value is None else max(0.0, value - minus)

    positions = list(window.accepted_per_pos)
    drafts = float(sum(u.drafts for u in used))
    share = 0.0  # of the window's drafted tokens, the requests that do not say their steps
    if window.draft_tokens > 0:
        share = min(1.0, sum(u.draft_tokens for u in used if not u.drafts_known)
                    / window.draft_tokens)
    drafts += share * window.drafts
    for u in used:
        for i, n in enumerate(u.accepted_per_pos[:len(positions)]):
            positions[i] = max(0.0, positions[i] - n)
    if share:
        positions = [max(0.0, c - share * window.accepted_per_pos[i])
                     for i, c in enumerate(positions)]
    return replace(
        window,
        drafts=max(0.0, window.drafts - drafts),
        draft_tokens=max(0.0, window.draft_tokens - sum(u.draft_tokens for u in used)),
        accepted_tokens=max(0.0, window.accepted_tokens - sum(u.accepted_tokens for u in used)),
        accepted_per_pos=tuple(positions),
        generation_tokens=less(window.generation_tokens,
                               sum(u.generation_tokens for u in used)),
        prompt_tokens=less(window.prompt_tokens, sum(u.prompt_tokens for u in used)),
    )


@dataclass(frozen=True, slots=True)
class PromptVerdict:
    prompt: int  # index into the seat's [canary] prompts
    rate: float | None  # this round's draft acceptance rate (None: nothing drafted)
    baseline: float | None
    collapsed: bool


@dataclass(frozen=True, slots=True)
class RoundVerdict:
    learned: bool  # this round became the baseline of the key
    failed: bool  # every prompt with a drafting baseline collapsed
    prompts: tuple[PromptVerdict, ...]

    def details(self) -> dict[str, str]:
        def f(v: float | None) -> str:
            return "-" if v is None or not math.isfinite(v) else f"{v:.3f}"
        return {"rates": ",".join(f(p.rate) for p in self.prompts),
                "baselines": ",".join(f(p.baseline) for p in self.prompts),
                "collapsed": str(sum(p.collapsed for p in self.prompts))}


@dataclass(frozen=True, slots=True)
class CanaryRound:
    """A judged round as remediation reads it (its step 1 verification): when the round began
    (the watcher's clock), whether it failed, and its figures as the alert carries them."""

    started_s: float
    failed: bool
    rates: str
    baselines: str


def judge_round(rates: Sequence[float | None], baseline: Sequence[float | None] | None,
                collapse_ratio: float) -> RoundVerdict:
    """One complete round (a rate per prompt, in prompt order) against the key's baseline (None:
    no baseline yet: this round becomes it)."""
    if baseline is None or len(baseline) != len(rates):
        return RoundVerdict(True, False, tuple(PromptVerdict(i, r, r, False)
                                               for i, r in enumerate(rates)))
    verdicts = []
    for i, (rate, base) in enumerate(zip(rates, baseline, strict=True)):
        judged = base is not None and base >= MIN_BASELINE_RATE
        collapsed = judged and (rate is None or rate < collapse_ratio * (base or 0.0))
        verdicts.append(PromptVerdict(i, rate, base, collapsed))
    judged_prompts = [v for v in verdicts if v.baseline is not None
                      and v.baseline >= MIN_BASELINE_RATE]
    failed = bool(judged_prompts) and all(v.collapsed for v in judged_prompts)
    return RoundVerdict(False, failed, tuple(verdicts))


def saturated(running: float | None, waiting: float | None, max_num_seqs: int) -> bool:
    """The replica has no room for a canary: requests wait, or every sequence slot is taken."""
    return (waiting or 0.0) > 0 or (running or 0.0) >= max_num_seqs


def idle(running: float | None, waiting: float | None) -> bool:
    """Nothing runs or waits (None: not known, not idle)."""
    return running is not None and running == 0 and (waiting or 0.0) == 0


@dataclass(slots=True)
class Budget:
    """Tokens per rolling hour: spent tokens with their times."""

    per_hour: int
    spent: list[tuple[float, int]]

    def left(self, now_s: float) -> int:
        self.spent = [(t, n) for t, n in self.spent if now_s - t < 3600.0]
        return self.per_hour - sum(n for _, n in self.spent)

    def spend(self, now_s: float, tokens: int) -> None:
        self.spent.append((now_s, tokens))
