"""Pages recorded from a real vLLM CPU server (tests/fixtures/recorded/README.md): one with a
drafter of the target's own weights, one with a drafter of other weights."""

from __future__ import annotations

import dataclasses

import pytest

from rocmseat.watch.detector import DetectorParams, SpecDetector
from rocmseat.watch.metrics import read_page, read_page_reference
from rocmseat.watch.window import Snapshot, window_between
from tests.conftest import FIXTURES

RECORDED = FIXTURES / "recorded"
SAME = RECORDED / "metrics-drafter-same-weights.txt"
OTHER = RECORDED / "metrics-drafter-other-weights.txt"

pytestmark = pytest.mark.skipif(not SAME.exists() or not OTHER.exists(),
                                reason="recorded vLLM pages not present")


@pytest.mark.parametrize("path", [SAME, OTHER], ids=lambda p: p.name)
def test_reader_agrees_with_prometheus_client_on_real_pages(path):
    text = path.read_text()
    assert read_page(text) == read_page_reference(text)


def since_start(path):
    """The window from server start (all counters 0) to the recorded scrape."""
    reading = read_page(path.read_text())
    zero = dataclasses.replace(
        reading, drafts=0.0, draft_tokens=0.0, accepted_tokens=0.0,
        accepted_per_pos=tuple(0.0 for _ in reading.accepted_per_pos or ()),
        generation_tokens=0.0, prompt_tokens=0.0, preemptions=0.0, prefix_queries=0.0,
        prefix_hits=0.0)
    window = window_between(Snapshot(0.0, zero), Snapshot(60.0, reading))
    assert window is not None
    return window


def test_healthy_drafter_gives_acceptance_length_four():
    w = since_start(SAME)
    assert w.drafts == 48 and w.effective_k == 3.0
    assert w.acceptance_length == pytest.approx(4.0)
    assert w.position_acceptance == (1.0, 1.0, 1.0)


def test_drafter_with_other_weights_gives_acceptance_length_one_and_the_dead_signature():
    w = since_start(OTHER)
    assert w.acceptance_length == pytest.approx(1.0, abs=0.01)
    verdict = SpecDetector(pinned_al=4.0).observe(w, 60.0)
    assert verdict.dead and verdict.drop
    # 48 drafts are under the default 50-draft gate: judge them with a 40-draft gate.
    params = DetectorParams(min_drafts=40, dead_min_drafts=40)
    healthy = SpecDetector(params=params, pinned_al=4.0).observe(since_start(SAME), 60.0)
    assert healthy.evaluated and not healthy.dead and not healthy.drop
