"""The remediation ladder and its bounds, as pure functions (docs/remediate.md).

`decide(state, observations, now_s, ...)` takes the ladder's state (what each replica is doing,
the actions taken, the halts), what the watcher saw of each replica in its last evaluation,
and the clock; it returns the new state, the actions to run at the edge, and the step records
to journal. Nothing here reads a file, runs a command or looks at a clock.

The ladder is data: `LADDER`, a table of `Step`s at the end of this module (its triggers,
condition, mode, the edge's effects, verification, outcomes, bounds and engines), in the order
the policy considers them; docs/remediate.md's table is checked against it. Adding a step is
one entry (and its verification function; a new kind of edge action is an `Effect` and its
case in rocmseat.watch.remediate.service.Remediator._act).

Bounds: one ladder per replica and config key per day, `node_per_hour` actions per node and
hour, at most `max_fraction` of the watched replicas (at least one) in remediation at once. A
bound that trips halts its scope until `rocmseat remediate reset`. Never while the watcher's
view is stale or blind, never on a node whose preflight fails.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, assert_never

from rocmseat.watch import alerts as A
from rocmseat.watch.canary import CanaryRound
from rocmseat.watch.remediate.mode import Mode

DAY_S = 86_400.0
HOUR_S = 3_600.0
# The watcher cannot see the replica well enough to act on what it says.
BLINDING = (A.REPLICA_DOWN, A.SPEC_BLIND, A.METRICS_UNSTABLE)
# Position-0 acceptance at or above this over the verification drafts: the drafter works again
# (the detector's own resolve threshold, rocmseat.watch.detector.DetectorParams.dead_resolve_p0).
RECOVERED_P0 = 0.20
# The engines a step may apply to (Step.engines; Settings.engine is the seat's).
EngineKind = Literal["vllm", "sglang", "llamacpp"]
ENGINES: tuple[EngineKind, ...] = ("vllm", "sglang", "llamacpp")

# actions: each step's (its entry in LADDER), and the journal's two that are no step
MOVE_CACHE_RESTART = "move-cache-aside-restart"
RESTART_NO_DRAFTER = "restart-without-drafter"
RESTART = "restart"
RESTART_SLOW_SPAWN = "restart-slow-spawn"
OUT_OF_ROTATION = "out-of-rotation"
RESET_ACTION = "reset"  # `rocmseat remediate reset`
NO_ACTION = "none"  # a refusal

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
    engine: EngineKind = "vllm"  # the seat's engine: the steps that list it apply

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

    step: int  # its Step.number
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

    mode: Mode = Mode.DRAFTER
    since_s: float | None = None  # when it entered that mode
    pending: Pending | None = None
    cache_tried_key: str | None = None  # step 1 ran for this key: a collapse again is step 2
    stalls_s: tuple[float, ...] = ()  # stall restarts
    noted: str = ""  # the last refusal or dry-run journalled (said once per alert episode)
    ladder_started_s: float | None = None  # the first step of the current ladder (journal kept)
    reset_problem: str | None = None  # Mode.RESETTING: why the reset's restart did not finish


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
    mode: Mode  # the mode the replica restarts in: DRAFTER or NO_DRAFTER
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


# ----- what a step is -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    text: str  # the journal's `outcome`
    label: str  # its class: rocmseat_remediations_total{outcome} (a closed set)


class Effect(enum.StrEnum):
    """What the edge does for a step, in the order the step lists them."""

    MOVE_CACHE_ASIDE = "move its compile caches aside"
    RESTART = "restart it"


class Bound(enum.StrEnum):
    """A bound one more start of a step must pass (else its scope halts)."""

    PER_KEY_DAY = "one per replica and config key and day"
    NODE_HOUR = "`node_per_hour` per node and hour"
    FLEET_SHARE = "`max_fraction` of the watched replicas at once"


# when a step applies, beyond its trigger and its mode: None, or why not
Condition = Callable[[Observation, Ladder, float], "str | None"]
# how the new engine is judged, once the watcher has seen it: waits, or finishes the step
Verifier = Callable[["_Run", Observation, Ladder, Pending, "Step", dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class Step:
    """One entry of the ladder (LADDER)."""

    number: int  # the journal's `step`
    action: str  # the journal's and the state's `action`: one per step
    triggers: tuple[str, ...]  # the alerts that start it (the first active one is why.alert)
    starts_from: tuple[Mode, ...]  # the modes it starts from
    condition: str  # when it applies beyond that, in words (the docs' table)
    applies: Condition | None  # None: always
    mode: Mode | None  # the replica's mode once it runs (None: the mode it is in)
    effects: tuple[Effect, ...]  # the edge's work, in order; none: the mode changes at once
    verification: str  # in words (the docs' table)
    verify: Verifier | None  # None: nothing to verify (no effects)
    outcomes: tuple[Outcome, ...]  # what its verification journals
    bounds: tuple[Bound, ...]
    engines: frozenset[EngineKind]  # the engines it applies to
    then: str | None = None  # the step started at once when its verification fails
    instead_of: str | None = None  # runs when that step does not apply (its why-not journalled)
    would: str = "would {action}"  # what a dry run journals
    says: Callable[[Observation, Ladder, float], str] | None = None  # journalled as why.text


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

    def __init__(self, state: State, now_s: float, settings: Settings, node: str,  # noqa: PLR0917
                 watched: int, steps: Sequence[Step]) -> None:
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
        self.steps = {s.action: s for s in steps}

    def state(self) -> State:
        return State(self.ladders, tuple(self.taken), self.halts)

    def record(self, replica: str, step: int | None, action: str, outcome: str, **kw: Any) -> None:
        self.records.append(StepRecord(replica, step, action, outcome, self.now,
                                       dry_run=self.settings.dry_run, **kw))

    def halt(self, replica: str, bound: str, text: str) -> None:
        """Halt the replica's scope (a step that failed or could not be verified)."""
        self.halts[replica_scope(replica)] = Halt(replica_scope(replica), bound, self.now, text)

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
           view_problem: str = "", steps: Sequence[Step] | None = None) -> Decision:
    """The next state, the actions to run and the records to journal (see the module text).
    `view_fresh`: the watcher's own last evaluation is recent; when it is not, nothing starts
    (steps already running are still verified). `steps`: the ladder (default LADDER)."""
    run = _Run(state, now_s, settings, node, len(observations),
               LADDER if steps is None else steps)
    for obs in observations:
        ladder = run.ladders.get(obs.replica, Ladder())
        if ladder.mode == Mode.RESETTING:
            continue  # `rocmseat remediate reset` owns it until its restart is done
        if ladder.pending is not None:
            _verify(run, obs, ladder, ladder.pending)
            continue
        _consider(run, obs, ladder, view_fresh, view_problem)
    return Decision(run.state(), tuple(run.actions), tuple(run.records))


def _why(obs: Observation, alert: str) -> dict[str, Any]:
    if alert == A.REPLICA_SLOW_SPAWN:
        return {"alert": alert, "spawn_factor": _finite(obs.spawn_factor), "key": obs.key}
    return {"alert": alert, "acceptance_length": _finite(obs.al), "p0": _finite(obs.p0),
            "key": obs.key, "last_start": obs.last_start}


def _choose(run: _Run, obs: Observation, ladder: Ladder
            ) -> tuple[Step | None, str | None, dict[str, str]]:
    """The first step (in the ladder's order) whose trigger is active, that starts from the
    replica's mode and applies to it; the alert that triggered it (or the first step passed
    over); and why each step passed over (by its action) did not apply."""
    passed: dict[str, str] = {}
    first: str | None = None
    for step in run.steps.values():
        alert = next((a for a in step.triggers if a in obs.alerts), None)
        if alert is None or ladder.mode not in step.starts_from:
            continue
        first = first or alert
        why_not = (f"not applicable to {run.settings.engine}"
                   if run.settings.engine not in step.engines else
                   step.applies(obs, ladder, run.now) if step.applies is not None else None)
        if why_not is None:
            return step, alert, passed
        passed[step.action] = why_not
    return None, first, passed


def _consider(run: _Run, obs: Observation, ladder: Ladder, view_fresh: bool,
              view_problem: str) -> None:
    step, alert, passed = _choose(run, obs, ladder)
    if alert is None:
        episode_over = obs.quiet_s is None or obs.quiet_s >= run.settings.episode_hold_s
        seen = any(a in obs.alerts for a in ACTS_ON)
        if ladder.noted and (seen or episode_over):
            run.set(obs.replica, dataclasses.replace(ladder, noted=""))
        return
    why = _why(obs, alert)
    blind = next((a for a in BLINDING if a in obs.alerts), None)
    refusal = (
        f"refused: the watcher's view is stale ({view_problem})" if not view_fresh
        else f"refused: the watcher is blind to {obs.replica} ({blind})" if blind
        else f"refused: {obs.refusal}" if obs.refusal
        else None)
    if refusal is None and (halt := halted_for(run.state(), obs.replica, run.node)) is not None:
        refusal = f"refused: remediation is halted for {halt.scope} ({halt.bound})"
    if step is None or refusal is not None:
        refusal = refusal or f"refused: no step of the ladder applies to {run.settings.engine}"
        run.note_once(obs, ladder, refusal, None, NO_ACTION, why)
        return
    if step.instead_of in passed:
        why[f"step{run.steps[step.instead_of].number}"] = passed[step.instead_of]
    _start(run, obs, ladder, step, why)


def _bound(run: _Run, obs: Observation, step: Step, ladder_start: bool) -> Halt | None:
    """The first of the step's bounds that one more start on `obs.replica` would break."""
    return next((h for b in step.bounds if (h := _broken(run, obs, b, ladder_start))), None)


def _broken(run: _Run, obs: Observation, bound: Bound, ladder_start: bool) -> Halt | None:
    match bound:
        case Bound.PER_KEY_DAY:
            if ladder_start and any(t.ladder_start and t.replica == obs.replica
                                    and t.key == obs.key for t in run.taken):
                return Halt(replica_scope(obs.replica), "one remediation per replica and config "
                            "key per day", run.now, f"{obs.replica} was already remediated "
                            f"under config key {obs.key[:12]} in the last 24 h")
        case Bound.NODE_HOUR:
            node_actions = [t for t in run.taken if run.now - t.time_s < HOUR_S]
            if len(node_actions) >= run.settings.node_per_hour:
                return Halt(node_scope(run.node), f"{run.settings.node_per_hour} remediations "
                            "per node per hour", run.now, f"{len(node_actions)} remediations on "
                            f"{run.node} in the last hour")
        case Bound.FLEET_SHARE:
            busy = [n for n, lad in run.ladders.items() if lad.pending is not None]
            allowed = max(1, math.floor(run.settings.max_fraction * run.watched))
            if len(busy) >= allowed:
                return Halt(FLEET, f"at most {run.settings.max_fraction:g} of the watched "
                            "replicas in remediation at once", run.now, f"{len(busy)} of "
                            f"{run.watched} watched replicas already in remediation "
                            f"({', '.join(sorted(busy))}); limit {allowed}")
        case _:
            assert_never(bound)
    return None


def _start(run: _Run, obs: Observation, ladder: Ladder, step: Step,
           why: dict[str, Any], *, collapsed_tps: float | None = None,
           continuation: bool = False) -> None:
    """Start a step (bounds permitting). `continuation`: a step started by the verdict of the
    one before (its `then`, with the rate it measured), the same ladder; every other start is
    a new remediation for the per-day bound."""
    if continuation and obs.refusal is not None:  # e.g. a GPU held by the kernel log meanwhile
        run.note_once(obs, ladder, f"refused: {obs.refusal}", step.number, NO_ACTION, why)
        return
    if step.says is not None:
        why["text"] = step.says(obs, ladder, run.now)
    would = "dry-run: " + step.would.format(action=step.action, replica=obs.replica)
    if not step.effects:  # a change of mode, nothing for the edge to do: its own outcome
        if run.settings.dry_run:
            run.note_once(obs, ladder, would, step.number, step.action, why)
            return
        run.record(obs.replica, step.number, step.action, step.outcomes[0].text, why=why)
        run.set(obs.replica, dataclasses.replace(ladder, mode=step.mode or ladder.mode,
                                                 since_s=run.now, noted=""))
        return
    ladder_start = not continuation
    halt = _bound(run, obs, step, ladder_start)
    if halt is not None:
        if run.settings.dry_run:
            run.note_once(obs, ladder, f"dry-run: would halt: {halt.bound}", step.number,
                          step.action, why)
            return
        run.halts[halt.scope] = halt
        run.record(obs.replica, step.number, step.action, f"halted: {halt.bound}: {halt.text}",
                   why=why)
        return
    if run.settings.dry_run:
        run.note_once(obs, ladder, would, step.number, step.action, why)
        return
    run.taken.append(Taken(run.now, obs.replica, obs.key, step.action, ladder_start))
    # a drafter collapse's rate is kept: the replica without its drafter must beat it
    if not continuation and set(step.triggers) & set(DRAFTER_TRIGGERS):
        collapsed_tps = obs.generation_tokens_per_s
    pending = Pending(step.number, step.action, run.now, obs.key, why,
                      collapsed_tps=collapsed_tps)
    stalls = ((*ladder.stalls_s, run.now) if A.REPLICA_STALLED in step.triggers
              else ladder.stalls_s)
    tried = obs.key if Effect.MOVE_CACHE_ASIDE in step.effects else ladder.cache_tried_key
    begun = run.now if ladder_start else ladder.ladder_started_s
    run.set(obs.replica, dataclasses.replace(ladder, pending=pending, stalls_s=stalls,
                                             cache_tried_key=tried, noted="",
                                             ladder_started_s=begun))
    mode = step.mode or (Mode.NO_DRAFTER if ladder.mode == Mode.NO_DRAFTER else Mode.DRAFTER)
    run.actions.append(Action(obs.replica, step.action, mode, _reason(obs, why)))
    run.record(obs.replica, step.number, step.action, STARTED.text, why=why)


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
    """The generic part (the action failed, the new engine not seen, the windows counted),
    then the step's own verification."""
    s = run.settings
    figures: dict[str, Any] = {}
    if pending.failed is not None:
        run.halt(obs.replica, "an action failed", pending.failed)
        _finish(run, obs, ladder, pending, f"failed: {pending.failed}", figures, mode=ladder.mode)
        return
    if not pending.seen_restart:
        if obs.restarted:
            run.set(obs.replica, dataclasses.replace(ladder, pending=dataclasses.replace(
                pending, seen_restart=True, restarted_s=run.now)))
        elif run.now - pending.started_s > s.ready_timeout_s:
            run.halt(obs.replica, "a restart was not seen",
                     f"no new engine within {s.ready_timeout_s:g} s")
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
    step = run.steps[pending.action]
    # a step without effects is never pending (documents.PendingDoc refuses one)
    (step.verify or _verify_answering)(run, obs, ladder, pending, step, figures)


def _verify_cache(run: _Run, obs: Observation, ladder: Ladder, pending: Pending,  # noqa: PLR0917
                  step: Step, figures: dict[str, Any]) -> None:
    """Step 1: the canary's first round on the new engine (it runs one as soon as the restart
    is seen: its fixed prompts against their baseline for this key, no traffic needed); else
    acceptance over `verify_drafts` drafts of traffic."""
    if obs.canary is not None:
        figures |= {"verified_by": "canary", "canary_rates": obs.canary.rates,
                    "canary_baselines": obs.canary.baselines}
        recovered = not obs.canary.failed
    elif pending.drafts < run.settings.verify_drafts:
        _wait(run, obs, ladder, pending, step, figures)
        return
    else:
        al = 1.0 + pending.accepted / pending.drafts
        p0 = pending.accepted_pos0 / pending.drafts
        figures |= {"verified_by": "traffic", "acceptance_length": _finite(al),
                    "p0": _finite(p0), "lower_al": _finite(obs.lower_al)}
        recovered = p0 >= RECOVERED_P0 and (obs.lower_al is None or al >= obs.lower_al)
    if recovered:
        _finish(run, obs, ladder, pending, RECOVERED.text, figures, mode=step.mode,
                diagnosis=DIAGNOSIS_CACHE)
        return
    _finish(run, obs, ladder, pending, NOT_THE_CACHE.text, figures, mode=step.mode,
            diagnosis=DIAGNOSIS_NOT_CACHE)
    if step.then is None:
        return
    # straight on: the drafter is wrong, not the cache
    after = run.ladders[obs.replica]
    why = dict(pending.why) | {f"step{step.number}": "collapsed again after a fresh compile"}
    _start(run, dataclasses.replace(obs, key=pending.key), after, run.steps[step.then], why,
           collapsed_tps=_tps(pending) or pending.collapsed_tps, continuation=True)


def _verify_without_drafter(run: _Run, obs: Observation, ladder: Ladder,  # noqa: PLR0917
                            pending: Pending, step: Step, figures: dict[str, Any]) -> None:
    """Step 2: `verify_s` seconds of generation, at least as fast as it was collapsed."""
    if pending.generation_s < run.settings.verify_s:
        _wait(run, obs, ladder, pending, step, figures)
        return
    tps = pending.generation_tokens / pending.generation_s
    figures |= {"tokens_per_s": _finite(tps, 2),
                "collapsed_tokens_per_s": _finite(pending.collapsed_tps, 2)}
    if pending.collapsed_tps is not None and tps < pending.collapsed_tps:
        run.halt(obs.replica, "slower without the drafter", f"{tps:.1f} tok/s without the "
                 f"drafter against {pending.collapsed_tps:.1f} collapsed")
        _finish(run, obs, ladder, pending, SLOWER_WITHOUT.text, figures, mode=step.mode)
        return
    text = NO_DRAFTER_TEXT.format(replica=obs.replica, since=_iso(pending.started_s))
    _finish(run, obs, ladder, pending, SERVING_WITHOUT.text, figures, mode=step.mode,
            diagnosis=text)


def _verify_answering(run: _Run, obs: Observation, ladder: Ladder, pending: Pending,  # noqa: PLR0917
                      step: Step, figures: dict[str, Any]) -> None:
    """A restart: judged by the new engine answering."""
    _finish(run, obs, ladder, pending, RESTARTED.text, figures, mode=step.mode)


def _verify_respawn(run: _Run, obs: Observation, ladder: Ladder, pending: Pending,  # noqa: PLR0917
                    step: Step, figures: dict[str, Any]) -> None:
    """A slow start's restart, judged by the new start's decode rate once the watcher has
    judged it against the seat's history (its first windows at a load the history knows)."""
    if obs.spawn_factor is None:
        _wait(run, obs, ladder, pending, step, figures)
        return
    figures |= {"verified_by": "decode rate", "spawn_factor": _finite(obs.spawn_factor)}
    slow = A.REPLICA_SLOW_SPAWN in obs.alerts
    _finish(run, obs, ladder, pending, (STILL_SLOW if slow else RESPAWNED).text, figures,
            mode=step.mode)


def _tps(pending: Pending) -> float | None:
    return pending.generation_tokens / pending.generation_s if pending.generation_s > 0 else None


def _wait(run: _Run, obs: Observation, ladder: Ladder, pending: Pending, step: Step,  # noqa: PLR0917
          figures: dict[str, Any]) -> None:
    restarted = pending.restarted_s if pending.restarted_s is not None else run.now
    if run.now - restarted > run.settings.verify_timeout_s:
        run.halt(obs.replica, "a step could not be verified",
                 f"not enough traffic within {run.settings.verify_timeout_s:g} s")
        _finish(run, obs, ladder, pending, "unverified: not enough traffic", figures,
                mode=step.mode)
        return
    run.set(obs.replica, dataclasses.replace(ladder, pending=pending))


def _finish(run: _Run, obs: Observation, ladder: Ladder, pending: Pending, outcome: str,  # noqa: PLR0917
            figures: Mapping[str, Any], *, mode: Mode | None,
            diagnosis: str | None = None) -> None:
    """The step is over; the replica is in `mode` (None: the mode it was in)."""
    mode = mode or ladder.mode
    since = ladder.since_s if mode == ladder.mode else run.now
    run.set(obs.replica, dataclasses.replace(ladder, pending=None, mode=mode, since_s=since,
                                             noted=""))
    run.record(obs.replica, pending.step, pending.action, outcome, why=pending.why,
               figures=figures, diagnosis=diagnosis)


def _cache_untried(obs: Observation, ladder: Ladder, now_s: float) -> str | None:
    if obs.cache_loaded is not True:
        return "not applicable: the last start did not load its compile caches"
    if ladder.cache_tried_key == obs.key:
        return "done for this key: collapsed again after a fresh compile"
    return None


def _recent_stall(ladder: Ladder, now_s: float) -> float | None:
    return next((t for t in reversed(ladder.stalls_s) if now_s - t < HOUR_S), None)


def _stalled_again(obs: Observation, ladder: Ladder, now_s: float) -> str | None:
    return None if _recent_stall(ladder, now_s) is not None else "no stall restart in the hour"


def _out_of_rotation_text(obs: Observation, ladder: Ladder, now_s: float) -> str:
    last = _recent_stall(ladder, now_s)
    return (f"{obs.replica} stalled again within an hour of its restart at "
            f"{_iso(last or now_s)}: out of rotation; fix it and run `rocmseat remediate reset "
            f"{obs.replica}`")


def _iso(time_s: float) -> str:
    return A.iso(time_s)[:19] + "Z"


# ----- the ladder -----------------------------------------------------------------------------

STARTED = Outcome("started", "started")
RESET_BY_OPERATOR = Outcome("reset by the operator", "reset")
RECOVERED = Outcome("recovered", "recovered")
NOT_THE_CACHE = Outcome("still collapsed after a fresh compile", "not-the-cache")
SERVING_WITHOUT = Outcome("serving without the drafter", "serving-without-drafter")
SLOWER_WITHOUT = Outcome("slower without the drafter", "slower-without-drafter")
RESTARTED = Outcome("restarted", "restarted")
TAKEN_OUT = Outcome("out of rotation", "out-of-rotation")
RESPAWNED = Outcome("restarted: decodes at the seat's rate", "restarted")
STILL_SLOW = Outcome("still slow after a restart", "still-slow")
# an outcome of any step whose text begins `<class>:` (a failure, a halt, a refusal, ...)
OUTCOME_HEADS = ("failed", "unverified", "halted", "refused", "dry-run", "reset")

# a drafter collapse: the detector's (held), or the canary's on its fixed prompts
DRAFTER_TRIGGERS = (A.SPEC_DRAFTER_DEAD, A.SPEC_ACCEPTANCE_DROP, A.DRAFTER_CANARY_FAILED)
_BOUNDS = (Bound.PER_KEY_DAY, Bound.NODE_HOUR, Bound.FLEET_SHARE)
_SERVING = (Mode.DRAFTER, Mode.NO_DRAFTER)
# The engines each step applies to (docs/engines.md): a restart, a start without the drafter
# (launch --no-drafter drops the [drafter] table, whatever the engine's flags) and taking a
# replica out of rotation are the engine's unit's and the watcher's, so every engine; moving
# the compile cache aside needs a compile cache: vLLM's and SGLang's (torch.compile, Triton),
# never llama.cpp's, which has none (rocmseat.engines.llamacpp: no cache variables).
_ALL: frozenset[EngineKind] = frozenset(ENGINES)
_COMPILED: frozenset[EngineKind] = frozenset({"vllm", "sglang"})

LADDER: tuple[Step, ...] = (
    Step(number=3, action=OUT_OF_ROTATION, triggers=(A.REPLICA_STALLED,), starts_from=_SERVING,
         condition="stalled again within an hour of its stall restart",
         applies=_stalled_again, mode=Mode.OUT_OF_ROTATION, effects=(),
         verification="none: out of rotation until `rocmseat remediate reset`", verify=None,
         outcomes=(TAKEN_OUT,), bounds=(), engines=_ALL,
         would="would take {replica} out of rotation", says=_out_of_rotation_text),
    Step(number=3, action=RESTART, triggers=(A.REPLICA_STALLED,), starts_from=_SERVING,
         condition="always", applies=None, mode=None, effects=(Effect.RESTART,),
         verification="the new engine answers", verify=_verify_answering,
         outcomes=(RESTARTED,), bounds=_BOUNDS, engines=_ALL),
    Step(number=1, action=MOVE_CACHE_RESTART, triggers=DRAFTER_TRIGGERS,
         starts_from=(Mode.DRAFTER,), condition="its last start loaded its compile caches, "
         "and step 1 did not run for this config key yet", applies=_cache_untried,
         mode=Mode.DRAFTER, effects=(Effect.MOVE_CACHE_ASIDE, Effect.RESTART),
         verification="the canary's first round on the new engine; without the canary, "
         "`verify_drafts` drafts of traffic: position-0 acceptance at least 0.20 and the "
         "acceptance length at least the detector's lower edge", verify=_verify_cache,
         outcomes=(RECOVERED, NOT_THE_CACHE), bounds=_BOUNDS, engines=_COMPILED,
         then=RESTART_NO_DRAFTER),
    Step(number=2, action=RESTART_NO_DRAFTER, triggers=DRAFTER_TRIGGERS,
         starts_from=(Mode.DRAFTER,), condition="step 1 does not apply (or did not help)",
         applies=None, mode=Mode.NO_DRAFTER, effects=(Effect.RESTART,),
         verification="`verify_s` seconds of generation, at least as fast as collapsed",
         verify=_verify_without_drafter, outcomes=(SERVING_WITHOUT, SLOWER_WITHOUT),
         bounds=_BOUNDS, engines=_ALL, instead_of=MOVE_CACHE_RESTART),
    Step(number=3, action=RESTART_SLOW_SPAWN, triggers=(A.REPLICA_SLOW_SPAWN,),
         starts_from=_SERVING, condition="always", applies=None, mode=None,
         effects=(Effect.RESTART,), verification="the new start's decode rate against the "
         "seat's history at the same load", verify=_verify_respawn,
         outcomes=(RESPAWNED, STILL_SLOW), bounds=_BOUNDS, engines=_ALL),
)
STEPS: Mapping[str, Step] = {s.action: s for s in LADDER}
# Every alert the ladder may act on: a stall, a drafter collapse, a slow start.
ACTS_ON = tuple(dict.fromkeys(a for s in LADDER for a in s.triggers))


def steps_for(engine: str) -> tuple[tuple[Step, ...], tuple[Step, ...]]:
    """(the steps that apply to `engine`, the ones that do not), in the ladder's order."""
    return (tuple(s for s in LADDER if engine in s.engines),
            tuple(s for s in LADDER if engine not in s.engines))
_BY_TEXT = {o.text: o.label for o in (STARTED, RESET_BY_OPERATOR,
                                      *(o for s in LADDER for o in s.outcomes))}
# what rocmseat_remediations_total{outcome} may say: a closed set (the text goes to the journal)
OUTCOME_CLASSES = tuple(dict.fromkeys(
    [c for c in _BY_TEXT.values() if c != "other"] + [*OUTCOME_HEADS, "other"]))


def outcome_class(outcome: str) -> str:
    """The label value of a journalled outcome (one of OUTCOME_CLASSES)."""
    if outcome in _BY_TEXT:
        return _BY_TEXT[outcome]
    head = outcome.split(":", 1)[0]
    return head if head in OUTCOME_HEADS else "other"


# ----- the operator's reset (pure) ------------------------------------------------------------


def begin_reset(state: State, replica: str | None) -> tuple[State, list[str]]:
    """`rocmseat remediate reset [REPLICA]`, first half: clear the halts (of the replica's
    scope, or all) and the ladders; a replica off its drafter (or out of rotation, or in a
    step) is marked RESETTING (the watcher leaves it alone) until `finish_reset` records the
    outcome of its restart. Returns the new state and the replicas that must restart."""
    ladders = dict(state.ladders)
    names = [replica] if replica is not None else sorted(ladders)
    back = [n for n in names if n in ladders and (
        ladders[n].mode != Mode.DRAFTER or ladders[n].pending is not None)]
    for name in names:
        if name in ladders:
            ladders[name] = Ladder(mode=Mode.RESETTING) if name in back else Ladder()
    # a node or fleet halt is lifted by `reset` without a replica only
    halts = ({} if replica is None else
             {k: v for k, v in state.halts.items() if k != replica_scope(replica)})
    taken = tuple(t for t in state.taken if replica is not None and t.replica != replica)
    return State(ladders, taken, halts), back


def finish_reset(state: State, replica: str, problem: str | None, now_s: float) -> State:
    """The reset's restart of `replica` is done: back to its drafter (problem None), or still
    RESETTING with the reason (`status` says so; a second reset tries again)."""
    ladders = dict(state.ladders)
    ladders[replica] = (Ladder() if problem is None else
                        Ladder(mode=Mode.RESETTING, since_s=now_s, reset_problem=problem))
    return dataclasses.replace(state, ladders=ladders)


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
    """A state document that is not one this module wrote (rocmseat.watch.remediate.documents
    raises its DocumentError)."""


# ----- what the alerts say (pure) -------------------------------------------------------------

NO_DRAFTER_TEXT = ("{replica} runs without its drafter since {since}: the drafter's first token "
                   "was rejected after a fresh compile; fix the drafter and run `rocmseat "
                   "remediate reset {replica}`")
# the alert of a replica in a mode off the normal one, and what it says
MODE_ALERTS: Mapping[Mode, tuple[str, str]] = {
    Mode.NO_DRAFTER: (A.REPLICA_NO_DRAFTER, NO_DRAFTER_TEXT),
    Mode.OUT_OF_ROTATION: (A.REPLICA_OUT_OF_ROTATION, "{replica} stalled twice within an hour: "
                           "out of rotation since {since}; fix it and run `rocmseat remediate "
                           "reset {replica}`"),
}


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
    if (shown := MODE_ALERTS.get(ladder.mode)) is not None:
        since = _iso(ladder.since_s) if ladder.since_s is not None else "-"
        out[shown[0]] = {"since": since, "text": shown[1].format(replica=replica, since=since)}
    return out
