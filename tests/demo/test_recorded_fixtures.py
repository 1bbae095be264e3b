"""The real-engine recordings in tests/fixtures/recorded/ say what their README says (they are
the ground truth other rooms test against, so an accidental edit must fail here)."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import FIXTURES

RECORDED = FIXTURES / "recorded"


def _spec_counters(name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families((RECORDED / name).read_text()):
        for s in family.samples:
            if s.name.startswith("vllm:spec_decode_") and s.name.endswith("_total"):
                key = s.name.removeprefix("vllm:spec_decode_").removesuffix("_total")
                if "position" in s.labels:
                    key += f"[{s.labels['position']}]"
                out[key] = out.get(key, 0.0) + s.value
    return out


@pytest.mark.parametrize(
    ("page", "drafts", "draft_tokens", "accepted", "per_position"),
    [
        ("metrics-drafter-same-weights.txt", 48, 144, 144, (48, 48, 48)),
        ("metrics-drafter-other-weights.txt", 188, 564, 1, (1, 0, 0)),
    ],
)
def test_metrics_pages(page, drafts, draft_tokens, accepted, per_position):
    c = _spec_counters(page)
    assert (c["num_drafts"], c["num_draft_tokens"], c["num_accepted_tokens"]) == (
        drafts, draft_tokens, accepted)
    assert tuple(c[f"num_accepted_tokens_per_pos[{i}]"] for i in range(3)) == per_position


@pytest.mark.parametrize(
    ("log", "phrases"),
    [
        ("startup-fresh-compile.log",
         ["[backbone] saved AOT compiled function to", "[draft_model] saved AOT compiled function",
          "CPU KV cache size: 524,288 tokens", "init engine (profile, create kv cache, warmup "
          "model) took 30.61 s"]),
        ("startup-restart-same-cache.log",
         ["[backbone] Compiling model again due to a load failure from",
          "[draft_model] Compiling model again due to a load failure from",
          "took 13.83 s"]),
        ("startup-drafter-other.log",
         ["drafter-other", "[backbone] saved AOT compiled function to"]),
    ],
)
def test_startup_logs(log, phrases):
    text = (RECORDED / log).read_text()
    assert "Initializing a V1 LLM engine (v0.32.0)" in text
    for phrase in phrases:
        assert phrase in text, phrase


def test_completions_identical_across_drafters():
    doc = json.loads((RECORDED / "completions-greedy-64.json").read_text())
    assert doc["drafter_same_weights"] == doc["drafter_other_weights"]
    assert len(doc["drafter_same_weights"]) == len(doc["prompts"]) == 3
