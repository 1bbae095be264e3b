"""Per-replica readiness for load balancers and readinessProbes, and the watcher's own health.

vLLM's `/health` stays 200 on a hung engine and on a drafter that no longer matches its target
(vllm/entrypoints/serve/instrumentator/health.py answers 200 unless EngineDeadError): every
serving stack that probes only `/health` keeps routing to such a replica. `/ready/<replica>`
answers from the watchdog's last verdict instead (docs/watch.md, "Sinks"). Pure functions:
statuses and clock readings in, (ready, one-line reason) out.

A dead drafter takes the replica out (503) until the engine restarts: the restart clears the
verdict (rocmseat.watch.loop), so the replica comes back and is judged again on its own drafts
(503 again after 50 of them if the drafter is still dead). Out of rotation a replica drafts
nothing, so evidence alone could never clear it.

A speculation verdict never empties a seat (seat_readiness): a drafter fault every replica
shares (one drafter checkpoint, one stale cache rolled out to all) leaves the output correct and
only slower, and 503 on every replica would turn that slowdown into an outage. Below the seat's
floor (`[watch] min_ready`, default one replica; 0 is no floor, for a watcher that sees one
replica of many, a Kubernetes sidecar) such a replica stays in rotation and the alert still
fires; a replica that is down, stalled, out of rotation or unstable is 503 whatever the floor
(docs/monitoring.md, "The seat's floor").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rocmseat.watch import alerts as A
from rocmseat.watch.status import ReplicaStatus

# In this order: the first that is active is the reason given.
NOT_READY: tuple[str, ...] = (
    A.REPLICA_OUT_OF_ROTATION, A.REPLICA_DOWN, A.REPLICA_STALLED, A.SPEC_DRAFTER_DEAD,
    A.SPEC_BLIND, A.METRICS_UNSTABLE,
)


# Speculation verdicts: the replica still answers correctly, only without the drafter's gain
# (a dead drafter, an acceptance collapse, no spec series to judge). Only these yield to the floor.
SPECULATION: frozenset[str] = frozenset({A.SPEC_DRAFTER_DEAD, A.SPEC_BLIND})
DEFAULT_MIN_READY = 1


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reason: str

    @property
    def http_status(self) -> int:
        return 200 if self.ready else 503


def replica_readiness(
    status: ReplicaStatus | None, *, evaluated_at_s: float | None, now_s: float,
    max_age_s: float,
) -> Readiness:
    """200 only while the replica is up (its last scrape was read), not stalled, not blind,
    its drafter not dead, and the verdict is fresh; else 503 with the first reason."""
    if status is None or evaluated_at_s is None:
        return Readiness(False, "not evaluated yet")
    name = status.replica
    age = now_s - evaluated_at_s
    if age > max_age_s:
        return Readiness(False, f"{name}: no fresh verdict (the last evaluation is {age:.0f} s "
                                f"old; the limit is {max_age_s:.0f} s)")
    for alert in NOT_READY:
        if alert in status.alerts:
            return Readiness(False, f"{name}: {alert}: {A.SUMMARY[alert]}")
    if not status.up:
        return Readiness(False, f"{name}: the last scrape failed: {status.error}")
    others = [a for a in status.alerts if a not in NOT_READY]
    note = f" (also active: {','.join(others)})" if others else ""
    return Readiness(True, f"{name}: ready{note}")


def _speculation_only(status: ReplicaStatus) -> bool:
    """Not ready for a speculation verdict alone: up, and every not-ready alert a speculation
    one."""
    held = [a for a in NOT_READY if a in status.alerts]
    return status.up and bool(held) and all(a in SPECULATION for a in held)


def seat_readiness(
    statuses: Sequence[ReplicaStatus], *, evaluated_at_s: float | None, now_s: float,
    max_age_s: float, min_ready: int = DEFAULT_MIN_READY,
) -> dict[str, Readiness]:
    """Every replica's readiness, with the seat's floor (pure): while fewer than `min_ready`
    replicas of a seat (0: no floor; the `seat` label groups them, else all are one seat) are
    ready, replicas held out only by a speculation verdict are kept in rotation, in name order,
    until the floor is met. Envoy's panic threshold is the same rule for its hosts: below it,
    routing to every host beats routing to none."""
    verdicts = {s.replica: replica_readiness(s, evaluated_at_s=evaluated_at_s, now_s=now_s,
                                             max_age_s=max_age_s) for s in statuses}
    if evaluated_at_s is None or now_s - evaluated_at_s > max_age_s:
        return verdicts  # no fresh verdict spares nothing
    seats: dict[str, list[ReplicaStatus]] = {}
    for status in statuses:
        seats.setdefault(dict(status.labels).get("seat", ""), []).append(status)
    for members in seats.values():
        floor = min(max(min_ready, 0), len(members))
        ready = sum(1 for s in members if verdicts[s.replica].ready)
        spared = sorted((s for s in members if not verdicts[s.replica].ready
                         and _speculation_only(s)), key=lambda s: s.replica)
        for status in spared[: max(floor - ready, 0)]:
            held = next(a for a in NOT_READY if a in status.alerts)
            verdicts[status.replica] = Readiness(
                True, f"{status.replica}: ready, kept in rotation by the seat's floor "
                      f"({ready} of {len(members)} ready without it, min_ready {floor}); "
                      f"alert {held}: {A.SUMMARY[held]}")
    return verdicts


def watcher_health(
    *, evaluated_at_s: float | None, started_at_s: float, now_s: float, max_age_s: float
) -> Readiness:
    """The watcher itself: alive while its evaluations keep coming (`/healthz`)."""
    last = evaluated_at_s if evaluated_at_s is not None else started_at_s
    age = now_s - last
    if age > max_age_s:
        what = "the last evaluation" if evaluated_at_s is not None else "no evaluation since start"
        return Readiness(False, f"stale: {what} {age:.0f} s ago (the limit is "
                                f"{max_age_s:.0f} s)")
    if evaluated_at_s is None:
        return Readiness(True, "ok: starting")
    return Readiness(True, f"ok: last evaluation {age:.1f} s ago")
