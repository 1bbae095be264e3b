"""Alert names, the book of active alerts, state transitions and their renderings.

A transition is produced only when an alert changes state (firing <-> resolved), so every sink
is deduplicated at the source. Payloads follow Alertmanager's v2 API (POST /api/v2/alerts: a JSON
list of {labels, annotations, startsAt, endsAt, generatorURL}; an alert whose endsAt is in the
past is resolved).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SPEC_ACCEPTANCE_DROP = "spec_acceptance_drop"
SPEC_DRAFTER_DEAD = "spec_drafter_dead"
SPEC_BLIND = "spec_blind"
REPLICA_DOWN = "replica_down"
REPLICA_STALLED = "replica_stalled"
GPU_AER_RECOVERY = "gpu_aer_recovery"
GPU_AER_FAILED = "gpu_aer_failed"
GPU_RESET = "gpu_reset"
GPU_WEDGED = "gpu_wedged"

ALERTS: tuple[str, ...] = (
    SPEC_ACCEPTANCE_DROP, SPEC_DRAFTER_DEAD, SPEC_BLIND, REPLICA_DOWN, REPLICA_STALLED,
    GPU_AER_RECOVERY, GPU_AER_FAILED, GPU_RESET, GPU_WEDGED,
)
SEVERITY: dict[str, str] = {
    SPEC_ACCEPTANCE_DROP: "warning",
    SPEC_DRAFTER_DEAD: "critical",
    SPEC_BLIND: "warning",
    REPLICA_DOWN: "critical",
    REPLICA_STALLED: "critical",
    GPU_AER_RECOVERY: "warning",
    GPU_AER_FAILED: "critical",
    GPU_RESET: "warning",
    GPU_WEDGED: "critical",
}
SUMMARY: dict[str, str] = {
    SPEC_ACCEPTANCE_DROP: "speculative acceptance fell below the baseline's healthy range",
    SPEC_DRAFTER_DEAD: "the drafter's first token is almost never accepted (stale cache, "
    "wrong drafter weights?)",
    SPEC_BLIND: "the spec-decode series are missing (speculation off or --disable-log-stats)",
    REPLICA_DOWN: "the replica's /metrics cannot be scraped",
    REPLICA_STALLED: "requests are running but no token was generated",
    GPU_AER_RECOVERY: "a PCIe AER recovery is in progress on the replica's GPU path",
    GPU_AER_FAILED: "a PCIe AER recovery failed on the replica's GPU path",
    GPU_RESET: "a GPU of the replica was reset",
    GPU_WEDGED: "a GPU of the replica is wedged and needs recovery",
}
FIRING = "firing"
RESOLVED = "resolved"


@dataclass(frozen=True, slots=True)
class Transition:
    replica: str
    alert: str
    state: str  # firing | resolved
    starts_at_s: float
    ends_at_s: float | None
    details: tuple[tuple[str, str], ...] = ()

    def log_line(self) -> str:
        """One journald-friendly line: key=value pairs, no spaces inside values."""
        parts = [f"replica={self.replica}", f"alert={self.alert}", f"state={self.state}"]
        parts += [f"{k}={_token(v)}" for k, v in self.details]
        return "rocmseat-watch " + " ".join(parts)

    def to_alertmanager(
        self, *, generator_url: str = "", seat: str | None = None
    ) -> dict[str, Any]:
        labels = {
            "alertname": self.alert,
            "replica": self.replica,
            "severity": SEVERITY.get(self.alert, "warning"),
            "source": "rocmseat-watch",
        }
        if seat:
            labels["seat"] = seat
        payload: dict[str, Any] = {
            "labels": labels,
            "annotations": {"summary": SUMMARY.get(self.alert, self.alert), **dict(self.details)},
            "startsAt": iso(self.starts_at_s),
            "generatorURL": generator_url,
        }
        if self.ends_at_s is not None:
            payload["endsAt"] = iso(self.ends_at_s)
        return payload

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "rocmseat.watch-alert/v1",
            "replica": self.replica,
            "alert": self.alert,
            "state": self.state,
            "severity": SEVERITY.get(self.alert, "warning"),
            "starts_at": iso(self.starts_at_s),
            "ends_at": None if self.ends_at_s is None else iso(self.ends_at_s),
            "details": dict(self.details),
        }


def _token(value: str) -> str:
    return value.replace(" ", "_") if value else "-"


def iso(time_s: float) -> str:
    stamp = dt.datetime.fromtimestamp(time_s, dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


@dataclass(slots=True)
class AlertBook:
    """The active alerts, keyed by (replica, alert). `set` returns a Transition on a change."""

    active: dict[tuple[str, str], float] = field(default_factory=dict)

    def set(
        self,
        replica: str,
        alert: str,
        on: bool,
        now_s: float,
        details: Mapping[str, str] | None = None,
    ) -> Transition | None:
        key = (replica, alert)
        items = tuple((details or {}).items())
        if on and key not in self.active:
            self.active[key] = now_s
            return Transition(replica, alert, FIRING, now_s, None, items)
        if not on and key in self.active:
            started = self.active.pop(key)
            return Transition(replica, alert, RESOLVED, started, now_s, items)
        return None

    def is_active(self, replica: str, alert: str) -> bool:
        return (replica, alert) in self.active

    def for_replica(self, replica: str) -> tuple[str, ...]:
        return tuple(sorted(a for r, a in self.active if r == replica))
