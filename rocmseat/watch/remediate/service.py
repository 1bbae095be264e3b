"""The remediator inside the running watcher: after each evaluation, observe, decide, act.

`Remediator.after_step(watcher)` is the hook (rocmseat.watch.service calls it after every
evaluation): it turns the watcher's statuses into observations (reading, for a replica the
ladder may act on, its placement record, its last startup report and the node's preflight
verdict), takes the state lock, runs the pure policy, saves the state, journals each step
(file, log line, counters), hands the actions to one worker thread (a restart waits for READY:
never on the evaluation loop), and mirrors the ladder into the watcher: its alerts, and each
replica's mode (a replica without its drafter is not expected to speculate, so /ready follows
what it runs).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, assert_never

from rocmseat.errors import RocmseatError
from rocmseat.placement.record import ReplicaPlacement
from rocmseat.seat.model import Seat
from rocmseat.statedir import StateDir
from rocmseat.watch import alerts as A
from rocmseat.watch.canary import CanaryRound
from rocmseat.watch.remediate import journal
from rocmseat.watch.remediate import policy as P
from rocmseat.watch.remediate.documents import SCHEMA
from rocmseat.watch.remediate.mode import Mode
from rocmseat.watch.status import ReplicaStatus

REMEDIATION_ALERTS = (A.REMEDIATION_RUNNING, A.REMEDIATION_HALTED,
                      *(alert for alert, _ in P.MODE_ALERTS.values()))
# when the watcher stops: the longest it waits for a restart it started, after SIGTERM to the
# restart's process group (rocmseat.runner.CANCEL_GRACE_S, then SIGKILL)
STOP_WAIT_S = 15.0
VERDICT_MAX_AGE_S = 86_400.0  # the node preflight unit runs at boot; its verdict is this boot's


class Edge(Protocol):
    records: dict[str, ReplicaPlacement]

    def move_cache_aside(self, replica: str, reason: Mapping[str, Any]) -> Path | None: ...

    def restart(self, replica: str, mode: str, *, why: str) -> None: ...


class WatcherView(Protocol):
    statuses: list[ReplicaStatus]
    evaluated_at_s: float | None

    @property
    def targets(self) -> list[Any]: ...

    def set_targets(self, targets: list[Any]) -> tuple[int, int, int]: ...

    def set_alert(self, replica: str, alert: str, on: bool,
                  details: Mapping[str, str]) -> None: ...


def settings_of(seat: Seat, mode: str, episode_hold_s: float = 60.0) -> P.Settings:
    r = seat.remediate
    return P.Settings(mode, verify_drafts=r.verify_drafts, verify_s=r.verify_s,
                      ready_timeout_s=r.ready_timeout_s, verify_timeout_s=r.verify_timeout_s,
                      node_per_hour=r.node_per_hour, max_fraction=r.max_fraction,
                      episode_hold_s=episode_hold_s, engine=seat.engine.kind)


def startup_facts(state_dir: Path, seat: str, replica: str) -> tuple[bool | None, str | None]:
    """(its last start read its compile caches, that start's time) from the startup report;
    (None, None) when there is none or it cannot be trusted. Read: a component found its
    artifacts (`cache_load`, or `load_failure`: found, failed to load, compiled again, which is
    how vLLM's CPU build restarts on its cache, docs/demo.md); only fresh compiles mean the
    start began from an empty cache (rocmseat.launch.startupfacts)."""
    from rocmseat.launch.report import STARTUP_REPORT

    try:  # a strict model (rocmseat.launch.report_doc): DocumentInvalid is a RocmseatError
        doc = StateDir(state_dir).read(STARTUP_REPORT, seat=seat, replica=replica)
    except RocmseatError:
        return None, None
    if doc is None:
        return None, None
    if not doc.log.components:
        return None, doc.started_at
    found = {"cache_load", "load_failure"}
    loaded = any(found.intersection(c.outcomes) for c in doc.log.components.values())
    return loaded, doc.started_at


@dataclass(frozen=True, slots=True)
class Setup:
    """The seat a Remediator heals and where: its seat file, state dir, mode ("on" or
    "dry-run"), node name and the replicas rocmseat launched (their placement records);
    `max_age_s`: the watcher's view older than this is stale (nothing starts);
    `episode_hold_s`: an alert episode outlives a gap this long (a refusal is said once)."""

    seat: Seat
    seat_file: Path
    state_dir: Path
    mode: str
    node: str
    records: Mapping[str, ReplicaPlacement]
    max_age_s: float = 60.0
    episode_hold_s: float = 60.0


class Remediator:
    def __init__(self, setup: Setup, edge: Edge, *, log: Callable[[str], None],
                 clock: Callable[[], float] = time.time,
                 node_refusal: Callable[[], str | None] = lambda: None,
                 background: bool = True,
                 reread: Callable[[], Mapping[str, ReplicaPlacement]] | None = None) -> None:
        seat = self.seat = setup.seat
        self.meta = journal.Meta(seat.name, str(setup.seat_file.absolute()), setup.node,
                                 setup.mode)
        self.state_dir = setup.state_dir
        self.settings = settings_of(seat, setup.mode, setup.episode_hold_s)
        self.records = dict(setup.records)
        self._reread = reread  # the records again (a replica launched after the watcher)
        self.edge = edge
        self.log = log
        self.clock = clock
        self.node_refusal = node_refusal
        self.max_age_s = setup.max_age_s
        self.state = P.State()
        self.counts: dict[tuple[str, str, str], int] = {}
        self._last: dict[str, P.StepRecord] = {}
        self._failures: queue.Queue[tuple[str, str]] = queue.Queue()
        self._jobs: queue.Queue[P.Action | None] = queue.Queue()
        # the last line said of each kind of problem (said once per change, not every step)
        self._said: dict[str, str] = {}
        self._alerted_s: dict[str, float] = {}  # replica -> when a trigger was last seen
        self._judge: int | None = None  # the judge's lock (journal.try_judge), once held
        # the drafter canary's last judged round per replica, when the seat has `[canary]` on
        # (rocmseat.watch.canary_service.CanaryService.last_round): step 1's verification
        self.canary_round: Callable[[str], CanaryRound | None] | None = None
        self._busy: P.Action | None = None  # the action the worker runs
        self._background = background
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._work, name="rocmseat-remediate",
                                            daemon=True)
            self._thread.start()

    # ----- the hook -------------------------------------------------------------------------

    def after_step(self, watcher: WatcherView) -> None:
        now = self.clock()
        statuses = list(watcher.statuses)
        self._note_alerts(statuses, now)
        self._note_holds(statuses)
        fresh = watcher.evaluated_at_s is not None and now - watcher.evaluated_at_s <= \
            self.max_age_s
        problem = ("no evaluation yet" if watcher.evaluated_at_s is None else
                   f"the last evaluation is {now - watcher.evaluated_at_s:.0f} s old")
        try:
            judge = self._is_judge()
            with journal.locked(self.state_dir, self.seat.name):
                state, _ = journal.load_state(self.state_dir, self.seat.name)
                if not judge:  # another watcher decides: show its state, count nothing
                    decision = P.Decision(state, (), ())
                else:
                    decision = self._decide(state, statuses, now, fresh, problem)
        except RocmseatError as exc:  # an untrusted or damaged state, a lock timeout
            self._say("state", f"rocmseat-remediate unusable-state acting-on=nothing "
                      f"error={journal.token(exc.message)}")
            return
        except OSError as exc:
            self._say("state", f"rocmseat-remediate state-not-saved "
                      f"error={journal.token(exc.strerror or exc)}")
            return
        self._said.pop("state", None)  # the state is usable again: a new problem is said
        self.state = decision.state
        self._after_records(decision.records)
        for action in decision.actions:
            if self._background:
                self._jobs.put(action)
            else:
                self._execute(action)
        self._mirror(watcher, decision.state)

    def _decide(self, state: P.State, statuses: list[ReplicaStatus], now: float, fresh: bool,
                problem: str) -> P.Decision:
        """Under the state lock: the policy's decision, saved and journalled."""
        while True:
            try:
                replica, error = self._failures.get_nowait()
            except queue.Empty:
                break
            state = P.action_failed(state, replica, error)
        observations = [self._observe(s, state, now) for s in statuses]
        decision = P.decide(state, observations, now, self.settings,
                            node=self.meta.node or "-", view_fresh=fresh, view_problem=problem)
        if decision.state != state or decision.records:
            journal.save_state(self.state_dir, self.meta, decision.state, now)
        for record in decision.records:
            journal.write_record(self.state_dir, self.meta, record)
        if decision.records:
            journal.prune(self.state_dir, self.seat.name, decision.state, now)
        return decision

    def _after_records(self, records: Sequence[P.StepRecord]) -> None:
        for record in records:
            self.log(journal.journal_line(self.meta, record))
            key = (record.replica, record.action, P.outcome_class(record.outcome))
            self.counts[key] = self.counts.get(key, 0) + 1
            self._last[record.replica] = record

    def _say(self, kind: str, line: str) -> None:
        """A problem of `kind`, said once per change (not every evaluation of a full disk)."""
        if self._said.get(kind) != line:
            self.log(line)
            self._said[kind] = line

    def _is_judge(self) -> bool:
        if self._judge is None:
            self._judge = journal.try_judge(self.state_dir, self.seat.name)
            if self._judge is None:
                self._say("judge", f"rocmseat-remediate follower seat={self.seat.name}: "
                          "another watcher holds the judge's lock: it decides and verifies; "
                          "this one acts on nothing")
        if self._judge is not None and self._said.pop("judge", None) is not None:
            self.log(f"rocmseat-remediate judge seat={self.seat.name}: the other watcher is "
                     "gone; this one decides now")
        return self._judge is not None

    def _note_alerts(self, statuses: Sequence[ReplicaStatus], now: float) -> None:
        for status in statuses:
            if _acts_on(status):
                self._alerted_s[status.replica] = now

    def _observe(self, status: ReplicaStatus, state: P.State, now: float) -> P.Observation:
        w, judged = status.window, status.judged
        obs = P.Observation(
            replica=status.replica, up=status.up, restarted=status.restarted,
            alerts=status.alerts, key=status.key,
            drafts=w.drafts if w else 0.0, accepted=w.accepted_tokens if w else 0.0,
            accepted_pos0=w.accepted_per_pos[0] if w and w.accepted_per_pos else 0.0,
            generation_tokens=w.generation_tokens if w else None,
            duration_s=w.duration_s if w else 0.0, lower_al=status.lower_al,
            al=judged.acceptance_length if judged else None,
            p0=(judged.accepted_per_pos[0] / judged.drafts
                if judged and judged.drafts > 0 and judged.accepted_per_pos else None),
            quiet_s=(now - self._alerted_s[status.replica]
                     if status.replica in self._alerted_s else None),
            canary=self.canary_round(status.replica) if self.canary_round else None,
            spawn_factor=status.spawn_factor)
        ladder = state.ladder(status.replica)
        if ladder.pending is not None or not _acts_on(status):
            # the edge is read only where the ladder may start a step; a held GPU still holds
            # the next step of one being verified (policy._start, a continuation)
            return obs if status.blocked_by is None else dataclasses.replace(
                obs, refusal=_held(status))
        refusal = self._refusal(status)
        loaded, started = startup_facts(self.state_dir, self.seat.name, status.replica)
        return dataclasses.replace(obs, refusal=refusal, cache_loaded=loaded, last_start=started)

    def _refusal(self, status: ReplicaStatus) -> str | None:
        """Why the ladder may not act on this replica now (None: it may)."""
        if status.blocked_by is not None:
            return _held(status)
        if status.replica not in self.records and self._reread is not None:
            self.records = dict(self._reread())
            self.edge.records = dict(self.records)
        if status.replica not in self.records:
            return (f"{status.replica} has no placement record (not launched by rocmseat "
                    "with this state dir): never acted on")
        if (node := self.node_refusal()) is not None:
            return f"the node's preflight: {node} (a node problem is not a drafter problem)"
        return None

    def _note_holds(self, statuses: Sequence[ReplicaStatus]) -> None:
        """Say when a replica's hold begins, changes or ends (once each), trigger or not."""
        for status in statuses:
            kind = f"hold:{status.replica}"
            if status.blocked_by is not None:
                self._say(kind, f"rocmseat-remediate replica={status.replica} held "
                          f"why={journal.token(status.blocked_by)}")
            elif self._said.pop(kind, None) is not None:
                self.log(f"rocmseat-remediate replica={status.replica} hold-lifted")

    # ----- the edge -------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            action = self._jobs.get()
            if action is None:
                return
            self._busy = action
            try:
                self._execute(action)
            finally:
                self._busy = None

    def _execute(self, action: P.Action) -> None:
        """Run one action under the seat's action lock (a reset waits for it), unless a reset
        took the replica meanwhile."""
        try:
            with journal.acting(self.state_dir, self.seat.name,
                               timeout_s=self.settings.ready_timeout_s + 60.0):
                if not self._still_wanted(action):
                    self.log(f"rocmseat-remediate replica={action.replica} action-skipped "
                             f"action={action.action} why=reset_by_the_operator")
                    return
                self._act(action)
        except (RocmseatError, OSError) as exc:
            message = exc.message if isinstance(exc, RocmseatError) else \
                f"{exc.strerror or exc}"
            self.log(f"rocmseat-remediate replica={action.replica} action-failed "
                     f"error={journal.token(message)}")
            self._failures.put((action.replica, message))

    def _still_wanted(self, action: P.Action) -> bool:
        with journal.locked(self.state_dir, self.seat.name):
            ladder = journal.load_state(self.state_dir, self.seat.name)[0].ladder(action.replica)
        return (ladder.mode != Mode.RESETTING and ladder.pending is not None
                and ladder.pending.action == action.action)

    def _act(self, action: P.Action) -> None:
        """The step's effects, in the order its entry of the ladder lists them."""
        step = P.STEPS[action.action]
        for effect in step.effects:
            match effect:
                case P.Effect.MOVE_CACHE_ASIDE:
                    aside = self.edge.move_cache_aside(action.replica, {
                        "schema": SCHEMA, "why": action.reason,
                        "moved_by": f"rocmseat watch --remediate (step {step.number})"})
                    self.log(f"rocmseat-remediate replica={action.replica} cache-moved-aside "
                             f"to={journal.token(str(aside))}")
                case P.Effect.RESTART:
                    self.edge.restart(action.replica, action.mode, why=action.reason)
                    self.log(f"rocmseat-remediate replica={action.replica} restarted "
                             f"mode={action.mode}")
                case _:
                    assert_never(effect)

    def _mirror(self, watcher: WatcherView, state: P.State) -> None:
        node = self.meta.node or "-"
        for status in watcher.statuses:
            wanted = P.alerts_for(state, status.replica, node)
            last = self._last.get(status.replica)
            for alert in REMEDIATION_ALERTS:
                details = wanted.get(alert)
                if details is None and alert == A.REMEDIATION_RUNNING and last is not None:
                    details = {"outcome": last.outcome, "diagnosis": last.diagnosis or "-"}
                watcher.set_alert(status.replica, alert, alert in wanted, details or {})
        # a replica without its drafter drafts nothing: spec_blind must not take it out
        targets = watcher.targets
        want = [dataclasses.replace(t, expect_spec=False if _without_drafter(
            state.ladder(t.name)) else None) for t in targets]
        if want != targets:
            watcher.set_targets(want)

    def halted_scopes(self) -> list[tuple[str, bool]]:
        node = P.node_scope(self.meta.node or "-")
        scopes = [P.replica_scope(n) for n in sorted(self.records)] + [node, P.FLEET]
        return [(s, s in self.state.halts) for s in scopes]

    def close(self) -> None:
        """The watcher stops: a restart it started is ended (SIGTERM to its process group,
        SIGKILL after rocmseat.runner.CANCEL_GRACE_S) and waited for, at most STOP_WAIT_S;
        the log says which, and the step stays pending in the state (the next watcher judges
        it, or halts it when no new engine comes)."""
        if self._thread is not None:
            busy = self._busy
            self._jobs.put(None)
            if busy is not None:
                self.log(f"rocmseat-remediate stop replica={busy.replica} action={busy.action} "
                         f"ending=restart wait_s={STOP_WAIT_S:g}")
                cancel = getattr(self.edge, "cancel", None)
                if cancel is not None:
                    cancel.set()
            self._thread.join(timeout=STOP_WAIT_S if busy is not None else 1.0)
            if busy is not None:
                left = self._thread.is_alive()
                self.log(f"rocmseat-remediate stop replica={busy.replica} "
                         f"action={busy.action} "
                         + ("still-running-after_s=" + f"{STOP_WAIT_S:g}" if left else "ended=1"))
        if self._judge is not None:
            import os

            os.close(self._judge)
            self._judge = None


def _held(status: ReplicaStatus) -> str:
    """The refusal while a fatal kernel event is held on one of the replica's GPUs or on the
    node (the watcher's blocking_alert, rocmseat/watch/kernel.py): checked before anything."""
    return (f"{status.replica} is held: {status.blocked_by} (kernel log): a node problem, "
            "drain it; a restart would not help")


def _without_drafter(ladder: P.Ladder) -> bool:
    """The replica runs (or is being verified) without its drafter."""
    return ladder.mode == Mode.NO_DRAFTER or (
        ladder.pending is not None and P.STEPS[ladder.pending.action].mode == Mode.NO_DRAFTER)


def plan_reset(state_dir: Path, seat: str, replica: str | None) -> list[str]:
    """The replicas a reset would restart (read only: nothing changes); RocmseatError for a
    replica with no remediation state."""
    journal.check_shapes(state_dir, seat)
    state, _ = journal.load_state(state_dir, seat)
    if replica is not None and replica not in state.ladders and not any(
            h.scope == P.replica_scope(replica) for h in state.halts.values()):
        from rocmseat.text import printable

        raise RocmseatError(f"replica {printable(replica, 80)!r}: no remediation state in "
                            f"seat {seat}",
                            hint="`rocmseat remediate status` lists what there is")
    return P.begin_reset(state, replica)[1]


def begin_reset(state_dir: Path, seat: str, replica: str | None, now_s: float
                ) -> tuple[P.State, list[str], journal.Meta]:
    """Clear halts and ladders under the lock (policy.begin_reset): the replicas to restart
    are RESETTING (the watcher leaves them alone) until finish_reset; journalled."""
    with journal.locked(state_dir, seat):
        plan_reset(state_dir, seat, replica)
        state, meta = journal.load_state(state_dir, seat)
        new, back = P.begin_reset(state, replica)
        journal.save_state(state_dir, meta, new, now_s)
        record = P.StepRecord(replica or "*", None, P.RESET_ACTION, P.RESET_BY_OPERATOR.text,
                              now_s, figures={"restart_with_drafter": ",".join(back) or "-"})
        journal.write_record(state_dir, meta, record)
    return new, back, meta


def finish_reset(state_dir: Path, meta: journal.Meta, replica: str, problem: str | None,
                 now_s: float) -> None:
    """The reset's restart of `replica` is done (problem None) or failed: recorded."""
    with journal.locked(state_dir, meta.seat):
        state, _ = journal.load_state(state_dir, meta.seat)
        journal.save_state(state_dir, meta, P.finish_reset(state, replica, problem, now_s),
                           now_s)
        outcome = ("reset: back with its drafter" if problem is None else
                   f"failed: the reset's restart: {problem}")
        journal.write_record(state_dir, meta, P.StepRecord(replica, None, P.RESET_ACTION,
                                                           outcome, now_s))


def reset(state_dir: Path, seat: str, replica: str | None, now_s: float
          ) -> tuple[P.State, list[str], journal.Meta]:
    """Both halves with no restart in between (the library's reset; the CLI restarts)."""
    _, back, meta = begin_reset(state_dir, seat, replica, now_s)
    for name in back:
        finish_reset(state_dir, meta, name, None, now_s)
    return journal.load_state(state_dir, seat)[0], back, meta


def status_json(state: P.State, meta: journal.Meta, records: Sequence[Mapping[str, Any]]
                ) -> dict[str, Any]:
    return {"schema": "rocmseat.remediation-status/v1", "seat": meta.seat, "node": meta.node,
            "mode": meta.mode, "seat_file": meta.seat_file, **P.state_json(state),
            "journal": list(records)}


def _acts_on(status: ReplicaStatus) -> bool:
    """An alert the ladder acts on (a stall, a slow start, a drafter collapse) is active."""
    return any(a in status.alerts for a in P.ACTS_ON)
