"""The parsers of what vLLM writes, on real recordings (tests/fixtures/spec/README.md) and on
a table of malformed input: `vllm bench serve` result files and per-iteration log lines."""

from __future__ import annotations

import json

import pytest

from rocmseat.errors import ParseError
from rocmseat.speculation.advise.iterlog import parse_iteration_log
from rocmseat.speculation.advise.stepcost import cells_from_steps
from rocmseat.speculation.gate.battery import block_size_from_page
from rocmseat.speculation.gate.benchresult import parse_bench_result
from tests.conftest import FIXTURES

SPEC = FIXTURES / "spec"
RESULTS = SPEC / "bench-results"


def load(name: str):
    path = RESULTS / name
    return parse_bench_result(path.read_text(), str(path))


def test_a_base_result():
    r = load("deep-base-c4.json")
    assert (r.num_prompts, r.completed, r.failed, r.max_concurrency) == (22, 22, 0, 4)
    assert r.total_output_tokens == 22 * 64
    assert r.output_tokens_per_s == pytest.approx(r.total_output_tokens / r.duration_s)
    assert r.spec is None and r.ttfts_s is None
    assert r.mean_tpot_ms == pytest.approx(r.mean_itl_ms)  # no speculation: a chunk = a token


def test_a_speculative_result():
    r = load("deep-spec-k3-c4.json")
    assert r.spec is not None
    assert (r.spec.drafts, r.spec.draft_tokens, r.spec.accepted_tokens) == (510, 1530, 512)
    assert r.spec.acceptance_length == pytest.approx(1 + 512 / 510)
    assert len(r.spec.per_position_rates) == 3
    # ITL counts stream chunks: with speculation a chunk carries several tokens
    assert r.mean_itl_ms > 1.5 * r.mean_tpot_ms


def test_detailed_ttfts():
    r = load("tiny-base-cold-ttft.json")
    assert r.ttfts_s is not None and len(r.ttfts_s) == 1 and r.ttfts_s[0] > 0


def test_every_recorded_result_parses():
    files = [*sorted(RESULTS.glob("*.json")),
             *sorted((SPEC / "gate-cpu-deep").rglob("results/*.json"))]
    assert len(files) >= 20
    for path in files:
        r = parse_bench_result(path.read_text(), str(path))
        assert r.completed == r.num_prompts and r.failed == 0


def mutate(**changes):
    doc = json.loads((RESULTS / "deep-spec-k3-c4.json").read_text())
    for key, value in changes.items():
        if value is ...:
            doc.pop(key)
        else:
            doc[key] = value
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "not a vllm bench serve result"),
        ("[1, 2]", "not a JSON object"),
        ("{" * 100_000, "not a vllm bench serve result"),
        (mutate(completed=...), "key 'completed': expected a number"),
        (mutate(completed="16"), "key 'completed': expected a number"),
        (mutate(completed=True), "key 'completed': expected a number"),
        (mutate(completed=15.5), "expected a whole number"),
        (mutate(failed=-1), "negative"),
        (mutate(completed=20), "exceeds num_prompts"),
        (mutate(output_throughput=float("nan")), "not a finite number"),
        (mutate(duration=float("inf")), "not a finite number"),
        (mutate(mean_itl_ms=float("nan")), "not a finite number"),
        (mutate(max_concurrency=0), "max_concurrency"),
        (mutate(spec_decode_num_drafts=-3), "spec_decode_num_drafts"),
        (mutate(spec_decode_per_position_acceptance_rates=[0.5, "x"]), "not a finite number"),
    ],
)
def test_malformed_results(text, why):
    with pytest.raises(ParseError) as info:
        parse_bench_result(text, "r.json")
    assert why in info.value.message and info.value.message.startswith("r.json: ")


def test_nan_latency_is_absent_only_when_nothing_completed():
    doc = json.loads(mutate(completed=0, failed=16, mean_itl_ms=float("nan")))
    r = parse_bench_result(json.dumps(doc), "r.json")
    assert r.mean_itl_ms is None and r.failed == 16


def test_real_iteration_logs():
    spec = parse_iteration_log((SPEC / "iteration-deep-k3.log").read_text())
    base = parse_iteration_log((SPEC / "iteration-deep-base.log").read_text())
    assert len(spec.steps) == 621 and len(base.steps) == 1355  # every Iteration line
    assert spec.malformed == base.malformed == 0 and spec.skipped_dummy == 0
    decode = [s for s in spec.steps if s.context_requests == 0 and s.generation_requests]
    assert {s.draft_length for s in decode} == {3}
    assert {s.draft_length for s in base.steps if s.generation_requests} == {0}
    cells = cells_from_steps([*spec.steps, *base.steps])
    assert {c.k for c in cells} == {0, 3}
    one = next(c for c in cells if (c.batch, c.k) == (1, 3))
    assert 15.0 < one.mean_ms < 80.0  # a verify pass + 3 one-layer drafts on this CPU


@pytest.mark.parametrize(
    "line",
    [
        "Engine 000: Iteration(5): 0 context requests, 0 context tokens, 1 generation requests",
        "Iteration(x): 1 context requests, 2 context tokens, 3 generation requests, 4 generation "
        "tokens, iteration elapsed time: 1.0 ms",
        "Iteration(5): 0 context requests, 0 context tokens, 1 generation requests, 4 generation "
        "tokens, iteration elapsed time: fast ms",
        # not numbers float() takes (a traceback before: ValueError on "1.2.3", "." and "1.")
        "Iteration(5): 0 context requests, 0 context tokens, 1 generation requests, 4 generation "
        "tokens, iteration elapsed time: 1.2.3 ms",
        "Iteration(5): 0 context requests, 0 context tokens, 1 generation requests, 4 generation "
        "tokens, iteration elapsed time: . ms",
        "Iteration(5): 0 context requests, 0 context tokens, 1 generation requests, 4 generation "
        "tokens, iteration elapsed time: 1. ms",
        # 5000 digits: int() refuses more than 4300
        "Iteration(" + "1" * 5000 + "): 0 context requests, 0 context tokens, 1 generation "
        "requests, 4 generation tokens, iteration elapsed time: 1.0 ms",
        # 400 digits: float() says inf
        "Iteration(5): 0 context requests, 0 context tokens, 1 generation requests, 4 generation "
        "tokens, iteration elapsed time: " + "9" * 400 + " ms",
    ],
)
def test_malformed_iteration_lines_are_counted_not_guessed(line):
    log = parse_iteration_log(line)
    assert log.steps == () and log.malformed == 1


def test_dummy_steps_and_mixed_draft_lengths():
    log = parse_iteration_log(
        "Iteration(1): 0 context requests, 0 context tokens, 2 generation requests, 8 generation "
        "tokens, iteration elapsed time: 3.0 ms (dummy), CPU KV cache usage: 0.0%\n"
        "Iteration(2): 0 context requests, 0 context tokens, 2 generation requests, 7 generation "
        "tokens, iteration elapsed time: 3.0 ms, CPU KV cache usage: 0.0%\n")
    assert log.skipped_dummy == 1
    (step,) = log.steps
    assert step.draft_length is None and step.batch_size == 2


def test_block_size_from_a_real_metrics_page():
    page = (FIXTURES / "recorded" / "metrics-drafter-same-weights.txt").read_text()
    assert block_size_from_page(page) == 128  # vLLM's CPU build
    assert block_size_from_page("vllm:num_requests_running 0\n") is None
    assert block_size_from_page('vllm:cache_config_info{block_size="0"} 1.0\n') is None
