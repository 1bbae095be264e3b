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
import json
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rocmseat.errors import RocmseatError
from rocmseat.placement.record import ReplicaPlacement
from rocmseat.seat.model import Seat
from rocmseat.statedir import StateDir
from rocmseat.watch import alerts as A
from rocmseat.watch.remediate import journal
from rocmseat.watch.remediate import policy as P
from rocmseat.watch.status import ReplicaStatus

REMEDIATION_ALERTS = (A.REMEDIATION_RUNNING, A.REMEDIATION_HALTED, A.REPLICA_NO_DRAFTER,
                      A.REPLICA_OUT_OF_ROTATION)
STARTUP_LIMIT_BYTES = 4 << 20
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


def settings_of(seat: Seat, mode: str) -> P.Settings:
    r = seat.remediate
    return P.Settings(mode, verify_drafts=r.verify_drafts, verify_s=r.verify_s,
                      ready_timeout_s=r.ready_timeout_s, verify_timeout_s=r.verify_timeout_s,
                      node_per_hour=r.node_per_hour, max_fraction=r.max_fraction)


def startup_facts(state_dir: Path, seat: str, replica: str) -> tuple[bool | None, str | None]:
    """(its last start read its compile caches, that start's time) from the startup report;
    (None, None) when there is none or it cannot be trusted. Read: a component found its
    artifacts (`cache_load`, or `load_failure`: found, failed to load, compiled again, which is
    how vLLM's CPU build restarts on its cache, docs/demo.md); only fresh compiles mean the
    start began from an empty cache (rocmseat.launch.startupfacts)."""
    from rocmseat.safeio import read_trusted_state

    path = StateDir(state_dir).replica(seat, replica).startup
    try:
        text = read_trusted_state(path, trusted_root=state_dir, limit_bytes=STARTUP_LIMIT_BYTES)
        doc = json.loads(text) if text is not None else None
        components = doc["log"]["components"] if isinstance(doc, dict) else None
        started = doc.get("started_at") if isinstance(doc, dict) else None
    except (RocmseatError, ValueError, RecursionError, KeyError, TypeError):
        return None, None
    if not isinstance(components, dict) or not components:
        return None, started if isinstance(started, str) else None
    found = {"cache_load", "load_failure"}
    loaded = any(isinstance(c, dict) and isinstance(c.get("outcomes"), list)
                 and found.intersection(o for o in c["outcomes"] if isinstance(o, str))
                 for c in components.values())
    return loaded, started if isinstance(started, str) else None


class Remediator:
    def __init__(self, seat: Seat, *, seat_file: Path, state_dir: Path, mode: str, node: str,
                 records: Mapping[str, ReplicaPlacement], edge: Edge,
                 log: Callable[[str], None], clock: Callable[[], float] = time.time,
                 node_refusal: Callable[[], str | None] = lambda: None,
                 background: bool = True, max_age_s: float = 60.0,
                 reread: Callable[[], Mapping[str, ReplicaPlacement]] | None = None) -> None:
        self.seat = seat
        self.meta = journal.Meta(seat.name, str(seat_file.absolute()), node, mode)
        self.state_dir = state_dir
        self.settings = settings_of(seat, mode)
        self.records = dict(records)
        self._reread = reread  # the records again (a replica launched after the watcher)
        self.edge = edge
        self.log = log
        self.clock = clock
        self.node_refusal = node_refusal
        self.max_age_s = max_age_s
        self.state = P.State()
        self.counts: dict[tuple[str, str, str], int] = {}
        self._last: dict[str, P.StepRecord] = {}
        self._failures: queue.Queue[tuple[str, str]] = queue.Queue()
        self._jobs: queue.Queue[P.Action | None] = queue.Queue()
        self._said_unusable = ""
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
        fresh = watcher.evaluated_at_s is not None and now - watcher.evaluated_at_s <= \
            self.max_age_s
        problem = ("no evaluation yet" if watcher.evaluated_at_s is None else
                   f"the last evaluation is {now - watcher.evaluated_at_s:.0f} s old")
        try:
            with journal.locked(self.state_dir, self.seat.name):
                state, _ = journal.load_state(self.state_dir, self.seat.name)
                self._said_unusable = ""
                while True:
                    try:
                        replica, error = self._failures.get_nowait()
                    except queue.Empty:
                        break
                    state = P.action_failed(state, replica, error)
                observations = [self._observe(s, state) for s in statuses]
                decision = P.decide(state, observations, now, self.settings,
                                    node=self.meta.node or "-", view_fresh=fresh,
                                    view_problem=problem)
                if decision.state != state or decision.records:
                    journal.save_state(self.state_dir, self.meta, decision.state, now)
                for record in decision.records:
                    journal.write_record(self.state_dir, self.meta, record)
        except RocmseatError as exc:  # an untrusted state, a lock timeout: act on nothing
            if exc.message != self._said_unusable:
                self.log(f"rocmseat-remediate unusable-state error={'_'.join(exc.message.split())}")
                self._said_unusable = exc.message
            return
        except OSError as exc:
            self.log(f"rocmseat-remediate state-not-saved error={exc.strerror or exc}")
            return
        self.state = decision.state
        for record in decision.records:
            self.log(journal.journal_line(self.meta, record))
            key = (record.replica, record.action, record.outcome)
            self.counts[key] = self.counts.get(key, 0) + 1
            self._last[record.replica] = record
        for action in decision.actions:
            if self._background:
                self._jobs.put(action)
            else:
                self._execute(action)
        self._mirror(watcher, decision.state)

    def _observe(self, status: ReplicaStatus, state: P.State) -> P.Observation:
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
                if judged and judged.drafts > 0 and judged.accepted_per_pos else None))
        ladder = state.ladder(status.replica)
        wants = A.REPLICA_STALLED in status.alerts or any(a in status.alerts for a in P.TRIGGERS)
        if ladder.pending is not None or not wants:
            return obs  # the edge is read only where the ladder may start a step
        refusal: str | None = None
        if status.replica not in self.records and self._reread is not None:
            self.records = dict(self._reread())
            self.edge.records = dict(self.records)
        if status.replica not in self.records:
            refusal = (f"{status.replica} has no placement record (not launched by rocmseat "
                       "with this state dir): never acted on")
        elif (node := self.node_refusal()) is not None:
            refusal = f"the node's preflight: {node} (a node problem is not a drafter problem)"
        loaded, started = startup_facts(self.state_dir, self.seat.name, status.replica)
        return dataclasses.replace(obs, refusal=refusal, cache_loaded=loaded, last_start=started)

    # ----- the edge -------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            action = self._jobs.get()
            if action is None:
                return
            self._execute(action)

    def _execute(self, action: P.Action) -> None:
        try:
            if action.action == P.MOVE_CACHE_RESTART:
                aside = self.edge.move_cache_aside(action.replica, {
                    "schema": journal.SCHEMA, "why": action.reason,
                    "moved_by": "rocmseat watch --remediate (step 1)"})
                self.log(f"rocmseat-remediate replica={action.replica} cache-moved-aside "
                         f"to={aside}")
            self.edge.restart(action.replica, action.mode, why=action.reason)
            self.log(f"rocmseat-remediate replica={action.replica} restarted mode={action.mode}")
        except (RocmseatError, OSError) as exc:
            message = exc.message if isinstance(exc, RocmseatError) else str(exc)
            self.log(f"rocmseat-remediate replica={action.replica} action-failed "
                     f"error={'_'.join(message.split())}")
            self._failures.put((action.replica, message))

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
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout=1.0)


def _without_drafter(ladder: P.Ladder) -> bool:
    """The replica runs (or is being verified) without its drafter."""
    return ladder.mode == "no-drafter" or (ladder.pending is not None
                                           and ladder.pending.step == 2)


def reset(state_dir: Path, seat: str, replica: str | None, now_s: float
          ) -> tuple[P.State, list[str], journal.Meta]:
    """Clear halts and modes (rocmseat.watch.remediate.policy.reset) under the lock, journal
    it; returns the new state, the replicas that must restart with their drafter, the meta."""
    with journal.locked(state_dir, seat):
        state, meta = journal.load_state(state_dir, seat)
        if replica is not None and replica not in state.ladders and not any(
                h.scope == P.replica_scope(replica) for h in state.halts.values()):
            from rocmseat.text import printable

            raise RocmseatError(f"replica {printable(replica, 80)!r}: no remediation state in "
                                f"seat {seat}",
                                hint="`rocmseat remediate status` lists what there is")
        new, back = P.reset(state, replica)
        journal.save_state(state_dir, meta, new, now_s)
        record = P.StepRecord(replica or "*", None, "reset", "reset by the operator", now_s,
                              figures={"restart_with_drafter": ",".join(back) or "-"})
        journal.write_record(state_dir, meta, record)
    return new, back, meta


def status_json(state: P.State, meta: journal.Meta, records: Sequence[Mapping[str, Any]]
                ) -> dict[str, Any]:
    return {"schema": "rocmseat.remediation-status/v1", "seat": meta.seat, "node": meta.node,
            "mode": meta.mode, "seat_file": meta.seat_file, **P.state_json(state),
            "journal": list(records)}
