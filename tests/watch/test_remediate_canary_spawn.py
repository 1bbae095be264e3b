"""Remediation with the drafter canary and the slow-spawn lottery (issue 27 items 5 and 6), on
the policy's pure `decide` and on the canary service the watcher runs:

- `drafter_canary_failed` alone (no traffic at all) starts step 1;
- step 1 is judged by the canary's first round on the new engine (no drafts of traffic needed),
  the journal saying `verified_by: canary` with the round's rates;
- the canary's rounds count only on the engine running now: a restart clears the last verdict
  and makes a round due at once; a replica serving without its drafter gets no canary;
- `replica_slow_spawn` restarts once (step 3, `restart-slow-spawn`), verified by the new start's
  decode rate: judged normal, judged slow again (said, and the day's bound refuses a loop), or
  not judged within `verify_timeout_s`.
"""

from __future__ import annotations

import dataclasses

from rocmseat.watch import alerts as A
from rocmseat.watch.canary import CanaryRound
from rocmseat.watch.remediate import documents, journal
from rocmseat.watch.remediate import policy as P
from tests.watch.test_canary import DEAD, GOOD, World, status

SETTINGS = P.Settings(mode="on", verify_drafts=100, verify_s=20.0, ready_timeout_s=600.0,
                      verify_timeout_s=300.0)
T0 = 1_800_000_000.0


def obs(**kw) -> P.Observation:
    base = dict(replica="r0", up=True, restarted=False, alerts=(), key="k" * 64,
                cache_loaded=True, duration_s=10.0)
    return P.Observation(**(base | kw))


def step(state: P.State, o: P.Observation, now: float) -> P.Decision:
    decision = P.decide(state, [o], now, SETTINGS, node="n1", view_fresh=True)
    for record in decision.records:  # every record the journal would write is a valid document
        documents.parse_record(journal_text(record))
    return decision


def journal_text(record: P.StepRecord) -> str:
    import json

    doc = journal.record_json(journal.Meta("heal", "/s.toml", "n1", "on"), record)
    return json.dumps(doc)


def outcomes(decision: P.Decision) -> list[tuple[int | None, str]]:
    return [(r.step, r.outcome) for r in decision.records]


def test_the_canary_alone_starts_step_1_and_judges_it() -> None:
    # no traffic: the window generated nothing, only the canary saw the collapse
    d = step(P.State(), obs(alerts=(A.DRAFTER_CANARY_FAILED,), generation_tokens=0.0), T0)
    assert outcomes(d) == [(1, "started")]
    assert [a.action for a in d.actions] == [P.MOVE_CACHE_RESTART]
    assert d.state.ladders["r0"].pending.collapsed_tps is None  # no traffic: no rate, not 0
    d = step(d.state, obs(restarted=True), T0 + 60)  # the new engine is seen
    assert d.records == () or outcomes(d) == []
    # no drafts of traffic at all, and no canary round yet: step 1 waits
    d = step(d.state, obs(), T0 + 62)
    assert d.state.ladders["r0"].pending is not None and not d.records
    dead = CanaryRound(T0 + 61, True, "0.000,0.000", "1.000,1.000")
    d = step(d.state, obs(canary=dead), T0 + 64)
    assert outcomes(d) == [(1, "still collapsed after a fresh compile"), (2, "started")]
    verdict = d.records[0]
    assert verdict.figures["verified_by"] == "canary"
    assert verdict.figures["canary_rates"] == "0.000,0.000"
    assert verdict.diagnosis == P.DIAGNOSIS_NOT_CACHE
    assert [a.mode for a in d.actions] == ["no-drafter"]


def test_a_good_canary_round_says_the_cache_was_stale() -> None:
    d = step(P.State(), obs(alerts=(A.SPEC_DRAFTER_DEAD,), generation_tokens=400.0), T0)
    d = step(d.state, obs(restarted=True), T0 + 60)
    good = CanaryRound(T0 + 61, False, "1.000,1.000", "1.000,1.000")
    d = step(d.state, obs(canary=good), T0 + 63)
    assert outcomes(d) == [(1, "recovered")]
    assert d.records[0].diagnosis == P.DIAGNOSIS_CACHE
    assert d.state.ladders["r0"].pending is None and d.state.ladders["r0"].mode == "drafter"


def test_without_the_canary_step_1_still_waits_for_traffic() -> None:
    d = step(P.State(), obs(alerts=(A.SPEC_DRAFTER_DEAD,), generation_tokens=400.0), T0)
    d = step(d.state, obs(restarted=True), T0 + 60)
    d = step(d.state, obs(drafts=60.0, accepted=0.0, accepted_pos0=0.0), T0 + 70)
    assert not d.records  # 60 of 100 drafts
    d = step(d.state, obs(drafts=60.0, accepted=0.0, accepted_pos0=0.0), T0 + 80)
    assert outcomes(d)[0] == (1, "still collapsed after a fresh compile")
    assert d.records[0].figures["verified_by"] == "traffic"


def test_a_slow_start_is_restarted_once_and_verified_by_its_rate() -> None:
    slow = obs(alerts=(A.REPLICA_SLOW_SPAWN,), spawn_factor=1.8)
    d = step(P.State(), slow, T0)
    assert outcomes(d) == [(3, "started")]
    assert [(a.action, a.mode) for a in d.actions] == [(P.RESTART_SLOW_SPAWN, "drafter")]
    assert d.records[0].why["spawn_factor"] == 1.8
    assert d.state.ladders["r0"].stalls_s == ()  # a slow start is not a stall
    d = step(d.state, obs(restarted=True), T0 + 60)
    d = step(d.state, obs(), T0 + 70)  # not judged yet (spawn_factor None): waits
    assert not d.records
    d = step(d.state, obs(spawn_factor=1.02), T0 + 100)
    assert outcomes(d) == [(3, "restarted: decodes at the seat's rate")]
    assert d.records[0].figures == {"ready_after_s": 60.0, "drafts": 0.0,
                                    "verified_by": "decode rate", "spawn_factor": 1.02}


def test_slow_again_after_its_restart_is_said_and_not_looped() -> None:
    d = step(P.State(), obs(alerts=(A.REPLICA_SLOW_SPAWN,), spawn_factor=1.8), T0)
    d = step(d.state, obs(restarted=True), T0 + 60)
    again = obs(alerts=(A.REPLICA_SLOW_SPAWN,), spawn_factor=1.7)
    d = step(d.state, again, T0 + 100)
    assert outcomes(d) == [(3, "still slow after a restart")]
    d = step(d.state, again, T0 + 110)  # the same key within the day: the bound halts it
    assert [o for _, o in outcomes(d)] == [
        "halted: one remediation per replica and config key per day: r0 was already "
        "remediated under config key kkkkkkkkkkkk in the last 24 h"]
    assert not d.actions


def test_a_slow_start_never_judged_is_unverified() -> None:
    d = step(P.State(), obs(alerts=(A.REPLICA_SLOW_SPAWN,), spawn_factor=1.5), T0)
    d = step(d.state, obs(restarted=True), T0 + 60)
    d = step(d.state, obs(), T0 + 60 + SETTINGS.verify_timeout_s + 1)
    assert outcomes(d) == [(3, "unverified: not enough traffic")]


def test_the_canary_counts_only_rounds_on_the_engine_running_now(tmp_path) -> None:
    w = World(tmp_path, when="always")
    w.service.tick()  # learns the baseline: judges nothing
    assert w.service.last_round("r0") is None
    w.clock += 40
    w.service.tick()
    first = w.service.last_round("r0")
    assert first is not None and not first.failed
    w.service.restarted("r0", w.clock + 1)  # a new engine: the old verdict is gone
    assert w.service.last_round("r0") is None
    w.replies, w.clock = [DEAD], w.clock + 2  # and a round is due at once, not in 30 s
    w.service.tick()
    after = w.service.last_round("r0")
    assert after is not None and after.failed and after.rates == "0.000,0.000"
    assert after.started_s >= first.started_s


def test_no_canary_for_a_replica_without_its_drafter(tmp_path) -> None:
    w = World(tmp_path, when="always")
    w.status = dataclasses.replace(status(), speculating=False)
    w.service.tick()
    assert w.sent == []
    w.status = status()
    w.replies = [GOOD]
    w.service.tick()
    assert w.sent == ["a", "b"]


def test_the_watcher_tells_the_canary_and_step_1_reads_its_round(tmp_path) -> None:
    """A real Watcher on replayed vLLM pages and a real Remediator (tests/watch/
    test_remediate.py's world), wired as `rocmseat watch` wires the canary
    (rocmseat.watch.service): the canary's alert starts step 1; the watcher tells the canary of
    the new engine and resolves the old engine's alert; the canary's round on the new engine
    judges step 1."""
    from tests.watch.test_remediate import World as Seat

    world = Seat(tmp_path)
    restarts: list[str] = []
    rounds: dict[str, CanaryRound] = {}
    world.watcher.on_restart = lambda replica, now: (restarts.append(replica),
                                                     rounds.pop(replica, None))
    world.remediator.canary_round = rounds.get
    world.step(3)
    world.watcher.set_alert("r0", A.DRAFTER_CANARY_FAILED, True, {"rates": "0.000"})
    world.step(1)
    assert world.outcomes() == [("r0", 1, P.MOVE_CACHE_RESTART, "started")]
    assert world.restarts == [("r0", "drafter")]
    world.step(1)  # the new engine's first scrape: the canary is told, the old alert resolves
    assert restarts == ["r0"]
    assert A.DRAFTER_CANARY_FAILED not in world.status().alerts
    rounds["r0"] = CanaryRound(world.clock(), True, "0.000,0.000", "1.000,1.000")
    world.step(1)
    assert [o[3] for o in world.outcomes()] == [
        "started", "still collapsed after a fresh compile", "started"]
    assert world.journal()[1]["figures"]["verified_by"] == "canary"
