"""The targeted reader against prometheus_client's parser, on real-format pages and bad ones."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmseat.watch.metrics import PageError, PageReader, read_page, read_page_reference
from tests.watch.conftest import METRICS, SEQ

PAGES = sorted(p for p in METRICS.glob("*.txt") if "openmetrics" not in p.name)
SEQ_PAGES = sorted(SEQ.glob("*.txt"))


@pytest.mark.parametrize("path", PAGES + SEQ_PAGES, ids=lambda p: p.name)
def test_reader_agrees_with_prometheus_client(path):
    text = path.read_text()
    assert read_page(text) == read_page_reference(text)


def test_dp2_page_sums_engines_and_keeps_all_positions():
    reading = read_page((METRICS / "vllm-qwen-dp2-k7.txt").read_text())
    assert reading.engines == 2
    assert reading.drafts == 182_311 + 176_902
    assert len(reading.accepted_per_pos or ()) == 7
    assert reading.accepted_tokens == sum(reading.accepted_per_pos or ())
    assert reading.kv_usage == 0.41  # the fuller of the two engines, not a sum
    assert reading.running == 9.0


def test_openmetrics_page_with_escaped_names_reads_like_the_text_page():
    # prometheus_client 0.26 escapes ':' to '_' in OpenMetrics sample names while the HELP line
    # keeps the colon; its own OpenMetrics parser refuses that page, the reader does not.
    om = (METRICS / "vllm-qwen-dp2-k7.openmetrics.txt").read_text()
    assert om.endswith("# EOF\n")
    assert read_page(om) == read_page_reference((METRICS / "vllm-qwen-dp2-k7.txt").read_text())


def test_page_without_spec_decode_is_blind_not_an_error():
    reading = read_page((METRICS / "vllm-nospec.txt").read_text())
    assert not reading.spec_present
    assert reading.generation_tokens == 41_230


GOOD = (SEQ / "00-healthy.txt").read_text()
ACC = 'num_accepted_tokens_total{engine="0",model_name="tiny"} '
RUN = 'vllm:num_requests_running{engine="0",model_name="tiny"} '
CREATED = 'vllm:spec_decode_num_drafts_created{engine="0",model_name="tiny"} '
KV = 'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} '


def _drop_lines(text, needle):
    return "".join(line for line in text.splitlines(keepends=True) if needle not in line)


MALFORMED = [
    ("empty", "", "empty page"),
    ("blank", "\n\n  \n", "empty page"),
    ("html", "<!DOCTYPE html><html><body>502 Bad Gateway</body></html>\n", "HTML"),
    ("html-late", "\n\n<html>oops</html>\n", "HTML"),
    ("truncated-mid-line", GOOD[: GOOD.index("vllm:spec_decode_num_drafts_total") + 40],
     "truncated"),
    ("garbage-bytes", "\x00\x01\x02garbage\n", "not exposition format"),
    ("json", '{"error": "not found"}\n', "not exposition format"),
    ("not-vllm", "# HELP up x\n# TYPE up gauge\nup 1\n", "no vllm: series"),
    ("bad-number", GOOD.replace('model_name="tiny"} 10000.0', 'model_name="tiny"} ten'),
     "not a number"),
    ("no-value", GOOD.replace('model_name="tiny"} 10000.0', 'model_name="tiny"}'),
     "without a value"),
    ("unterminated-labels", GOOD.replace('model_name="tiny"} 10000.0', 'model_name="tiny" 10000.0'),
     "unterminated"),
    ("partial-spec", _drop_lines(GOOD, "vllm:spec_decode_num_accepted_tokens_total"),
     "incomplete spec-decode"),
    ("missing-position", _drop_lines(GOOD, 'position="1"'), "not 0..K-1"),
    ("positions-only", _drop_lines(_drop_lines(_drop_lines(GOOD, "num_drafts_total"),
                                               "num_draft_tokens_total"), "accepted_tokens_total{"),
     "without the draft counters"),
    # found by the hostile battery: float() takes these, the exposition format does not
    ("unicode-digits", GOOD.replace('model_name="tiny"} 10000.0', 'model_name="tiny"} ١٠٠٠٠'),
     "not a number"),
    ("underscore-digits", GOOD.replace('model_name="tiny"} 10000.0', 'model_name="tiny"} 10_000'),
     "not a number"),
    # issue 11: non-finite, negative and impossible values are scrape errors, never a window
    ("nan-counter", GOOD.replace(ACC + "19520.0", ACC + "NaN"), "not a finite number"),
    ("inf-counter", GOOD.replace('model_name="tiny"} 10000.0', 'model_name="tiny"} +Inf'),
     "not a finite number"),
    ("neg-inf-gauge", GOOD.replace(RUN, RUN + "-Inf #"), "not a finite number"),
    ("negative-counter", GOOD.replace('model_name="tiny"} 10000.0', 'model_name="tiny"} -5.0'),
     "negative"),
    ("huge-counter", GOOD.replace('model_name="tiny"} 10000.0', 'model_name="tiny"} 1e300'),
     "beyond what a counter"),
    ("nan-created", GOOD.replace(CREATED, CREATED + "NaN #"), "not a finite number"),
    ("duplicate-series", GOOD.replace(
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 10000.0\n',
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 10000.0\n'
        'vllm:spec_decode_num_drafts_total{model_name="tiny",engine="0"} 9000.0\n'),
     "duplicate series"),
    ("position-rate-above-1", GOOD.replace(
        'position="0"} 8000.0', 'position="0"} 12000.0'), "a rate above 1"),
    ("al-above-1-plus-k", GOOD.replace(ACC + "19520.0", ACC + "40000.0"), "accepted tokens of"),
    ("kv-above-1", GOOD.replace(KV, KV + "7.5 #"), "above 1"),
]


@pytest.mark.parametrize(("text", "why"), [(t, w) for _, t, w in MALFORMED],
                         ids=[n for n, _, _ in MALFORMED])
def test_malformed_pages_are_page_errors(text, why):
    with pytest.raises(PageError, match=why):
        read_page(text)


ISSUE_11_ROWS = MALFORMED[MALFORMED.index(next(m for m in MALFORMED if m[0] == "nan-counter")):]


@pytest.mark.parametrize(("text", "why"), [(t, w) for _, t, w in ISSUE_11_ROWS],
                         ids=[n for n, _, _ in ISSUE_11_ROWS])
def test_both_readers_refuse_non_finite_negative_duplicate_and_impossible_values(text, why):
    # one rule for both readers: the reference parser path refuses the same pages
    with pytest.raises(PageError):
        read_page_reference(text)


def test_page_cut_at_a_line_boundary_inside_the_spec_block_is_refused():
    cut = GOOD.index('vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",'
                     'model_name="tiny",position="1"}')
    with pytest.raises(PageError):
        read_page(GOOD[:cut])


_label_value = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-/._", min_size=1,
                       max_size=12)
_value = st.one_of(st.integers(0, 10**9).map(float), st.floats(0, 1e9, allow_nan=False))


@st.composite
def _spec_counts(draw, k):
    """One engine's spec counters as vLLM keeps them: c_0 <= drafts, c_i <= c_{i-1},
    accepted = sum c_i, accepted <= draft tokens <= K * drafts."""
    drafts = draw(st.integers(0, 10**6))
    per_pos, previous = [], drafts
    for _ in range(k):
        previous = draw(st.integers(0, previous))
        per_pos.append(previous)
    accepted = sum(per_pos)
    draft_tokens = draw(st.integers(max(accepted, drafts if drafts else 0), max(k * drafts,
                                                                                accepted)))
    return float(drafts), float(draft_tokens), float(accepted), [float(c) for c in per_pos]


@st.composite
def vllm_pages(draw):
    engines = draw(st.integers(1, 3))
    model = draw(_label_value)
    k = draw(st.integers(1, 8))
    spec = draw(st.booleans())
    lines = []

    def family(name, kind, samples):
        lines.append(f"# HELP {name} help text for {name}.")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(samples)

    def per_engine(name, extra="", values=None):
        return [f'{name}{{engine="{e}",model_name="{model}"{extra}}} '
                f'{(draw(_value) if values is None else values[e])!r}'
                for e in range(engines)]

    family("process_cpu_seconds_total", "counter", [f"process_cpu_seconds_total {draw(_value)!r}"])
    if spec:
        counts = [draw(_spec_counts(k)) for _ in range(engines)]
        for j, name in enumerate(("vllm:spec_decode_num_drafts_total",
                                  "vllm:spec_decode_num_draft_tokens_total",
                                  "vllm:spec_decode_num_accepted_tokens_total")):
            family(name, "counter", per_engine(name, values=[c[j] for c in counts]))
            created = name.replace("_total", "_created")
            family(created, "gauge", per_engine(created))
        family("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
               [s for i in range(k) for s in per_engine(
                   "vllm:spec_decode_num_accepted_tokens_per_pos_total", f',position="{i}"',
                   values=[c[3][i] for c in counts])])
    kv = [draw(st.floats(0, 1)) for _ in range(engines)]
    family("vllm:kv_cache_usage_perc", "gauge", per_engine("vllm:kv_cache_usage_perc", values=kv))
    for name, kind in (("vllm:num_requests_running", "gauge"),
                       ("vllm:generation_tokens_total", "counter"),
                       ("vllm:prefix_cache_hits_total", "counter")):
        family(name, kind, per_engine(name))
    family("vllm:time_to_first_token_seconds", "histogram",
           [f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{le}",'
            f'model_name="{model}"}} 1.0'
            for le in ("0.001", "0.5", "+Inf")]
           + [f'vllm:time_to_first_token_seconds_count{{engine="0",model_name="{model}"}} 1.0',
              f'vllm:time_to_first_token_seconds_sum{{engine="0",model_name="{model}"}} 0.2'])
    return "\n".join(lines) + "\n"


@settings(max_examples=150, deadline=None)
@given(vllm_pages())
def test_reader_matches_prometheus_client_on_generated_pages(text):
    assert read_page(text) == read_page_reference(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_never_crashes_the_reader(text):
    try:
        read_page(text)
    except PageError:
        pass


# ----- the page fed as it arrives (the scraper feeds each chunk read off the socket) ---------
def _fed(text, cuts):
    reader = PageReader()
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
        reader.feed(text[a:b])
    return reader.finish()


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_a_page_fed_in_pieces_reads_as_the_whole_page(data):
    text = data.draw(st.sampled_from(PAGES + SEQ_PAGES)).read_text()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=24)))
    assert _fed(text, cuts) == read_page(text)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_bad_page_fed_in_pieces_is_still_refused(data):
    _name, text, _why = data.draw(st.sampled_from(MALFORMED))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=12)))
    with pytest.raises(PageError):
        _fed(text, cuts)


def test_a_line_longer_than_the_cap_is_refused_as_it_arrives():
    reader = PageReader()
    reader.feed(GOOD[:1000])
    with pytest.raises(PageError, match="longer than 65,536 characters"):
        for _ in range(3):
            reader.feed("# " + "x" * 40_000)  # one comment line that never ends
