"""The engines' /metrics pages through the seam: one normalised Reading each, and what the
watchdog concludes from them (issue 36 items 2 and 3).

SGLang's and llama.cpp's pages come from tests/engines/pages.py (written from each engine's
metrics code, cited there); vLLM's from the watch room's fixtures.
"""

from __future__ import annotations

import pytest

from rocmseat.engines import by_kind
from rocmseat.engines.base import (
    BASIS_ACCEPTED_PER_DRAFT,
    BASIS_NONE,
    BASIS_PER_POSITION,
    BASIS_VERIFY_STEPS,
)
from rocmseat.watch import alerts as A
from rocmseat.watch.detector import DetectorParams, SpecDetector
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.metrics import PageError, read_page, read_page_reference
from rocmseat.watch.remediate import policy
from rocmseat.watch.scrape import Target
from rocmseat.watch.service import CANNOT_CHECK
from rocmseat.watch.window import Snapshot, window_between
from tests.engines.pages import llama_page, sglang_page
from tests.watch.conftest import FakeClock


def test_sglang_counters_are_summed_and_gauges_are_not():
    page = sglang_page(generated=3400.0, prompt=800.0, verify=1000.0, running=6.0,
                       token_usage=0.4, accept_length=3.4, tp=4)
    reading = read_page(page)
    assert reading == read_page_reference(page)
    assert reading.engine == "sglang" and reading.basis == BASIS_VERIFY_STEPS
    # is_streaming true/false summed; 4 TP ranks report the same gauges: never summed
    assert reading.generation_tokens == 3400.0 and reading.prompt_tokens == 800.0
    assert reading.verify_steps == 1000.0 and reading.accepted_tokens == 2400.0
    assert reading.running == 6.0 and reading.kv_usage == 0.4
    assert reading.draft_tokens is None and reading.accepted_per_pos is None
    assert reading.windowed_acceptance_length == 3.4


def test_llamacpp_page_reads_every_normalised_field():
    page = llama_page(predicted=1200.0, prompt=300.0, decodes=400.0, drafts=400.0,
                      draft_tokens=1600.0, accepted=900.0, per_pos=(360.0, 270.0, 180.0, 90.0),
                      processing=2.0, deferred=1.0)
    reading = read_page(page)
    assert reading == read_page_reference(page)
    assert reading.engine == "llamacpp" and reading.basis == BASIS_PER_POSITION
    assert (reading.drafts, reading.draft_tokens, reading.accepted_tokens) == (400, 1600, 900)
    assert reading.accepted_per_pos == (360.0, 270.0, 180.0, 90.0)
    assert (reading.generation_tokens, reading.prompt_tokens, reading.iterations) == (1200, 300,
                                                                                     400)
    assert (reading.running, reading.waiting) == (2.0, 1.0)


def test_llamacpp_without_per_position_yet_is_judged_on_the_mean():
    reading = read_page(llama_page(predicted=10.0, prompt=5.0, decodes=10.0, drafts=0.0))
    assert reading.spec_present and reading.accepted_per_pos is None
    assert reading.basis == BASIS_ACCEPTED_PER_DRAFT


@pytest.mark.parametrize("page", [
    sglang_page(generated=500.0, prompt=100.0, verify=None),
    llama_page(predicted=500.0, prompt=100.0, decodes=500.0, drafts=None),
], ids=["sglang-no-verify-counter", "llamacpp-build-before-spec-counters"])
def test_a_page_without_spec_counters_is_unknown_never_ok(page, tmp_path):
    reading = read_page(page)
    assert not reading.spec_present and reading.acceptance_basis == BASIS_NONE
    pages = [page, page]
    clock = FakeClock()
    w = Watcher([Target("r0", "http://r0/metrics")], WatchConfig(state_dir=tmp_path),
                fetch=lambda url, t: pages.pop(0), clock=clock)
    w.step()
    clock.tick(10)
    (status,) = w.step()
    w.close()
    assert status.up and status.blind and A.SPEC_BLIND in status.alerts
    assert A.SPEC_BLIND in CANNOT_CHECK  # watch --once exits 2: could not check, never 0
    assert status.judged is None and A.SPEC_ACCEPTANCE_DROP not in status.alerts


def test_sglang_collapse_from_the_counters_while_the_windowed_gauge_reads_high(tmp_path):
    """AL 3.4 learned from the counters; the drafter collapses to AL 1.08 (the stale-cache
    incident's figure) while `sglang:spec_accept_length` keeps its last interval's 3.4 (the
    scheduler sets it per log interval, metrics_reporter.py): the counters raise the alerts."""
    clock = FakeClock()
    gen = verify = prompt = 0.0
    pages: list[str] = []

    def advance(al: float) -> str:
        nonlocal gen, verify, prompt
        verify += 100.0
        gen += 100.0 * al
        prompt += 50.0
        return sglang_page(generated=gen, prompt=prompt, verify=verify, accept_length=3.4)

    w = Watcher([Target("r0", "http://r0/metrics")], WatchConfig(state_dir=tmp_path),
                fetch=lambda url, t: pages.pop(0), clock=clock)
    learned = None
    for _ in range(100):  # 10,000 verify steps over 1,000 s: past learn_min_drafts/_s
        pages.append(advance(3.4))
        (status,) = w.step()
        clock.tick(10)
        learned = learned or (status.expected_al if not status.learning else None)
    assert not status.learning and status.alerts == ()
    fired_after = None
    for i in range(1, 13):
        pages.append(advance(1.08))
        (status,) = w.step()
        clock.tick(10)
        if A.SPEC_ACCEPTANCE_DROP in status.alerts and fired_after is None:
            fired_after = i
    w.close()
    gauge = read_page(pages[-1] if pages else advance(1.08)).windowed_acceptance_length
    assert gauge == 3.4  # the windowed gauge still reads high
    print(f"sglang collapse: drop alert after {fired_after} windows of 10 s")
    assert fired_after is not None and fired_after <= 3, fired_after
    assert A.SPEC_DRAFTER_DEAD in status.alerts  # 0.08 accepted per verify step <= 0.10
    assert status.judged is not None
    assert status.judged.acceptance_length == pytest.approx(1.08)


def _vllm_page(drafts: float, draft_tokens: float, accepted: float,
               per_pos: tuple[float, ...], generated: float) -> str:
    lines = []
    for name, value in (("spec_decode_num_drafts_total", drafts),
                        ("spec_decode_num_draft_tokens_total", draft_tokens),
                        ("spec_decode_num_accepted_tokens_total", accepted)):
        lines.append(f'vllm:{name}{{engine="0",model_name="tiny"}} {value}')
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",'
              f'model_name="tiny",position="{i}"}} {v}' for i, v in enumerate(per_pos)]
    lines += [f'vllm:generation_tokens_total{{engine="0",model_name="tiny"}} {generated}',
              'vllm:num_requests_running{engine="0",model_name="tiny"} 4.0']
    return "\n".join(lines) + "\n"


def test_implausibly_high_acceptance_warns_and_is_never_remediated(tmp_path):
    """K=3, rate 0.99 (a repetition loop): 3 windows of 600 drafts each raise the warning; the
    ladder has no step on it, and a decision on it starts nothing."""
    clock = FakeClock()
    d = dt = acc = gen = 0.0
    c = [0.0, 0.0, 0.0]
    pages: list[str] = []
    w = Watcher([Target("r0", "http://r0/metrics")], WatchConfig(state_dir=tmp_path,
                                                                   pinned_al=3.9),
                fetch=lambda url, t: pages.pop(0), clock=clock)
    seen = []
    for _ in range(5):
        d, dt = d + 600.0, dt + 1800.0
        c = [c[0] + 597.0, c[1] + 594.0, c[2] + 591.0]
        acc = sum(c)
        gen += 600.0 + 1782.0
        pages.append(_vllm_page(d, dt, acc, tuple(c), gen))
        (status,) = w.step()
        clock.tick(10)
        seen.append(A.SPEC_ACCEPTANCE_IMPLAUSIBLE in status.alerts)
    w.close()
    assert seen == [False, False, False, True, True]  # 3 judged windows after the first page
    assert A.SPEC_ACCEPTANCE_DROP not in status.alerts
    assert A.SPEC_ACCEPTANCE_IMPLAUSIBLE not in policy.ACTS_ON
    assert all(A.SPEC_ACCEPTANCE_IMPLAUSIBLE not in s.triggers for s in policy.LADDER)


def test_implausible_is_not_judged_on_canary_windows():
    det = SpecDetector(DetectorParams())
    a = Snapshot(0.0, read_page(_vllm_page(0, 0, 0, (0, 0, 0), 0)))
    t, d, c = 0.0, 0.0, [0.0, 0.0, 0.0]
    for _ in range(4):
        d += 600.0
        c = [c[0] + 597.0, c[1] + 594.0, c[2] + 591.0]
        t += 10.0
        b = Snapshot(t, read_page(_vllm_page(d, 3 * d, sum(c), tuple(c), d * 4)))
        window = window_between(a, b)
        assert window is not None
        verdict = det.observe(window, t, canary=True)
        a = b
    assert not verdict.implausible


def test_kind_lists_agree():
    from rocmseat.engines.base import KINDS
    from rocmseat.seat.model import ENGINE_KINDS

    assert ENGINE_KINDS == KINDS == policy.ENGINES
    assert [by_kind(k).kind for k in KINDS] == list(KINDS)


def test_hostile_engine_pages_are_errors_not_verdicts():
    bad = sglang_page(generated=10.0, prompt=1.0, verify=500.0)  # 500 verify steps, 10 tokens
    with pytest.raises(PageError, match="impossible"):
        read_page(bad)
    over = llama_page(predicted=10.0, prompt=1.0, decodes=1.0, drafts=10.0, draft_tokens=30.0,
                      accepted=25.0, per_pos=(10.0, 15.0, 0.0))
    with pytest.raises(PageError, match=r"rate above 1|sum to"):
        read_page(over)


def test_a_seat_targets_page_of_another_engine_is_an_error(tmp_path):
    page = llama_page(predicted=10.0, prompt=5.0, decodes=10.0, drafts=0.0)
    w = Watcher([Target("r0", "http://r0/metrics", engine="vllm")],
                WatchConfig(state_dir=tmp_path), fetch=lambda url, t: page, clock=FakeClock())
    (status,) = w.step()
    w.close()
    assert not status.up and "llamacpp's" in (status.error or "")
    assert "[engine] kind is vllm" in (status.error or "")


@pytest.mark.parametrize("page", [
    sglang_page(generated=3400.0, prompt=800.0, verify=1000.0, accept_length=3.4),
    llama_page(predicted=1200.0, prompt=300.0, decodes=400.0, drafts=400.0,
               draft_tokens=1600.0, accepted=900.0, per_pos=(360.0, 270.0, 180.0, 90.0)),
], ids=["sglang", "llamacpp"])
@pytest.mark.parametrize("chunk", [1, 7, 100, 513, 4096])
def test_fed_in_chunks_reads_as_whole(page, chunk):
    """The scraper feeds the page as it arrives: the engine is told across chunk edges."""
    from rocmseat.watch.metrics import PageReader

    reader = PageReader()
    for at in range(0, len(page), chunk):
        reader.feed(page[at:at + chunk])
    assert reader.finish() == read_page(page)


def test_an_engine_spec_given_reads_only_that_engine():
    from rocmseat.engines import by_kind as kind
    from rocmseat.watch.metrics import PageReader

    page = sglang_page(generated=10.0, prompt=1.0, verify=5.0)
    reader = PageReader(kind("vllm").page)
    reader.feed(page)
    with pytest.raises(PageError, match="no vllm: series"):
        reader.finish()
