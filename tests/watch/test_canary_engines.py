"""The canary per engine (rocmseat/watch/canary.py): llama.cpp's response timings, SGLang's
meta_info, and what a llama.cpp canary request takes out of a window.

LLAMACPP is a response of llama-server (xllamacpp 2026.10.11549, the demo GGUFs of
`rocmseat demo gguf-models`, drafter = the target's weights) to
`POST /v1/completions {"prompt": "Hello", "max_tokens": 8, "temperature": 0}` on this machine,
the choices cut. SGLANG follows python/sglang/srt/managers/tokenizer_manager.py (meta_info with
`spec_verify_ct` set when a request finishes under a speculative algorithm).
"""

from __future__ import annotations

import copy
import re

import pytest

from rocmseat.watch.canary import CanaryResponseError, parse_response, subtract
from rocmseat.watch.canary_service import CanaryTarget, http_send
from rocmseat.watch.window import Window

LLAMACPP = {
    "object": "text_completion", "model": "m/gguf-target/model.gguf",
    "usage": {"completion_tokens": 8, "prompt_tokens": 9, "total_tokens": 17,
              "prompt_tokens_details": {"cached_tokens": 0}},
    "timings": {"cache_n": 0, "prompt_n": 9, "predicted_n": 8, "draft_n": 5,
                "draft_n_accepted": 5},
}
SGLANG = {"text": " a b", "meta_info": {"id": "x", "prompt_tokens": 7, "completion_tokens": 32,
                                         "spec_verify_ct": 10, "finish_reason": {
                                             "type": "length", "length": 32}}}


def test_llamacpp_reads_the_timings():
    u = parse_response(LLAMACPP, "llamacpp")
    assert (u.draft_tokens, u.accepted_tokens, u.rate) == (5, 5, 1.0)
    assert (u.generation_tokens, u.prompt_tokens) == (8, 9)
    assert u.drafts_known is False and u.accepted_per_pos == ()


@pytest.mark.parametrize(("change", "why"), [
    (lambda d: d.pop("timings"), "no timings.draft_n"),
    (lambda d: d["timings"].pop("draft_n"), "no timings.draft_n"),
    (lambda d: d["timings"].update(draft_n_accepted=6), "more accepted than drafted"),
    (lambda d: d["timings"].update(draft_n=-1), "timings.draft_n"),
    (lambda d: d["timings"].update(draft_n_accepted="5"), "timings.draft_n_accepted"),
    (lambda d: d.pop("usage"), "no usage"),
])
def test_hostile_llamacpp_responses(change, why):
    doc = copy.deepcopy(LLAMACPP)
    change(doc)
    with pytest.raises(CanaryResponseError, match=re.escape(why)):
        parse_response(doc, "llamacpp")
    with pytest.raises(CanaryResponseError):
        parse_response("x", "llamacpp")


def test_sglang_reads_meta_info():
    u = parse_response(SGLANG, "sglang", 3)
    # 10 verify steps emitted 32 tokens: 22 accepted drafts of 30 drafted
    assert (u.drafts, u.draft_tokens, u.accepted_tokens) == (10, 30, 22)
    assert u.rate == pytest.approx(22 / 30)
    assert parse_response([SGLANG], "sglang", 3) == u  # /generate answers a list for a batch


@pytest.mark.parametrize(("change", "k", "why"), [
    (lambda d: d["meta_info"].pop("spec_verify_ct"), 3, "--speculative-algorithm"),
    (lambda d: d["meta_info"].update(spec_verify_ct=40), 3, "more verify steps"),
    (lambda d: d["meta_info"].update(spec_verify_ct=2), 3, "at most 3 drafts"),
    (lambda d: d.pop("meta_info"), 3, "no meta_info"),
    (lambda d: None, None, "draft length"),
])
def test_hostile_sglang_responses(change, k, why):
    doc = copy.deepcopy(SGLANG)
    change(doc)
    with pytest.raises(CanaryResponseError, match=re.escape(why)):
        parse_response(doc, "sglang", k)


def test_a_llamacpp_canary_leaves_the_window_in_proportion():
    """Its verify steps are not in the response: taken out as its share of drafted tokens."""
    w = Window(10.0, 100.0, 300.0, 180.0, (80.0, 60.0, 40.0), 400.0, 50.0, 0.0, None, None,
               0.0, 0.0, 0.1, True)
    u = parse_response({**LLAMACPP, "timings": {"draft_n": 30, "draft_n_accepted": 15}},
                       "llamacpp")
    out = subtract(w, [u])
    assert (out.drafts, out.draft_tokens, out.accepted_tokens) == (90.0, 270.0, 165.0)
    assert out.accepted_per_pos == pytest.approx((72.0, 54.0, 36.0))
    assert out.generation_tokens == 392.0


def test_sglang_is_asked_on_its_native_endpoint(monkeypatch):
    sent = {}

    class R:
        status, body = 200, b'{"meta_info": {}}'

    def fake(method, url, **kw):
        sent.update(url=url, body=kw["body"])
        return R()

    monkeypatch.setattr("rocmseat.watch.canary_service.request", fake)
    http_send(CanaryTarget("r0", "http://h:1", "demo", 4, None, "sglang", 3), "Hello", 8)
    assert sent["url"] == "http://h:1/generate"
    assert b'"max_new_tokens": 8' in sent["body"] or b'"max_new_tokens":8' in sent["body"]
    http_send(CanaryTarget("r0", "http://h:1", "demo", 4, None, "llamacpp", 3), "Hello", 8)
    assert sent["url"] == "http://h:1/v1/completions"
