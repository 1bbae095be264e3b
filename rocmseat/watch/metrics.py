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

import math
import re
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
_MAXED: Final[dict[str, str]] = {
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage",
}
# `_created` (prometheus_client's per-child creation time) changes when the server restarts even
# if the counters happen to have grown past their old values between two scrapes.
_CREATED: Final = frozenset({DRAFTS_CREATED, GEN_CREATED})
_WANTED: Final = frozenset(_SUMMED) | frozenset(_MAXED) | _CREATED | {PER_POS}
_SAMPLE_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:#")
# A float counts exactly up to 2**53; a counter beyond that cannot come from a real server, and
# its deltas would be rounding noise.
MAX_VALUE: Final = float(2**53)
# Cumulative invariants of vLLM's counters (SpecDecodingStats.observe_draft adds 1 to c_0..c_{a-1}
# for a draft with a accepted tokens): checked with a slack of 1 % + 1 for torn reads of a
# multi-process registry, which reads each process's counters one after the other.
SLACK_RATIO: Final = 0.01
_LABEL_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
# A vLLM line is well under 1 KiB; a longer one is not a page the watcher can use, and the cap
# bounds what a scrape holds while the page arrives.
MAX_LINE_CHARS: Final = 64 << 10
_HEAD_CHARS: Final = 512


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
    iterations: float | None = None
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
    token = fields[0]
    # Python's float() also takes "1_000" and non-ASCII digits ("١٢" is 12.0); the exposition
    # format's numbers are ASCII (Go's strconv.ParseFloat in Prometheus's text parser).
    if not token.isascii() or "_" in token:
        raise PageError(f"line {number}: not a number: {line[:80]!r}")
    try:
        return labels, float(token)
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


def _label_key(labels: str) -> tuple[tuple[str, str], ...]:
    # An empty label is an absent one (Prometheus drops it): `x=""` does not make a new series.
    return tuple(sorted(pair for pair in _LABEL_PAIR.findall(labels) if pair[1]))


def _check_value(name: str, value: float, where: str) -> None:
    """NaN, infinities, negative or astronomically large values are not counts: the scrape is
    an error (could not check), never a window (NaN would reset the CUSUM and pass every
    threshold test, docs/watch.md "Bad pages")."""
    if not math.isfinite(value):
        raise PageError(f"{where}: {name} is {value!r}, not a finite number")
    if value < 0:
        raise PageError(f"{where}: {name} is negative ({value!r})")
    if value > MAX_VALUE:
        raise PageError(f"{where}: {name} is {value!r}, beyond what a counter can hold exactly")


def _slack(total: float) -> float:
    return 1.0 + SLACK_RATIO * total


def _check_head(head: str) -> None:
    """Refuse what is not an exposition page by its start: empty, HTML."""
    head = head.lstrip()[:_HEAD_CHARS].lower()
    if not head:
        raise PageError("empty page")
    if head.startswith("<") or "<html" in head or "<!doctype" in head:
        raise PageError("an HTML page, not Prometheus metrics (wrong URL or a proxy error page?)")


def check_page_shape(text: str) -> None:
    """Refuse what is not an exposition page: empty, HTML, truncated (no final newline)."""
    _check_head(text)
    if not text.endswith("\n"):
        # generate_latest() ends every page with a newline (and OpenMetrics with "# EOF\n").
        raise PageError("truncated page (no final newline)")


class PageReader:
    """The targeted reader, fed the page as it arrives (`feed` per chunk, then `finish`).

    One pass, and only lines that start with `vllm:` (or `vllm_`) are split. The scraper feeds
    each chunk as it is read off the socket, so a page is never held whole: the reader keeps its
    sums and one partial line (at most `MAX_LINE_CHARS`), and its work is spread over the reads
    (a 16 MiB page never holds the event loop for long). `read_page(text)` is the same reader fed
    once.
    """

    __slots__ = ("_content", "_created", "_engines", "_head", "_maxima", "_number", "_partial",
                 "_per_pos", "_saw_vllm", "_seen", "_started", "_sums")

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._maxima: dict[str, float] = {}
        self._per_pos: dict[int, float] = {}
        self._engines: set[str] = set()
        self._created: float | None = None
        self._saw_vllm = False
        self._content = False  # a line that is not empty was read
        self._seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        self._number = 0  # lines read
        self._partial = ""  # the line not yet ended
        self._head: list[str] | None = []  # the start of the page until its shape is checked
        self._started = 0  # characters in _head

    def feed(self, text: str) -> None:
        if self._head is not None:
            self._head.append(text)
            self._started += len(text)
            if self._started < MAX_LINE_CHARS and len("".join(self._head).lstrip()) < _HEAD_CHARS:
                return
            text, self._head = "".join(self._head), None
            if text.strip():
                _check_head(text)
        buffer = self._partial + text if self._partial else text
        lines = buffer.split("\n")
        self._partial = lines.pop()
        self._read(lines)
        if len(self._partial) > MAX_LINE_CHARS:
            raise PageError(f"line {self._number + 1} is longer than {MAX_LINE_CHARS:,} "
                            "characters")

    def finish(self) -> Reading:
        if self._head is not None:  # a short page: checked whole, as check_page_shape does
            text, self._head = "".join(self._head), None
            check_page_shape(text)
            lines = text.split("\n")
            self._partial = lines.pop()
            self._read(lines)
        if self._partial:
            raise PageError("truncated page (no final newline)")
        if not self._saw_vllm:
            if not self._content:
                raise PageError("empty page")
            raise PageError("no vllm: series on the page (not a vLLM /metrics endpoint?)")
        return _assemble(self._sums, self._maxima, self._per_pos, self._created,
                         len(self._engines))

    def _read(self, lines: list[str]) -> None:  # noqa: PLR0912
        sums, maxima, per_pos, seen = self._sums, self._maxima, self._per_pos, self._seen
        number = self._number
        content = False
        for line in lines:
            number += 1
            if not line:
                continue
            content = True
            if line[0] not in _SAMPLE_START:
                raise PageError(f"line {number} is not exposition format: {line[:80]!r}")
            if not line.startswith(("vllm:", "vllm_")):
                continue
            self._saw_vllm = True
            cut = line.find("{")
            name = line[:cut] if cut != -1 else line.split(" ", 1)[0]
            if name[4] == "_":
                name = _unescape(name)
            if name not in _WANTED:
                continue
            labels, value = _labels_value(line, number)
            _check_value(name, value, f"line {number}")
            series = (name, _label_key(labels))
            if series in seen:
                raise PageError(f"line {number}: duplicate series {name}{{{labels[:80]}}}")
            seen.add(series)
            if name == PER_POS:
                position = _label(labels, "position")
                if position is None or not position.isdigit():
                    raise PageError(f"line {number}: per-position series without a position "
                                    "label")
                per_pos[int(position)] = per_pos.get(int(position), 0.0) + value
            elif name in _CREATED:
                self._created = value if self._created is None else min(self._created, value)
            elif (field := _SUMMED.get(name)) is not None:
                sums[field] = sums.get(field, 0.0) + value
                if name == DRAFTS:
                    self._engines.add(f"{_label(labels, 'model_name')}/{_label(labels, 'engine')}")
            else:
                field = _MAXED[name]
                maxima[field] = max(maxima.get(field, value), value)
        self._number = number
        if content:
            self._content = True


def read_page(text: str) -> Reading:
    """The targeted reader on a whole page (the scraper feeds `PageReader` chunk by chunk)."""
    reader = PageReader()
    reader.feed(text)
    return reader.finish()


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
    kv = maxima.get("kv_usage")
    if kv is not None and kv > 1.0:
        raise PageError(f"impossible values: KV-cache usage {kv!r} is above 1")
    if positions is not None:
        _check_spec_counts(sums["drafts"], sums["draft_tokens"], sums["accepted_tokens"],
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


def _check_spec_counts(
    drafts: float, draft_tokens: float, accepted: float, per_pos: tuple[float, ...], what: str
) -> None:
    """The invariants of the spec-decode counters (cumulative on a page, or the deltas of a
    window): accepted <= draft tokens <= K * drafts, c_0 <= drafts, c_i <= c_{i-1}, and
    sum c_i == accepted. Breaking one means an acceptance length above 1 + K or a position rate
    above 1: the numbers are not counts of one server, and judging them would be a guess."""
    k = len(per_pos)
    if draft_tokens > k * drafts + _slack(k * drafts):
        raise PageError(f"{what}: {draft_tokens:g} draft tokens in {drafts:g} drafts of at "
                        f"most {k} tokens")
    if accepted > draft_tokens + _slack(draft_tokens):
        raise PageError(f"{what}: {accepted:g} accepted tokens of {draft_tokens:g} drafted")
    previous, previous_name = drafts, "drafts"
    for i, count in enumerate(per_pos):
        if count > previous + _slack(previous):
            raise PageError(f"{what}: position {i} accepted {count:g} times, more than "
                            f"{previous_name} ({previous:g}): a rate above 1")
        previous, previous_name = count, f"position {i}"
    if abs(sum(per_pos) - accepted) > _slack(accepted):
        raise PageError(f"{what}: the per-position counts sum to {sum(per_pos):g}, the "
                        f"accepted tokens are {accepted:g}")


def check_window_counts(
    drafts: float, draft_tokens: float, accepted: float, per_pos: tuple[float, ...]
) -> None:
    """The same invariants on a window's deltas (raises PageError: could not check)."""
    if per_pos:
        _check_spec_counts(drafts, draft_tokens, accepted, per_pos, "impossible window")


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
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    try:
        for family in parse(text):
            for sample in family.samples:
                name, labels, value = sample.name, sample.labels, float(sample.value)
                if not name.startswith(("vllm:", "vllm_")):
                    continue
                name = _unescape(name)
                saw_vllm = True
                if name not in _WANTED:
                    continue
                _check_value(name, value, "sample")
                series = (name, tuple(sorted((k, v) for k, v in labels.items() if v)))
                if series in seen:
                    raise PageError(f"duplicate series {name}")
                seen.add(series)
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
