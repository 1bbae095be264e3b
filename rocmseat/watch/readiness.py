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
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmseat.watch import alerts as A
from rocmseat.watch.status import ReplicaStatus

# In this order: the first that is active is the reason given.
NOT_READY: tuple[str, ...] = (
    A.REPLICA_OUT_OF_ROTATION, A.REPLICA_DOWN, A.REPLICA_STALLED, A.SPEC_DRAFTER_DEAD,
    A.SPEC_BLIND, A.METRICS_UNSTABLE,
)


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
