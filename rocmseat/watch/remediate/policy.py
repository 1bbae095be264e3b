"""The remediation ladder and its bounds, as pure functions (docs/remediate.md).

`decide(state, observations, now_s, ...)` takes the ladder's state (what each replica is doing,
the actions taken, the halts), what the watcher saw of each replica in its last evaluation,
and the clock; it returns the new state, the actions to run at the edge, and the step records
to journal. Nothing here reads a file, runs a command or looks at a clock.

The ladder, for a replica rocmseat launched:

1. `spec_drafter_dead` or `spec_acceptance_drop` (the detector's held collapse on traffic) or
   `drafter_canary_failed` (the canary's fixed prompts, traffic or none) on a replica whose last
   start loaded its compile caches: move them aside, restart, judge the new engine. With the
   canary on, its first round on the new engine judges it (seconds after READY, no traffic
   needed); else acceptance over a fixed number of drafts of live traffic. Recovered: "stale
   compile cache".
2. Still collapsed after a fresh compile (or step 1 does not apply): restart without the
   drafter and keep it there once it generates at least as fast as it did collapsed.
3. A restart: `replica_stalled` restarts once, a second stall within an hour takes it out of
   rotation; `replica_slow_spawn` (the slow-spawn lottery, rocmseat.watch.spawn) restarts once,
   verified by the new start's decode rate against the seat's history.

Bounds: one ladder per replica and config key per day, `node_per_hour` actions per node and
hour, at most `max_fraction` of the watched replicas (at least one) in remediation at once. A
bound that trips halts its scope until `rocmseat remediate reset`. Never while the watcher's
view is stale or blind, never on a node whose preflight fails.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rocmseat.watch import alerts as A
from rocmseat.watch.canary import CanaryRound

DAY_S = 86_400.0
HOUR_S = 3_600.0
TRIGGERS = (A.SPEC_DRAFTER_DEAD, A.SPEC_ACCEPTANCE_DROP, A.DRAFTER_CANARY_FAILED)
# Every alert the ladder may act on: a drafter collapse, a stall, a slow start.
ACTS_ON = (*TRIGGERS, A.REPLICA_STALLED, A.REPLICA_SLOW_SPAWN)
# The watcher cannot see the replica well enough to act on what it says.
BLINDING = (A.REPLICA_DOWN, A.SPEC_BLIND, A.METRICS_UNSTABLE)
# Position-0 acceptance at or above this over the verification drafts: the drafter works again
# (the detector's own resolve threshold, rocmseat.watch.detector.DetectorParams.dead_resolve_p0).
RECOVERED_P0 = 0.20

# actions
MOVE_CACHE_RESTART = "move-cache-aside-restart"
RESTART_NO_DRAFTER = "restart-without-drafter"
RESTART = "restart"
RESTART_SLOW_SPAWN = "restart-slow-spawn"
OUT_OF_ROTATION = "out-of-rotation"

DIAGNOSIS_CACHE = "stale compile cache"
DIAGNOSIS_NOT_CACHE = "not the cache"


@dataclass(frozen=True, slots=True)
class Settings:
    mode: str  # "on" | "dry-run"
    verify_drafts: int = 200
    verify_s: float = 60.0
    ready_timeout_s: float = 1800.0
    verify_timeout_s: float = 1800.0
    node_per_hour: int = 3
    max_fraction: float = 0.25
    # an alert episode outlives a gap shorter than this (the detector's resolve hold): a
    # refusal is journalled once per episode, not once per flap
    episode_hold_s: float = 60.0

    @property
    def dry_run(self) -> bool:
        return self.mode == "dry-run"


@dataclass(frozen=True, slots=True)
class Observation:
    """One replica after one evaluation (from its ReplicaStatus and what the edge read)."""

    replica: str
    up: bool
    restarted: bool  # this scrape saw a new engine process
    alerts: tuple[str, ...]
    key: str  # the config key the watcher reads from the replica's cache manifest
    drafts: float = 0.0  # the last scrape-to-scrape window
    accepted: float = 0.0
    accepted_pos0: float = 0.0
    generation_tokens: float | None = None
    duration_s: float = 0.0
    lower_al: float | None = None  # the detector's in-control lower edge, when it has one
    al: float | None = None  # the last judged window's acceptance length
    p0: float | None = None  # and its position-0 acceptance
    # why rocmseat may not act on this replica (None: it may): no placement record, the node's
    # preflight fails or cannot be read
    refusal: str | None = None
    cache_loaded: bool | None = None  # its last start loaded its compile caches (None: unknown)
    last_start: str | None = None  # that start's time, from its startup report
    # seconds since the watcher last saw a trigger or stall alert on it (None: never, unknown)
    quiet_s: float | None = None
    # the canary's last complete round on the engine running now (None: canary off, or no
    # round judged on this engine yet; rocmseat.watch.canary_service.CanaryService.last_round)
    canary: CanaryRound | None = None
    # this start's decode rate against the seat's history at the same load, once judged
    # (history / this start: >= 1 is slower; None: not judged yet; rocmseat.watch.spawn)
    spawn_factor: float | None = None

    @property
    def generation_tokens_per_s(self) -> float | None:
        # no generation in the window (no traffic, or the canary's alone): no rate, not 0
        if not self.generation_tokens or self.duration_s <= 0:
            return None
        return self.generation_tokens / self.duration_s


@dataclass(frozen=True, slots=True)
class Pending:
    """A step that ran (or is running) and waits for its verification."""

    step: int  # 1, 2 or 3
    action: str
    started_s: float
    key: str
    why: Mapping[str, Any]
    collapsed_tps: float | None = None
    seen_restart: bool = False
    restarted_s: float | None = None
    drafts: float = 0.0
    accepted: float = 0.0
    accepted_pos0: float = 0.0
    generation_tokens: float = 0.0
    generation_s: float = 0.0
    failed: str | None = None  # the edge could not run the action


@dataclass(frozen=True, slots=True)
class Ladder:
    """One replica's place on the ladder."""

    mode: str = "drafter"  # "drafter" | "no-drafter" | "out-of-rotation"
    since_s: float | None = None  # when it entered that mode
    pending: Pending | None = None
    cache_tried_key: str | None = None  # step 1 ran for this key: a collapse again is step 2
    stalls_s: tuple[float, ...] = ()  # stall restarts
    noted: str = ""  # the last refusal or dry-run journalled (said once per alert episode)
    ladder_started_s: float | None = None  # the first step of the current ladder (journal kept)
    reset_problem: str | None = None  # mode "resetting": why the reset's restart did not finish


@dataclass(frozen=True, slots=True)
class Taken:
    time_s: float
    replica: str
    key: str
    action: str
    ladder_start: bool  # the first step of a ladder (the per-replica-and-key bound counts these)


@dataclass(frozen=True, slots=True)
class Halt:
    scope: str  # "replica:<name>" | "node:<host>" | "fleet"
    bound: str
    since_s: float
    text: str


@dataclass(frozen=True, slots=True)
class State:
    ladders: Mapping[str, Ladder] = field(default_factory=dict)
    taken: tuple[Taken, ...] = ()
    halts: Mapping[str, Halt] = field(default_factory=dict)

    def ladder(self, replica: str) -> Ladder:
        return self.ladders.get(replica, Ladder())


@dataclass(frozen=True, slots=True)
class Action:
    """What the edge must do for one replica."""

    replica: str
    action: str
    mode: str  # the mode the replica restarts in: "drafter" | "no-drafter"
    reason: str


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One journal entry (rocmseat.remediation/v1)."""

    replica: str
    step: int | None
    action: str
    outcome: str
    time_s: float
    why: Mapping[str, Any] = field(default_factory=dict)
    figures: Mapping[str, Any] = field(default_factory=dict)
    diagnosis: str | None = None
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    state: State
    actions: tuple[Action, ...]
    records: tuple[StepRecord, ...]


def _finite(value: float | None, digits: int = 3) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def replica_scope(replica: str) -> str:
    return f"replica:{replica}"


def node_scope(node: str) -> str:
    return f"node:{node}"


FLEET = "fleet"


def halted_for(state: State, replica: str, node: str) -> Halt | None:
    for scope in (replica_scope(replica), node_scope(node), FLEET):
        if scope in state.halts:
            return state.halts[scope]
    return None


class _Run:
    """The mutable working copy of one decide() call."""

    def __init__(self, state: State, now_s: float, settings: Settings, node: str,
                 watched: int) -> None:
        self.ladders = dict(state.ladders)
        # older than a day, an action no longer counts for any bound
        self.taken = [t for t in state.taken if now_s - t.time_s < DAY_S]
        self.halts = dict(state.halts)
        self.actions: list[Action] = []
        self.records: list[StepRecord] = []
        self.now = now_s
        self.settings = settings
        self.node = node
        self.watched = watched

    def state(self) -> State:
        return State(self.ladders, tuple(self.taken), self.halts)

    def record(self, replica: str, step: int | None, action: str, outcome: str, **kw: Any) -> None:
        self.records.append(StepRecord(replica, step, action, outcome, self.now,
                                       dry_run=self.settings.dry_run, **kw))

    def set(self, replica: str, ladder: Ladder) -> None:
        self.ladders[replica] = ladder

    def note_once(self, obs: Observation, ladder: Ladder, text: str, step: int | None,  # noqa: PLR0917
                  action: str, why: Mapping[str, Any]) -> None:
        """A refusal or a dry-run decision: journalled when it changes, not every evaluation."""
        if ladder.noted == text:
            return
        self.record(obs.replica, step, action, text, why=why)
        self.set(obs.replica, dataclasses.replace(ladder, noted=text))


def decide(state: State, observations: Sequence[Observation], now_s: float,
           settings: Settings, *, node: str, view_fresh: bool,
           view_problem: str = "") -> Decision:
    """The next state, the actions to run and the records to journal (see the module text).
    `view_fresh`: the watcher's own last evaluation is recent; when it is not, nothing starts
    (steps already running are still verified)."""
    run = _Run(state, now_s, settings, node, len(observations))
    for obs in observations:
        ladder = run.ladders.get(obs.replica, Ladder())
        if ladder.mode == "resetting":
            continue  # `rocmseat remediate reset` owns it until its restart is done
        if ladder.pending is not None:
            _verify(run, obs, ladder, ladder.pending)
            continue
        _consider(run, obs, ladder, view_fresh, view_problem)
    return Decision(run.state(), tuple(run.actions), tuple(run.records))


def _trigger(obs: Observation) -> str | None:
    return next((a for a in TRIGGERS if a in obs.alerts), None)


def _why(obs: Observation, alert: str) -> dict[str, Any]:
    if alert == A.REPLICA_SLOW_SPAWN:
        return {"alert": alert, "spawn_factor": _finite(obs.spawn_factor), "key": obs.key}
    return {"alert": alert, "acceptance_length": _finite(obs.al), "p0": _finite(obs.p0),
            "key": obs.key, "last_start": obs.last_start}


def _consider(run: _Run, obs: Observation, ladder: Ladder, view_fresh: bool,
              view_problem: str) -> None:
    if ladder.mode == "out-of-rotation":
        return
    stalled = A.REPLICA_STALLED in obs.alerts
    alert = A.REPLICA_STALLED if stalled else _trigger(obs)
    acting = None if alert is None or (ladder.mode == "no-drafter" and not stalled) else alert
    if acting is None and A.REPLICA_SLOW_SPAWN in obs.alerts:
        acting = A.REPLICA_SLOW_SPAWN  # a slow start, drafter or not: one restart
    if acting is None:
        episode_over = obs.quiet_s is None or obs.quiet_s >= run.settings.episode_hold_s
        if ladder.noted and (alert is not None or episode_over):
            run.set(obs.replica, dataclasses.replace(ladder, noted=""))
        return
    why = _why(obs, acting)
    blind = next((a for a in BLINDING if a in obs.alerts), None)
    refusal = (
        f"refused: the watcher's view is stale ({view_problem})" if not view_fresh
        else f"refused: the watcher is blind to {obs.replica} ({blind})" if blind
        else f"refused: {obs.refusal}" if obs.refusal
        else None)
    if refusal is None and (halt := halted_for(run.state(), obs.replica, run.node)) is not None:
        refusal = f"refused: remediation is halted for {halt.scope} ({halt.bound})"
    if refusal is not None:
        run.note_once(obs, ladder, refusal, None, "none", why)
        return
    if stalled:
        _stall(run, obs, ladder, why)
        return
    if acting == A.REPLICA_SLOW_SPAWN:
        # within the ladder's bounds: one per replica and config key per day, so a start that
        # is slow again after its restart is said (halted), not restarted in a loop
        _start(run, obs, ladder, 3, RESTART_SLOW_SPAWN,
               "no-drafter" if ladder.mode == "no-drafter" else "drafter", why)
        return
    step1 = obs.cache_loaded is True and ladder.cache_tried_key != obs.key
    if step1:
        _start(run, obs, ladder, 1, MOVE_CACHE_RESTART, "drafter", why,
               collapsed_tps=obs.generation_tokens_per_s)
    else:
        why["step1"] = ("not applicable: the last start did not load its compile caches"
                        if obs.cache_loaded is not True else
                        "done for this key: collapsed again after a fresh compile")
        _start(run, obs, ladder, 2, RESTART_NO_DRAFTER, "no-drafter", why,
               collapsed_tps=obs.generation_tokens_per_s)


def _stall(run: _Run, obs: Observation, ladder: Ladder, why: dict[str, Any]) -> None:
    recent = [t for t in ladder.stalls_s if run.now - t < HOUR_S]
    if recent:
        text = (f"{obs.replica} stalled again within an hour of its restart at "
                f"{_iso(recent[-1])}: out of rotation; fix it and run `rocmseat remediate "
                f"reset {obs.replica}`")
        why["text"] = text
        if run.settings.dry_run:
            run.note_once(obs, ladder, f"dry-run: would take {obs.replica} out of rotation", 3,
                          OUT_OF_ROTATION, why)
            return
        run.record(obs.replica, 3, OUT_OF_ROTATION, "out of rotation", why=why)
        run.set(obs.replica, dataclasses.replace(ladder, mode="out-of-rotation",
                                                 since_s=run.now, noted=""))
        return
    _start(run, obs, ladder, 3, RESTART, ladder.mode if ladder.mode == "no-drafter"
           else "drafter", why)


def _bound(run: _Run, obs: Observation, ladder_start: bool) -> Halt | None:
    """The first bound that one more action on `obs.replica` would break, or None."""
    if ladder_start and any(t.ladder_start and t.replica == obs.replica and t.key == obs.key
                            for t in run.taken):
        return Halt(replica_scope(obs.replica), "one remediation per replica and config key per "
                    "day", run.now, f"{obs.replica} was already remediated under config key "
                    f"{obs.key[:12]} in the last 24 h")
    node_actions = [t for t in run.taken if run.now - t.time_s < HOUR_S]
    if len(node_actions) >= run.settings.node_per_hour:
        return Halt(node_scope(run.node), f"{run.settings.node_per_hour} remediations per node "
                    "per hour", run.now, f"{len(node_actions)} remediations on {run.node} in "
                    "the last hour")
    busy = [n for n, lad in run.ladders.items() if lad.pending is not None]
    allowed = max(1, math.floor(run.settings.max_fraction * run.watched))
    if len(busy) >= allowed:
        return Halt(FLEET, f"at most {run.settings.max_fraction:g} of the watched replicas in "
                    "remediation at once", run.now, f"{len(busy)} of {run.watched} watched "
                    f"replicas already in remediation ({', '.join(sorted(busy))}); limit "
                    f"{allowed}")
    return None


def _start(run: _Run, obs: Observation, ladder: Ladder, step: int, action: str, mode: str,  # noqa: PLR0917
           why: dict[str, Any], *, collapsed_tps: float | None = None,
           continuation: bool = False) -> None:
    """Start a step (bounds permitting). `continuation`: step 2 right after step 1's verdict,
    the same ladder; every other start is a new remediation for the per-day bound."""
    ladder_start = not continuation
    halt = _bound(run, obs, ladder_start)
    if halt is not None:
        text = f"halted: {halt.bound}: {halt.text}"
        if run.settings.dry_run:
            run.note_once(obs, ladder, f"dry-run: would halt: {halt.bound}", step, action, why)
            return
        run.halts[halt.scope] = halt
        run.record(obs.replica, step, action, text, why=why)
        return
    if run.settings.dry_run:
        run.note_once(obs, ladder, f"dry-run: would {action}", step, action, why)
        return
    run.taken.append(Taken(run.now, obs.replica, obs.key, action, ladder_start))
    pending = Pending(step, action, run.now, obs.key, why, collapsed_tps=collapsed_tps)
    stalls = (*ladder.stalls_s, run.now) if action == RESTART else ladder.stalls_s
    tried = obs.key if step == 1 else ladder.cache_tried_key
    begun = run.now if ladder_start else ladder.ladder_started_s
    run.set(obs.replica, dataclasses.replace(ladder, pending=pending, stalls_s=stalls,
                                             cache_tried_key=tried, noted="",
                                             ladder_started_s=begun))
    run.actions.append(Action(obs.replica, action, mode, _reason(obs, why)))
    run.record(obs.replica, step, action, "started", why=why)


def _reason(obs: Observation, why: Mapping[str, Any]) -> str:
    parts = [f"alert {why['alert']}"]
    if why.get("acceptance_length") is not None:
        parts.append(f"acceptance length {why['acceptance_length']}")
    if why.get("last_start"):
        parts.append(f"after the start of {why['last_start']}")
    return f"{obs.replica}: " + ", ".join(parts)


def action_failed(state: State, replica: str, error: str) -> State:
    """The edge could not run the action of `replica`'s pending step."""
    ladder = state.ladders.get(replica)
    if ladder is None or ladder.pending is None:
        return state
    pending = dataclasses.replace(ladder.pending, failed=error)
    return dataclasses.replace(state, ladders={**state.ladders, replica: dataclasses.replace(
        ladder, pending=pending)})


def _verify(run: _Run, obs: Observation, ladder: Ladder, pending: Pending) -> None:
    s = run.settings
    figures: dict[str, Any] = {}
    if pending.failed is not None:
        halt = Halt(replica_scope(obs.replica), "an action failed", run.now, pending.failed)
        run.halts[halt.scope] = halt
        _finish(run, obs, ladder, pending, f"failed: {pending.failed}", figures, mode=ladder.mode)
        return
    if not pending.seen_restart:
        if obs.restarted:
            run.set(obs.replica, dataclasses.replace(ladder, pending=dataclasses.replace(
                pending, seen_restart=True, restarted_s=run.now)))
        elif run.now - pending.started_s > s.ready_timeout_s:
            halt = Halt(replica_scope(obs.replica), "a restart was not seen", run.now,
                        f"no new engine within {s.ready_timeout_s:g} s")
            run.halts[halt.scope] = halt
            _finish(run, obs, ladder, pending, f"failed: no new engine within "
                    f"{s.ready_timeout_s:g} s of the restart", figures, mode=ladder.mode)
        return
    if not obs.restarted and obs.up:
        gen = obs.generation_tokens or 0.0
        pending = dataclasses.replace(
            pending, drafts=pending.drafts + obs.drafts, accepted=pending.accepted + obs.accepted,
            accepted_pos0=pending.accepted_pos0 + obs.accepted_pos0,
            generation_tokens=pending.generation_tokens + gen,
            generation_s=pending.generation_s + (obs.duration_s if gen > 0 else 0.0))
    ready_s = (pending.restarted_s or run.now) - pending.started_s
    figures = {"ready_after_s": _finite(ready_s, 1), "drafts": _finite(pending.drafts, 0)}
    if pending.step == 1:
        if obs.canary is not None:
            # the canary's first round on the new engine (it runs one as soon as the restart is
            # seen): its fixed prompts against their baseline for this key, no traffic needed
            figures |= {"verified_by": "canary", "canary_rates": obs.canary.rates,
                        "canary_baselines": obs.canary.baselines}
            _step1_verdict(run, obs, ladder, pending, figures, recovered=not obs.canary.failed)
            return
        if pending.drafts < s.verify_drafts:
            _wait(run, obs, ladder, pending, figures)
            return
        al = 1.0 + pending.accepted / pending.drafts
        p0 = pending.accepted_pos0 / pending.drafts
        figures |= {"verified_by": "traffic", "acceptance_length": _finite(al),
                    "p0": _finite(p0), "lower_al": _finite(obs.lower_al)}
        recovered = p0 >= RECOVERED_P0 and (obs.lower_al is None or al >= obs.lower_al)
        _step1_verdict(run, obs, ladder, pending, figures, recovered=recovered)
        return
    if pending.step == 2:
        if pending.generation_s < s.verify_s:
            _wait(run, obs, ladder, pending, figures)
            return
        tps = pending.generation_tokens / pending.generation_s
        figures |= {"tokens_per_s": _finite(tps, 2),
                    "collapsed_tokens_per_s": _finite(pending.collapsed_tps, 2)}
        if pending.collapsed_tps is not None and tps < pending.collapsed_tps:
            halt = Halt(replica_scope(obs.replica), "slower without the drafter", run.now,
                        f"{tps:.1f} tok/s without the drafter against {pending.collapsed_tps:.1f}"
                        " collapsed")
            run.halts[halt.scope] = halt
            _finish(run, obs, ladder, pending, "slower without the drafter", figures,
                    mode="no-drafter")
            return
        text = (f"{obs.replica} runs without its drafter since {_iso(pending.started_s)}: the "
                "drafter's first token was rejected after a fresh compile; fix the drafter and "
                f"run `rocmseat remediate reset {obs.replica}`")
        _finish(run, obs, ladder, pending, "serving without the drafter", figures,
                mode="no-drafter", diagnosis=text)
        return
    if pending.action == RESTART_SLOW_SPAWN:
        _verify_respawn(run, obs, ladder, pending, figures)
        return
    # step 3: the restart is judged by the new engine answering
    _finish(run, obs, ladder, pending, "restarted", figures, mode=ladder.mode)


def _step1_verdict(run: _Run, obs: Observation, ladder: Ladder, pending: Pending,
                   figures: dict[str, Any], *, recovered: bool) -> None:
    if recovered:
        _finish(run, obs, ladder, pending, "recovered", figures, mode="drafter",
                diagnosis=DIAGNOSIS_CACHE)
        return
    _finish(run, obs, ladder, pending, "still collapsed after a fresh compile", figures,
            mode="drafter", diagnosis=DIAGNOSIS_NOT_CACHE)
    # straight on to step 2: the drafter is wrong, not the cache
    after = run.ladders[obs.replica]
    why = dict(pending.why) | {"step1": "collapsed again after a fresh compile"}
    _start(run, dataclasses.replace(obs, key=pending.key), after, 2, RESTART_NO_DRAFTER,
           "no-drafter", why, collapsed_tps=_tps(pending) or pending.collapsed_tps,
           continuation=True)


def _verify_respawn(run: _Run, obs: Observation, ladder: Ladder, pending: Pending,
                    figures: dict[str, Any]) -> None:
    """A slow start's restart, judged by the new start's decode rate once the watcher has
    judged it against the seat's history (its first windows at a load the history knows)."""
    if obs.spawn_factor is None:
        _wait(run, obs, ladder, pending, figures)
        return
    figures |= {"verified_by": "decode rate", "spawn_factor": _finite(obs.spawn_factor)}
    if A.REPLICA_SLOW_SPAWN in obs.alerts:
        _finish(run, obs, ladder, pending, "still slow after a restart", figures,
                mode=ladder.mode)
        return
    _finish(run, obs, ladder, pending, "restarted: decodes at the seat's rate", figures,
            mode=ladder.mode)


def _tps(pending: Pending) -> float | None:
    return pending.generation_tokens / pending.generation_s if pending.generation_s > 0 else None


def _wait(run: _Run, obs: Observation, ladder: Ladder, pending: Pending,
          figures: dict[str, Any]) -> None:
    restarted = pending.restarted_s if pending.restarted_s is not None else run.now
    if run.now - restarted > run.settings.verify_timeout_s:
        halt = Halt(replica_scope(obs.replica), "a step could not be verified", run.now,
                    f"not enough traffic within {run.settings.verify_timeout_s:g} s")
        run.halts[halt.scope] = halt
        _finish(run, obs, ladder, pending, "unverified: not enough traffic", figures,
                mode=ladder.mode if pending.step != 2 else "no-drafter")
        return
    run.set(obs.replica, dataclasses.replace(ladder, pending=pending))


def _finish(run: _Run, obs: Observation, ladder: Ladder, pending: Pending, outcome: str,  # noqa: PLR0917
            figures: Mapping[str, Any], *, mode: str, diagnosis: str | None = None) -> None:
    since = ladder.since_s if mode == ladder.mode else run.now
    run.set(obs.replica, dataclasses.replace(ladder, pending=None, mode=mode, since_s=since,
                                             noted=""))
    run.record(obs.replica, pending.step, pending.action, outcome, why=pending.why,
               figures=figures, diagnosis=diagnosis)


def begin_reset(state: State, replica: str | None) -> tuple[State, list[str]]:
    """`rocmseat remediate reset [REPLICA]`, first half: clear the halts (of the replica's
    scope, or all) and the ladders; a replica off its drafter (or out of rotation, or in a
    step) is marked "resetting" (the watcher leaves it alone) until `finish_reset` records the
    outcome of its restart. Returns the new state and the replicas that must restart."""
    ladders = dict(state.ladders)
    names = [replica] if replica is not None else sorted(ladders)
    back = [n for n in names if n in ladders and (
        ladders[n].mode != "drafter" or ladders[n].pending is not None)]
    for name in names:
        if name in ladders:
            ladders[name] = Ladder(mode="resetting") if name in back else Ladder()
    # a node or fleet halt is lifted by `reset` without a replica only
    halts = ({} if replica is None else
             {k: v for k, v in state.halts.items() if k != replica_scope(replica)})
    taken = tuple(t for t in state.taken if replica is not None and t.replica != replica)
    return State(ladders, taken, halts), back


def finish_reset(state: State, replica: str, problem: str | None, now_s: float) -> State:
    """The reset's restart of `replica` is done: back to its drafter (problem None), or still
    "resetting" with the reason (`status` says so; a second reset tries again)."""
    ladders = dict(state.ladders)
    ladders[replica] = (Ladder() if problem is None else
                        Ladder(mode="resetting", since_s=now_s, reset_problem=problem))
    return dataclasses.replace(state, ladders=ladders)


def reset(state: State, replica: str | None) -> tuple[State, list[str]]:
    """Both halves at once (a reset whose restarts all succeeded)."""
    new, back = begin_reset(state, replica)
    for name in back:
        new = finish_reset(new, name, None, 0.0)
    return new, back


# what rocmseat_remediations_total{outcome} may say: a closed set (the text goes to the journal)
OUTCOME_CLASSES = ("started", "recovered", "not-the-cache", "serving-without-drafter",
                   "slower-without-drafter", "restarted", "out-of-rotation", "failed",
                   "unverified", "halted", "refused", "dry-run", "reset", "other")
_OUTCOME_EXACT = {"started": "started", "recovered": "recovered",
                  "still collapsed after a fresh compile": "not-the-cache",
                  "serving without the drafter": "serving-without-drafter",
                  "slower without the drafter": "slower-without-drafter",
                  "restarted": "restarted", "out of rotation": "out-of-rotation",
                  "reset by the operator": "reset"}


def outcome_class(outcome: str) -> str:
    """The label value of a journalled outcome (one of OUTCOME_CLASSES)."""
    if outcome in _OUTCOME_EXACT:
        return _OUTCOME_EXACT[outcome]
    head = outcome.split(":", 1)[0]
    return head if head in ("failed", "unverified", "halted", "refused", "dry-run",
                            "reset") else "other"


def _iso(time_s: float) -> str:
    return A.iso(time_s)[:19] + "Z"


# ----- the state file, as JSON (pure) ---------------------------------------------------------


def state_json(state: State) -> dict[str, Any]:
    return {
        "ladders": {n: _ladder_json(lad) for n, lad in sorted(state.ladders.items())},
        "taken": [dataclasses.asdict(t) for t in state.taken],
        "halts": {k: dataclasses.asdict(h) for k, h in sorted(state.halts.items())},
    }


def _ladder_json(ladder: Ladder) -> dict[str, Any]:
    out = dataclasses.asdict(ladder)
    out["stalls_s"] = list(ladder.stalls_s)
    if ladder.pending is not None:
        out["pending"]["why"] = dict(ladder.pending.why)
    return out


class StateError(ValueError):
    """A state document that is not one this module wrote."""


def state_from_json(doc: Any) -> State:
    """The inverse of state_json, through the strict document model
    (rocmseat.watch.remediate.documents); StateError on anything else."""
    from rocmseat.watch.remediate.documents import state_from_json as parse

    if not isinstance(doc, dict):
        raise StateError("not an object")
    return parse(doc)


# ----- what the alerts say (pure) -------------------------------------------------------------


def alerts_for(state: State, replica: str, node: str) -> dict[str, dict[str, str]]:
    """The remediation alerts that are active for `replica`, with their details."""
    out: dict[str, dict[str, str]] = {}
    ladder = state.ladder(replica)
    halt = halted_for(state, replica, node)
    if halt is not None:
        command = ("rocmseat remediate reset" if halt.scope != replica_scope(replica)
                   else f"rocmseat remediate reset {replica}")
        out[A.REMEDIATION_HALTED] = {"scope": halt.scope, "bound": halt.bound,
                                     "text": halt.text, "since": _iso(halt.since_s),
                                     "hint": f"look, then run `{command}`"}
    if ladder.pending is not None:
        out[A.REMEDIATION_RUNNING] = {"step": str(ladder.pending.step),
                                      "action": ladder.pending.action,
                                      "trigger": str(ladder.pending.why.get("alert", "-"))}
    if ladder.mode == "no-drafter":
        since = _iso(ladder.since_s) if ladder.since_s is not None else "-"
        out[A.REPLICA_NO_DRAFTER] = {
            "since": since,
            "text": f"{replica} runs without its drafter since {since}: the drafter's first "
                    "token was rejected after a fresh compile; fix the drafter and run "
                    f"`rocmseat remediate reset {replica}`"}
    if ladder.mode == "out-of-rotation":
        since = _iso(ladder.since_s) if ladder.since_s is not None else "-"
        out[A.REPLICA_OUT_OF_ROTATION] = {
            "since": since,
            "text": f"{replica} stalled twice within an hour: out of rotation since {since}; "
                    f"fix it and run `rocmseat remediate reset {replica}`"}
    return out
