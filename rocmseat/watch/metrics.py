"""Read the few vLLM series the watchdog needs from a /metrics page (text or OpenMetrics).

`read_page` is the targeted fast reader the watch loop uses; `read_page_reference` builds the same
`Reading` with prometheus_client's full parser. Tests hold the two equal on every fixture page
and on hypothesis-generated pages; bench/bench_watch_parse.py measures the difference.

Names: vLLM 0.33 `vllm/v1/spec_decode/metrics.py` (SpecDecodingProm) and
`vllm/v1/metrics/loggers.py` (PrometheusStatLogger). Every series
carries `model_name` and `engine`; values are summed over both (a DP replica has one series per
engine), except KV-cache usage, where the fullest engine is the one that matters (max).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rocmseat.errors import RocmseatError

DRAFTS: Final = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS: Final = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED: Final = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS: Final = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
DRAFTS_CREATED: Final = "vllm:spec_decode_num_drafts_created"
GEN_CREATED: Final = "vllm:generation_tokens_created"

# exposition name -> Reading field. Legacy names (vLLM before the V1 renames, absent
# from 0.33.0's vllm/v1/metrics/loggers.py) are read as fallbacks for old images.
_SUMMED: Final[dict[str, str]] = {
    DRAFTS: "drafts",
    DRAFT_TOKENS: "draft_tokens",
    ACCEPTED: "accepted_tokens",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:prompt_tokens_total": "prompt_tokens",
    "vllm:num_preemptions_total": "preemptions",
    "vllm:prefix_cache_queries_total": "prefix_queries",
    "vllm:prefix_cache_hits_total": "prefix_hits",
    "vllm:gpu_prefix_cache_queries_total": "prefix_queries",
    "vllm:gpu_prefix_cache_hits_total": "prefix_hits",
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
}
_MAXED: Final[dict[str, str]] = {
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage",
}
# `_created` (prometheus_client's per-child creation time) changes when the server restarts even
# if the counters happen to have grown past their old values between two scrapes.
_CREATED: Final = frozenset({DRAFTS_CREATED, GEN_CREATED})
_WANTED: Final = frozenset(_SUMMED) | frozenset(_MAXED) | _CREATED | {PER_POS}
_SAMPLE_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:#")


class PageError(RocmseatError):
    """The page is not a usable vLLM /metrics page (HTML, truncated, garbage): a scrape error."""


@dataclass(frozen=True, slots=True)
class Reading:
    """The counters and gauges of one scrape, summed over engines and models.

    `None` means the series is absent from the page. The four spec-decode counters are either all
    present or all None (`PageError` otherwise); `accepted_per_pos[i]` counts drafts whose first
    i+1 tokens were accepted (vLLM SpecDecodingStats.observe_draft).
    """

    drafts: float | None = None
    draft_tokens: float | None = None
    accepted_tokens: float | None = None
    accepted_per_pos: tuple[float, ...] | None = None
    generation_tokens: float | None = None
    prompt_tokens: float | None = None
    preemptions: float | None = None
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    created_s: float | None = None
    engines: int = 0

    @property
    def spec_present(self) -> bool:
        return self.drafts is not None


def _unescape(name: str) -> str:
    # prometheus_client >= 0.22 escapes ':' to '_' in OpenMetrics sample names unless the scraper
    # asks for `escaping=allow-utf-8` (the HELP/TYPE lines keep the colon): the fixture
    # vllm-qwen-dp2-k7.openmetrics.txt is such a page. Every vLLM series is named `vllm:...`.
    return "vllm:" + name[5:] if name.startswith("vllm_") else name


def _labels_value(line: str, number: int) -> tuple[str, float]:
    brace = line.find("{")
    space = line.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        close = line.rfind("}")
        if close == -1:
            raise PageError(f"line {number}: unterminated label set: {line[:80]!r}")
        labels, rest = line[brace + 1 : close], line[close + 1 :]
    else:
        labels, rest = "", line[space:] if space != -1 else ""
    fields = rest.split()
    if not fields:
        raise PageError(f"line {number}: sample without a value: {line[:80]!r}")
    try:
        return labels, float(fields[0])
    except ValueError:
        raise PageError(f"line {number}: not a number: {line[:80]!r}") from None


def _label(labels: str, name: str) -> str | None:
    key = f'{name}="'
    at = labels.find(key)
    if at == -1 or (at > 0 and labels[at - 1] not in ", "):
        return None
    start = at + len(key)
    end = labels.find('"', start)
    return labels[start:end] if end != -1 else None


def check_page_shape(text: str) -> None:
    """Refuse what is not an exposition page: empty, HTML, truncated (no final newline)."""
    head = text.lstrip()[:512].lower()
    if not head:
        raise PageError("empty page")
    if head.startswith("<") or "<html" in head or "<!doctype" in head:
        raise PageError("an HTML page, not Prometheus metrics (wrong URL or a proxy error page?)")
    if not text.endswith("\n"):
        # generate_latest() ends every page with a newline (and OpenMetrics with "# EOF\n").
        raise PageError("truncated page (no final newline)")


def read_page(text: str) -> Reading:
    """The targeted reader: one pass, and only lines that start with `vllm:` are split."""
    check_page_shape(text)
    sums: dict[str, float] = {}
    maxima: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    engines: set[str] = set()
    created: float | None = None
    saw_vllm = False
    for number, line in enumerate(text.split("\n"), start=1):
        if not line:
            continue
        if line[0] not in _SAMPLE_START:
            raise PageError(f"line {number} is not exposition format: {line[:80]!r}")
        if not line.startswith(("vllm:", "vllm_")):
            continue
        saw_vllm = True
        cut = line.find("{")
        name = line[:cut] if cut != -1 else line.split(" ", 1)[0]
        if name[4] == "_":
            name = _unescape(name)
        if name not in _WANTED:
            continue
        labels, value = _labels_value(line, number)
        if name == PER_POS:
            position = _label(labels, "position")
            if position is None or not position.isdigit():
                raise PageError(f"line {number}: per-position series without a position label")
            per_pos[int(position)] = per_pos.get(int(position), 0.0) + value
        elif name in _CREATED:
            created = value if created is None else min(created, value)
        elif (field := _SUMMED.get(name)) is not None:
            sums[field] = sums.get(field, 0.0) + value
            if name == DRAFTS:
                engines.add(f"{_label(labels, 'model_name')}/{_label(labels, 'engine')}")
        else:
            field = _MAXED[name]
            maxima[field] = max(maxima.get(field, value), value)
    if not saw_vllm:
        raise PageError("no vllm: series on the page (not a vLLM /metrics endpoint?)")
    return _assemble(sums, maxima, per_pos, created, len(engines))


def _assemble(
    sums: dict[str, float],
    maxima: dict[str, float],
    per_pos: dict[int, float],
    created: float | None,
    engines: int,
) -> Reading:
    # Every vLLM page has these two (and spec decode comes before them in the exposition): a
    # page cut at a line boundary inside the spec block would otherwise read as a smaller K.
    for field, series in (("running", "vllm:num_requests_running"),
                          ("generation_tokens", "vllm:generation_tokens_total")):
        if field not in sums:
            raise PageError(f"incomplete page: no {series} (truncated?)")
    spec = [field in sums for field in ("drafts", "draft_tokens", "accepted_tokens")]
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
    return Reading(
        drafts=sums.get("drafts"),
        draft_tokens=sums.get("draft_tokens"),
        accepted_tokens=sums.get("accepted_tokens"),
        accepted_per_pos=positions,
        generation_tokens=sums.get("generation_tokens"),
        prompt_tokens=sums.get("prompt_tokens"),
        preemptions=sums.get("preemptions"),
        prefix_queries=sums.get("prefix_queries"),
        prefix_hits=sums.get("prefix_hits"),
        running=sums.get("running"),
        waiting=sums.get("waiting"),
        kv_usage=maxima.get("kv_usage"),
        created_s=created,
        engines=engines,
    )


def read_page_reference(text: str) -> Reading:
    """The same Reading through prometheus_client's full parser (validation and the benchmark)."""
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )
    from prometheus_client.parser import text_string_to_metric_families

    check_page_shape(text)
    parse = openmetrics_families if text.rstrip().endswith("# EOF") else (
        text_string_to_metric_families
    )
    sums: dict[str, float] = {}
    maxima: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    engines: set[str] = set()
    created: float | None = None
    saw_vllm = False
    try:
        for family in parse(text):
            for sample in family.samples:
                name, labels, value = sample.name, sample.labels, float(sample.value)
                if not name.startswith(("vllm:", "vllm_")):
                    continue
                name = _unescape(name)
                saw_vllm = True
                if name == PER_POS:
                    pos = int(labels["position"])
                    per_pos[pos] = per_pos.get(pos, 0.0) + value
                elif name in _CREATED:
                    created = value if created is None else min(created, value)
                elif (field := _SUMMED.get(name)) is not None:
                    sums[field] = sums.get(field, 0.0) + value
                    if name == DRAFTS:
                        engines.add(f"{labels.get('model_name')}/{labels.get('engine')}")
                elif (field := _MAXED.get(name)) is not None:
                    maxima[field] = max(maxima.get(field, value), value)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise PageError(f"prometheus_client cannot parse the page: {exc}") from None
    if not saw_vllm:
        raise PageError("no vllm: series on the page (not a vLLM /metrics endpoint?)")
    return _assemble(sums, maxima, per_pos, created, len(engines))
