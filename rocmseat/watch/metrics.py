"""Read the few series the watchdog needs from an engine's /metrics page (text or OpenMetrics).

`read_page` is the targeted fast reader the watch loop uses; `read_page_reference` builds the same
`Reading` with prometheus_client's full parser. Tests hold the two equal on every fixture page
and on hypothesis-generated pages; bench/bench_watch_parse.py measures the difference.

The engine's page is its `PageSpec` (rocmseat.engines: vLLM's `vllm:`, SGLang's `sglang:`,
llama.cpp's `llamacpp:` series, which fields they fill, how the sums become the normalised
`Reading`). A reader given no spec tells the engine by the first series of a known prefix and
reads that engine's page; vLLM's names and sums are rocmseat.engines.vllm's (vLLM 0.33
`vllm/v1/spec_decode/metrics.py` SpecDecodingProm, `vllm/v1/metrics/loggers.py`).
"""

from __future__ import annotations

import re
from typing import Final

from rocmseat.engines import ENGINES, PAGES
from rocmseat.engines import vllm as vllm_page
from rocmseat.engines.base import (
    MAX_VALUE,
    SLACK_RATIO,
    PageError,
    PageSpec,
    Reading,
    check_spec_counts,
    check_value,
)

__all__ = [
    "MAX_LINE_CHARS",
    "MAX_VALUE",
    "SLACK_RATIO",
    "PageError",
    "PageReader",
    "Reading",
    "check_page_shape",
    "check_window_counts",
    "read_page",
    "read_page_reference",
]

DRAFTS: Final = vllm_page.DRAFTS
DRAFT_TOKENS: Final = vllm_page.DRAFT_TOKENS
ACCEPTED: Final = vllm_page.ACCEPTED
PER_POS: Final = vllm_page.PER_POS
DRAFTS_CREATED: Final = vllm_page.DRAFTS_CREATED
GEN_CREATED: Final = vllm_page.GEN_CREATED
VLLM: Final = vllm_page.PAGE
# every engine's spec, for a reader that tells the engine by the page (rocmseat.engines.PAGES)
_BY_PREFIX: Final[dict[str, PageSpec]] = {}
for _spec in PAGES:
    _BY_PREFIX[_spec.prefix] = _BY_PREFIX[_spec.escaped] = _spec
_ANY_PREFIX: Final = tuple(_BY_PREFIX)
_SAMPLE_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:#")
_LABEL_PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
# A vLLM line is well under 1 KiB; a longer one is not a page the watcher can use, and the cap
# bounds what a scrape holds while the page arrives.
MAX_LINE_CHARS: Final = 64 << 10
_HEAD_CHARS: Final = 512


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


_check_value = check_value


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


def _no_series(spec: PageSpec | None) -> str:
    if spec is None:
        return ("no vllm: series on the page, nor sglang: nor llamacpp: (not an engine's /metrics "
                "endpoint?)")
    return f"no {spec.prefix} series on the page (not a {ENGINES[spec.engine].label} /metrics " \
        "endpoint?)"


def _spec_of(line: str) -> PageSpec:
    for prefix, spec in _BY_PREFIX.items():
        if line.startswith(prefix):
            return spec
    raise AssertionError(line[:40])  # only called on a line that starts with a known prefix


class PageReader:
    """The targeted reader, fed the page as it arrives (`feed` per chunk, then `finish`).

    One pass, and only lines that start with the engine's prefix (`vllm:` or `vllm_` for vLLM)
    are split. `spec`: the engine's page (rocmseat.engines); None: the engine is told by the
    first line of a known prefix, and only that engine's series are read from there on. The
    scraper feeds each chunk as it is read off the socket, so a page is never held whole: the
    reader keeps its sums and one partial line (at most `MAX_LINE_CHARS`), and its work is
    spread over the reads (a 16 MiB page never holds the event loop for long).
    `read_page(text)` is the same reader fed once.
    """

    __slots__ = ("_content", "_created", "_engines", "_head", "_maxima", "_number", "_partial",
                 "_per_pos", "_saw", "_seen", "_spec", "_started", "_sums")

    def __init__(self, spec: PageSpec | None = None) -> None:
        self._spec = spec
        self._sums: dict[str, float] = {}
        self._maxima: dict[str, float] = {}
        self._per_pos: dict[int, float] = {}
        self._engines: set[str] = set()
        self._created: float | None = None
        self._saw = False  # a line of the engine's prefix was read
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
        if not self._saw or self._spec is None:
            if not self._content:
                raise PageError("empty page")
            raise PageError(_no_series(self._spec))
        return self._spec.assemble(self._sums, self._maxima, self._per_pos, self._created,
                                   len(self._engines))

    def _sniff(self, lines: list[str]) -> int:
        """Read lines until one of a known engine's prefix (checked as `_read` checks them);
        the engine is then this page's. The index of that line (len(lines): none yet)."""
        number = self._number
        for index, line in enumerate(lines):
            if not line:
                number += 1
                continue
            if line[0] not in _SAMPLE_START:
                raise PageError(f"line {number + 1} is not exposition format: {line[:80]!r}")
            self._content = True
            if line.startswith(_ANY_PREFIX):
                self._spec = _spec_of(line)
                self._number = number
                return index
            number += 1
        self._number = number
        return len(lines)

    def _begin(self, lines: list[str]) -> list[str]:
        """The lines from the first of the engine's, telling the engine first if need be."""
        start = self._sniff(lines)
        if start:
            del lines[:start]  # the list is this reader's own (split off the chunk)
        return lines

    def _read(self, lines: list[str]) -> None:  # noqa: PLR0912
        if self._spec is None:
            lines = self._begin(lines)
        spec = self._spec
        if spec is None:
            return
        wanted, summed, maxed = spec.wanted, spec.summed, spec.maxed
        per_pos_name, created_names, engine_series = spec.per_pos, spec.created, spec.engine_series
        prefixes = (spec.prefix, spec.escaped)
        cut_at = len(spec.prefix) - 1
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
            if not line.startswith(prefixes):
                continue
            self._saw = True
            cut = line.find("{")
            name = line[:cut] if cut != -1 else line.split(" ", 1)[0]
            if name[cut_at] == "_":
                name = spec.unescape(name)
            if name not in wanted:
                continue
            labels, value = _labels_value(line, number)
            _check_value(name, value, f"line {number}")
            series = (name, _label_key(labels))
            if series in seen:
                raise PageError(f"line {number}: duplicate series {name}{{{labels[:80]}}}")
            seen.add(series)
            if name == per_pos_name:
                position = _label(labels, "position")
                if position is None or not position.isdigit():
                    raise PageError(f"line {number}: per-position series without a position "
                                    "label")
                per_pos[int(position)] = per_pos.get(int(position), 0.0) + value
            elif name in created_names:
                self._created = value if self._created is None else min(self._created, value)
            elif (field := summed.get(name)) is not None:
                sums[field] = sums.get(field, 0.0) + value
                if name == engine_series:
                    self._engines.add(f"{_label(labels, 'model_name')}/{_label(labels, 'engine')}")
            else:
                field = maxed[name]
                maxima[field] = max(maxima.get(field, value), value)
        self._number = number
        if content:
            self._content = True


def read_page(text: str, spec: PageSpec | None = None) -> Reading:
    """The targeted reader on a whole page (the scraper feeds `PageReader` chunk by chunk);
    `spec` the engine's page, None: told by the page."""
    reader = PageReader(spec)
    reader.feed(text)
    return reader.finish()


_check_spec_counts = check_spec_counts


def check_window_counts(
    drafts: float, draft_tokens: float, accepted: float, per_pos: tuple[float, ...]
) -> None:
    """The same invariants on a window's deltas (raises PageError: could not check)."""
    if per_pos:
        _check_spec_counts(drafts, draft_tokens, accepted, per_pos, "impossible window")


class _Sums:
    """What the reference reader adds up (the targeted reader keeps the same in its slots)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.maxima: dict[str, float] = {}
        self.per_pos: dict[int, float] = {}
        self.engines: set[str] = set()
        self.created: float | None = None
        self.seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()

    def take(self, spec: PageSpec, name: str, labels: dict[str, str], value: float) -> None:
        _check_value(name, value, "sample")
        series = (name, tuple(sorted((k, v) for k, v in labels.items() if v)))
        if series in self.seen:
            raise PageError(f"duplicate series {name}")
        self.seen.add(series)
        if name == spec.per_pos:
            pos = int(labels["position"])
            self.per_pos[pos] = self.per_pos.get(pos, 0.0) + value
        elif name in spec.created:
            self.created = value if self.created is None else min(self.created, value)
        elif (field := spec.summed.get(name)) is not None:
            self.sums[field] = self.sums.get(field, 0.0) + value
            if name == spec.engine_series:
                self.engines.add(f"{labels.get('model_name')}/{labels.get('engine')}")
        elif (field := spec.maxed.get(name)) is not None:
            self.maxima[field] = max(self.maxima.get(field, value), value)


def read_page_reference(text: str, spec: PageSpec | None = None) -> Reading:
    """The same Reading through prometheus_client's full parser (validation and the benchmark)."""
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )
    from prometheus_client.parser import text_string_to_metric_families

    check_page_shape(text)
    parse = openmetrics_families if text.rstrip().endswith("# EOF") else (
        text_string_to_metric_families
    )
    acc = _Sums()
    saw = False
    try:
        for family in parse(text):
            for sample in family.samples:
                name, labels, value = sample.name, sample.labels, float(sample.value)
                if spec is None and name.startswith(_ANY_PREFIX):
                    spec = _spec_of(name)
                if spec is None or not name.startswith((spec.prefix, spec.escaped)):
                    continue
                name = spec.unescape(name)
                saw = True
                if name in spec.wanted:
                    acc.take(spec, name, labels, value)
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise PageError(f"prometheus_client cannot parse the page: {exc}") from None
    if not saw or spec is None:
        raise PageError(_no_series(spec))
    return spec.assemble(acc.sums, acc.maxima, acc.per_pos, acc.created, len(acc.engines))
