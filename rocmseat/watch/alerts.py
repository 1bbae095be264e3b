"""Alert names, the book of active alerts, state transitions and their renderings.

A transition is produced only when an alert changes state (firing <-> resolved), so every sink
is deduplicated at the source. Payloads follow Alertmanager's v2 API (POST /api/v2/alerts: a JSON
list of {labels, annotations, startsAt, endsAt, generatorURL}; an alert whose endsAt is in the
past is resolved).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocmseat.redact import redact_text
from rocmseat.text import CONTROL_CLASS

SPEC_ACCEPTANCE_DROP = "spec_acceptance_drop"
SPEC_DRAFTER_DEAD = "spec_drafter_dead"
SPEC_BLIND = "spec_blind"
REPLICA_DOWN = "replica_down"
REPLICA_STALLED = "replica_stalled"
METRICS_UNSTABLE = "metrics_unstable"
GPU_AER_RECOVERY = "gpu_aer_recovery"
GPU_AER_FAILED = "gpu_aer_failed"
GPU_RESET = "gpu_reset"
GPU_WEDGED = "gpu_wedged"
# the kernel log (rocmseat/watch/kernel.py)
GPU_RING_TIMEOUT = "gpu_ring_timeout"
GPU_PAGE_FAULT = "gpu_page_fault"
GPU_LOST = "gpu_lost"
# remediation (rocmseat/watch/remediate, docs/remediate.md)
REMEDIATION_RUNNING = "remediation_running"
REMEDIATION_HALTED = "remediation_halted"
REPLICA_NO_DRAFTER = "replica_no_drafter"
REPLICA_OUT_OF_ROTATION = "replica_out_of_rotation"
# the drafter canary and the slow-spawn lottery (issue 27; rocmseat/watch/canary*.py, spawn.py)
DRAFTER_CANARY_FAILED = "drafter_canary_failed"
REPLICA_SLOW_SPAWN = "replica_slow_spawn"
# acceptance implausibly high (a repetition loop; rocmseat/watch/detector.py): a warning, never a
# remediation trigger
SPEC_ACCEPTANCE_IMPLAUSIBLE = "spec_acceptance_implausible"

ALERTS: tuple[str, ...] = (
    SPEC_ACCEPTANCE_DROP, SPEC_DRAFTER_DEAD, SPEC_BLIND, REPLICA_DOWN, REPLICA_STALLED,
    METRICS_UNSTABLE, GPU_AER_RECOVERY, GPU_AER_FAILED, GPU_RESET, GPU_WEDGED,
    REMEDIATION_RUNNING, REMEDIATION_HALTED, REPLICA_NO_DRAFTER, REPLICA_OUT_OF_ROTATION,
    GPU_RING_TIMEOUT, GPU_PAGE_FAULT, GPU_LOST,
    DRAFTER_CANARY_FAILED, REPLICA_SLOW_SPAWN, SPEC_ACCEPTANCE_IMPLAUSIBLE,
)
SEVERITY: dict[str, str] = {
    SPEC_ACCEPTANCE_DROP: "warning",
    SPEC_DRAFTER_DEAD: "critical",
    SPEC_BLIND: "warning",
    REPLICA_DOWN: "critical",
    REPLICA_STALLED: "critical",
    METRICS_UNSTABLE: "warning",
    GPU_AER_RECOVERY: "warning",
    GPU_AER_FAILED: "critical",
    GPU_RESET: "warning",
    GPU_WEDGED: "critical",
    REMEDIATION_RUNNING: "warning",
    REMEDIATION_HALTED: "critical",
    REPLICA_NO_DRAFTER: "warning",
    REPLICA_OUT_OF_ROTATION: "critical",
    GPU_RING_TIMEOUT: "critical",
    GPU_PAGE_FAULT: "warning",
    GPU_LOST: "critical",
    DRAFTER_CANARY_FAILED: "critical",
    REPLICA_SLOW_SPAWN: "warning",
    SPEC_ACCEPTANCE_IMPLAUSIBLE: "warning",
}
SUMMARY: dict[str, str] = {
    SPEC_ACCEPTANCE_DROP: "speculative acceptance fell below the baseline's healthy range",
    SPEC_DRAFTER_DEAD: "the drafter's first token is almost never accepted (stale cache, "
    "wrong drafter weights?)",
    SPEC_BLIND: "the spec-decode series are missing (speculation off or --disable-log-stats)",
    REPLICA_DOWN: "the replica's /metrics cannot be scraped",
    REPLICA_STALLED: "requests are running but no token was generated",
    METRICS_UNSTABLE: "the counters reset at every scrape: a crash loop, or two servers behind "
    "one URL (a load balancer?); no window can be judged",
    GPU_AER_RECOVERY: "a PCIe AER recovery is in progress on the replica's GPU path",
    GPU_AER_FAILED: "a PCIe AER recovery failed on the replica's GPU path",
    GPU_RESET: "a GPU of the replica was reset",
    GPU_WEDGED: "a GPU of the replica is wedged and needs recovery",
    REMEDIATION_RUNNING: "rocmseat is remediating the replica (a step of the ladder runs)",
    REMEDIATION_HALTED: "a remediation bound tripped: rocmseat acts no more in this scope "
    "until `rocmseat remediate reset`",
    REPLICA_NO_DRAFTER: "the replica serves without its drafter (remediation step 2)",
    REPLICA_OUT_OF_ROTATION: "the replica stalled twice within an hour: out of rotation",
    GPU_RING_TIMEOUT: "the kernel log says a ring of the replica's GPU timed out (a GPU hang)",
    GPU_PAGE_FAULT: "the kernel log says a GPU VM page fault hit the replica's GPU",
    GPU_LOST: "the kernel log says a GPU of the replica failed its reset or fell off the bus: "
    "a node problem (drain), never restarted by remediation",
    DRAFTER_CANARY_FAILED: "the canary's fixed prompts collapsed against their baseline for "
    "this config key (the drafter's weights or cache changed behind the key?)",
    REPLICA_SLOW_SPAWN: "this start decodes slower than the seat's history at the same load "
    "(the spawn lottery: a restart may fix it)",
    SPEC_ACCEPTANCE_IMPLAUSIBLE: "nearly every drafted token is accepted (rate >= 0.98 over "
    "500+ drafts, 3 windows in a row) on traffic that is not the canary's: a repetition loop "
    "in the output? (vLLM PR #44487); never remediated",
}
FIRING = "firing"
RESOLVED = "resolved"


# Labels that rocmseat sets on every alert: a target's own labels may not take these names,
# except `seat` (a targets file may name the seat its replicas serve; filesd.OWN_LABELS).
RESERVED_LABELS = frozenset({"alertname", "replica", "severity", "source", "seat"})


@dataclass(frozen=True, slots=True)
class Transition:
    replica: str
    alert: str
    state: str  # firing | resolved
    starts_at_s: float
    ends_at_s: float | None
    details: tuple[tuple[str, str], ...] = ()
    labels: tuple[tuple[str, str], ...] = ()  # the target's labels (file_sd), none reserved

    def log_line(self) -> str:
        """One journald-friendly line: key=value pairs, no spaces or controls inside values."""
        parts = [f"replica={_token(self.replica)}", f"alert={self.alert}", f"state={self.state}"]
        parts += [f"{k}={_token(v)}" for k, v in self.details]
        parts += [f"label.{k}={_token(v)}" for k, v in self.labels]
        return redact_text("rocmseat-watch " + " ".join(parts))

    def to_alertmanager(
        self, *, generator_url: str = "", seat: str | None = None, node: str | None = None
    ) -> dict[str, Any]:
        labels = {k: v for k, v in self.labels if k not in RESERVED_LABELS}
        # a targets file may say which seat its replicas serve (its `seat` label): theirs
        seat = dict(self.labels).get("seat") or seat
        labels.update({
            "alertname": self.alert,
            "replica": self.replica,
            "severity": SEVERITY.get(self.alert, "warning"),
            "source": "rocmseat-watch",
        })
        if seat:
            labels["seat"] = seat
        if node:
            labels["node"] = node
        details = {k: redact_text(v) for k, v in self.details}
        payload: dict[str, Any] = {
            "labels": labels,
            "annotations": {"summary": SUMMARY.get(self.alert, self.alert), **details},
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
            "details": {k: redact_text(v) for k, v in self.details},
            "labels": dict(self.labels),
        }


_UNSAFE = re.compile(rf"[\s{CONTROL_CLASS}]")


def _token(value: str) -> str:
    """A value as one log token: whitespace and control characters become `_`."""
    return _UNSAFE.sub("_", value) if value else "-"


def iso(time_s: float) -> str:
    stamp = dt.datetime.fromtimestamp(time_s, dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


@dataclass(slots=True)
class AlertBook:
    """The active alerts per replica. `set` returns a Transition on a change."""

    by_replica: dict[str, dict[str, float]] = field(default_factory=dict)

    def set(
        self,
        replica: str,
        alert: str,
        on: bool,
        now_s: float,
        details: Mapping[str, str] | None = None,
        *,
        labels: tuple[tuple[str, str], ...] = (),
    ) -> Transition | None:
        active = self.by_replica.get(replica)
        items = tuple((details or {}).items())
        if on and (active is None or alert not in active):
            self.by_replica.setdefault(replica, {})[alert] = now_s
            return Transition(replica, alert, FIRING, now_s, None, items, labels)
        if not on and active is not None and alert in active:
            started = active.pop(alert)
            if not active:
                del self.by_replica[replica]
            return Transition(replica, alert, RESOLVED, started, now_s, items, labels)
        return None

    def is_active(self, replica: str, alert: str) -> bool:
        return alert in self.by_replica.get(replica, {})

    def started(self, replica: str, alert: str) -> float | None:
        return self.by_replica.get(replica, {}).get(alert)

    def for_replica(self, replica: str) -> tuple[str, ...]:
        return tuple(sorted(self.by_replica.get(replica, ())))
