"""The drafter canary (rocmseat/watch/canary.py, canary_service.py; issue 27 item 4): the
response parser on vLLM's per-request shape, each prompt judged against its own baseline, the
canary's tokens taken out of the traffic window, idle-only / saturation / budget gating, the
baseline per config key kept in the state dir; the seat table, launch's flag and the key.

The response bodies are built in the shape of vLLM 0.32's `RequestSpecDecodeMetrics.to_dict`
(vllm/v1/metrics/stats.py) under `metrics.speculative_decoding` of a completion
(vllm/entrypoints/openai/completion/serving.py); the engine tier records real ones
(tests/e2e/test_remediate_engine.py)."""

from __future__ import annotations

import copy
import json
import re

import pytest

from rocmseat.cache.key import split_engine_args
from rocmseat.errors import ConfigError
from rocmseat.launch.plan import engine_argv
from rocmseat.seat.canary_schema import Canary
from rocmseat.watch import alerts as A
from rocmseat.watch.canary import (
    CanaryResponseError,
    idle,
    judge_round,
    parse_response,
    saturated,
    subtract,
)
from rocmseat.watch.canary_service import CanaryService, CanaryTarget
from rocmseat.watch.status import ReplicaStatus
from rocmseat.watch.window import Window
from tests.placement.test_placement import DEMO, seat_from


def response(hist, *, k=3, completion=32, prompt=8):
    steps = sum(hist)
    accepted = sum(j * n for j, n in enumerate(hist))
    return {
        "id": "cmpl-1", "object": "text_completion", "model": "demo",
        "choices": [{"index": 0, "text": " a b c", "finish_reason": "length"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion},
        "metrics": {"speculative_decoding": {
            "mean_acceptance_length": 1.0 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / (steps * k) if steps else 0.0,
            "acceptance_histogram": list(hist), "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted, "num_draft_tokens": steps * k,
            "num_spec_tokens": k}},
    }


GOOD = response([0, 0, 0, 8])  # every draft accepted: 8 steps x 4 tokens
DEAD = response([31, 0, 0, 0])  # nothing accepted: one token per step


def test_parse_a_response():
    u = parse_response(response([2, 1, 1, 4]))
    assert (u.drafts, u.draft_tokens, u.accepted_tokens) == (8, 24, 15)
    # per position i: the steps that accepted more than i drafts (vLLM's per_pos counters)
    assert u.accepted_per_pos == (6, 5, 4)
    assert u.rate == pytest.approx(15 / 24)
    assert (u.generation_tokens, u.prompt_tokens) == (32, 8)


@pytest.mark.parametrize(("change", "why"), [
    (lambda d: d.pop("metrics"), "no metrics.speculative_decoding"),
    (lambda d: d["metrics"].update(speculative_decoding=None), "no metrics.speculative"),
    (lambda d: d["metrics"]["speculative_decoding"].update(acceptance_histogram="x"),
     "acceptance_histogram"),
    (lambda d: d["metrics"]["speculative_decoding"].update(num_spec_steps=-1), "num_spec_steps"),
    (lambda d: d["metrics"]["speculative_decoding"].update(num_spec_steps=True),
     "num_spec_steps"),
    (lambda d: d["metrics"]["speculative_decoding"].update(num_accepted_draft_tokens=99),
     "does not add up"),
    (lambda d: d["metrics"]["speculative_decoding"].update(num_draft_tokens=1),
     "more accepted than drafted"),
    (lambda d: d.update(usage="x"), "no usage"),
    (lambda d: d["usage"].update(completion_tokens=1.5), "usage.completion_tokens"),
])
def test_hostile_responses_are_one_line_errors(change, why):
    doc = copy.deepcopy(GOOD)
    change(doc)
    with pytest.raises(CanaryResponseError, match=re.escape(why)):
        parse_response(doc)
    with pytest.raises(CanaryResponseError):
        parse_response([1, 2])


def window(drafts=100.0, per_pos=(80.0, 60.0, 40.0), gen=400.0, running=0.0, waiting=0.0):
    return Window(10.0, drafts, drafts * 3, sum(per_pos), per_pos, gen, 50.0, 0.0, None, None,
                  running, waiting, 0.1, True)


def test_the_canary_is_not_the_seats_traffic():
    u = parse_response(response([2, 1, 1, 4]))
    w = subtract(window(), [u, u])
    assert (w.drafts, w.draft_tokens, w.accepted_tokens) == (84.0, 252.0, 150.0)
    assert w.accepted_per_pos == (68.0, 50.0, 32.0)
    assert (w.generation_tokens, w.prompt_tokens) == (336.0, 34.0)
    # a window that held only the canary is empty after it, never negative
    alone = subtract(window(drafts=8.0, per_pos=(6.0, 5.0, 4.0), gen=32.0), [u, u])
    assert alone.drafts == 0.0 and alone.accepted_per_pos == (0.0, 0.0, 0.0)
    assert alone.acceptance_length is None
    assert subtract(window(), []) == window()


def test_each_prompt_against_its_own_baseline():
    learned = judge_round([1.0, 0.5, None], None, 0.5)
    assert learned.learned and not learned.failed
    ok = judge_round([0.9, 0.45, None], [1.0, 0.5, None], 0.5)
    assert not ok.failed and not any(p.collapsed for p in ok.prompts)
    # one prompt down is a change of that prompt, not a dead drafter
    one = judge_round([0.1, 0.45, None], [1.0, 0.5, None], 0.5)
    assert not one.failed and [p.collapsed for p in one.prompts] == [True, False, False]
    dead = judge_round([0.0, 0.0, 0.0], [1.0, 0.5, None], 0.5)
    assert dead.failed and dead.details()["collapsed"] == "2"
    # a prompt that never drafted is not judged; a round with nothing judged cannot fail
    assert not judge_round([0.0], [0.0], 0.5).failed


def test_saturated_and_idle():
    assert saturated(4.0, 0.0, 4) and saturated(1.0, 2.0, 4) and not saturated(1.0, 0.0, 4)
    assert idle(0.0, 0.0) and not idle(1.0, 0.0) and not idle(None, 0.0)


def status(key="k1", running=0.0, waiting=0.0, up=True):
    return ReplicaStatus(
        replica="r0", url="http://127.0.0.1:1/metrics", up=up, error=None,
        scrape_errors_total=0, consecutive_failures=0, key=key,
        window=window(running=running, waiting=waiting), judged=None, restarted=False,
        blind=False, baseline=None, learning=True, expected_al=None, lower_al=None, cusum=0.0,
        z=None, stalled_for_s=None, alerts=(), labels=(), restarts_in_row=0, gpus=(),
        speculating=True)


class World:
    def __init__(self, tmp_path, **canary):
        self.clock = 1000.0
        self.replies = [GOOD]
        self.sent = []
        self.alerts = []
        self.logs = []
        self.status = status()
        self.config = Canary(enabled=True, prompts=("a", "b"), interval_s=30.0, **canary)
        self.service = self.make(tmp_path)

    def make(self, tmp_path):
        return CanaryService(
            self.config, [CanaryTarget("r0", "http://127.0.0.1:1", "demo", 4)],
            statuses=lambda: [self.status], set_alert=lambda *a: self.alerts.append(a),
            state_dir=tmp_path, seat="demo", log=self.logs.append, send=self.send,
            clock=lambda: self.clock)

    def send(self, target, prompt, max_tokens):
        self.sent.append(prompt)
        return self.replies[min(len(self.sent) - 1, len(self.replies) - 1)]


def test_a_collapse_with_no_traffic_fires_within_two_intervals(tmp_path):
    w = World(tmp_path)
    w.service.tick()  # round 1 learns the key's baseline
    assert w.sent == ["a", "b"] and w.alerts[-1][1:3] == (A.DRAFTER_CANARY_FAILED, False)
    assert any("canary-baseline-learned key=k1" in line for line in w.logs)
    w.clock += 10
    w.service.tick()  # not due yet
    assert len(w.sent) == 2
    w.replies = [DEAD]  # the drafter's weights change behind the key
    w.clock += 25
    w.service.tick()
    assert w.alerts[-1][1:3] == (A.DRAFTER_CANARY_FAILED, True)
    assert w.alerts[-1][3]["rates"] == "0.000,0.000"
    # the rounds' tokens wait for the watcher, who takes those finished by its scrape
    assert len(w.service.take("r0", w.clock)) == 4 and w.service.take("r0", w.clock) == []


def test_the_baseline_is_per_key_and_kept(tmp_path):
    w = World(tmp_path)
    w.service.tick()
    saved = json.loads((tmp_path / "watch" / "canary-demo.r0.json").read_text())
    assert saved == {"schema": "rocmseat.canary-baselines/v1", "key": "k1", "prompts": 2,
                     "rates": [1.0, 1.0]}
    again = w.make(tmp_path)  # a restarted watchdog keeps the key's baseline
    w.replies, w.sent = [DEAD], []
    w.clock += 100
    again.tick()
    assert w.alerts[-1][1:3] == (A.DRAFTER_CANARY_FAILED, True)
    w.status = status(key="k2")  # another config key learns afresh
    w.clock += 100
    again.tick()
    assert w.alerts[-1][1:3] == (A.DRAFTER_CANARY_FAILED, False)


def test_idle_only_saturation_and_budget(tmp_path):
    w = World(tmp_path)
    w.status = status(running=1.0)
    w.service.tick()
    assert w.sent == []  # idle-only: traffic runs
    always = World(tmp_path / "always", when="always")
    always.status = status(running=1.0)
    always.service.tick()
    assert always.sent == ["a", "b"]
    always.status = status(running=4.0)  # every slot taken: the traffic's
    always.clock += 100
    always.service.tick()
    assert always.sent == ["a", "b"]
    always.status = status(running=1.0, waiting=1.0)
    always.clock += 100
    always.service.tick()
    assert always.sent == ["a", "b"]
    down = World(tmp_path / "down")
    down.status = status(up=False)
    down.service.tick()
    assert down.sent == []
    # 100 tokens an hour: one round of 2 x 32 fits, the next waits for the hour to pass
    poor = World(tmp_path / "poor", tokens_per_hour=100)
    poor.service.tick()
    poor.clock += 100
    poor.service.tick()
    assert poor.sent == ["a", "b"]
    poor.clock += 3600
    poor.service.tick()
    assert poor.sent == ["a", "b", "a", "b"]


def test_a_failed_request_judges_nothing(tmp_path):
    w = World(tmp_path)
    w.replies = [{"error": "boom"}]
    w.service.tick()
    assert w.alerts == [] and any("canary-request-failed" in line for line in w.logs)


def test_the_seat_table_launch_flag_and_key(tmp_path):
    text = DEMO + "\n[canary]\nenabled = true\ninterval_s = 20\n"
    seat = seat_from(tmp_path, text)
    assert seat.canary.enabled and seat.canary.interval_s == 20.0
    argv = engine_argv(seat, 9000)
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "summary"
    # observability, not a key factor: the same key args as without it
    plain = engine_argv(seat_from(tmp_path, DEMO, "plain.toml"), 9000)
    assert split_engine_args(list(argv)) == split_engine_args(list(plain))
    no_drafter = re.sub(r"\[drafter\]\n(.*\n){3}", "", text)
    with pytest.raises(ConfigError, match="a drafter canary has nothing to check"):
        seat_from(tmp_path, no_drafter, "nod.toml")
    with pytest.raises(ConfigError):
        seat_from(tmp_path, DEMO + "\n[canary]\nenabled = true\nwhen = \"sometimes\"\n",
                  "bad.toml")
