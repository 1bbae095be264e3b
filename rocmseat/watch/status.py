"""What the watchdog knows about one replica after an evaluation (exporter, --once, --json)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rocmseat.watch.baseline import Baseline
from rocmseat.watch.window import Window

SCHEMA = "rocmseat.watch/v1"


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    replica: str
    url: str
    up: bool
    error: str | None
    scrape_errors_total: int
    consecutive_failures: int
    key: str
    window: Window | None  # the last scrape-to-scrape window
    judged: Window | None  # the last window the detector judged (pooled to >= min drafts)
    restarted: bool
    blind: bool
    baseline: Baseline | None
    learning: bool
    expected_al: float | None  # the baseline at the judged window's effective K
    lower_al: float | None  # the in-control lower edge at that K
    cusum: float
    z: float | None
    stalled_for_s: float | None
    alerts: tuple[str, ...]
    labels: tuple[tuple[str, str], ...] = ()  # the target's labels (file_sd)
    restarts_in_row: int = 0
    gpus: tuple[str, ...] = ()  # the replica's PCI pair (its placement), for node events
    speculating: bool = True  # the replica is expected to draft (a drafter; not --no-spec)
    # this start's decode rate against the seat's history at the same load, once judged
    # (rocmseat.watch.spawn.SpawnVerdict.factor: >= 1 is slower; None: not judged yet)
    spawn_factor: float | None = None
    # why remediation must hold: a fatal kernel event on one of its GPUs (Watcher.blocking_alert)
    blocked_by: str | None = None

    @property
    def undrafted(self) -> bool:
        """A replica that should draft served requests in its window and drafted nothing: its
        acceptance could not be judged (the schedule turned drafting off at this batch size,
        or the drafter stopped drafting)."""
        w = self.window
        if not self.speculating or w is None or w.drafts > 0:
            return False
        return (w.running or 0.0) > 0 or (w.generation_tokens or 0.0) > 0


def _round(value: float | None, digits: int = 4) -> float | None:
    # Strict JSON (no NaN or Infinity): the reader refuses non-finite input, this is the last
    # guard on the way out.
    return None if value is None or not math.isfinite(value) else round(value, digits)


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else value


def window_json(window: Window | None) -> dict[str, Any] | None:
    if window is None:
        return None
    positions = window.position_acceptance
    conditional = window.conditional_acceptance
    return {
        "duration_s": _round(window.duration_s, 3),
        "drafts": _num(window.drafts),
        "draft_tokens": _num(window.draft_tokens),
        "accepted_tokens": _num(window.accepted_tokens),
        "acceptance_length": _round(window.acceptance_length),
        "draft_acceptance_rate": _round(window.draft_acceptance_rate),
        "alpha": _round(window.alpha),
        "effective_k": _round(window.effective_k),
        "position_acceptance": None if positions is None else [_round(p) for p in positions],
        "conditional_acceptance": None
        if conditional is None
        else [_round(p) for p in conditional],
        "drafts_per_s": _round(window.drafts_per_s),
        "generation_tokens_per_s": _round(window.generation_tokens_per_s),
        "running": _num(window.running),
        "waiting": _num(window.waiting),
        "kv_cache_usage": _round(window.kv_usage),
        "preemptions": _num(window.preemptions),
        "prefix_cache_hit_rate": _round(window.prefix_cache_hit_rate),
    }


def status_json(status: ReplicaStatus) -> dict[str, Any]:
    baseline = status.baseline
    return {
        "replica": status.replica,
        "url": status.url,
        "up": status.up,
        "error": status.error,
        "scrape_errors_total": status.scrape_errors_total,
        "key": status.key,
        "restarted": status.restarted,
        "restarts_in_row": status.restarts_in_row,
        "blind": status.blind,
        "speculating": status.speculating,
        "undrafted": status.undrafted,
        "window": window_json(status.window),
        "baseline": None
        if baseline is None
        else {
            "source": baseline.source,
            "acceptance_length": _round(baseline.acceptance_length),
            "positions": baseline.num_positions,
            "key": baseline.key,
        },
        "learning": status.learning,
        "detector": {
            "expected_acceptance_length": _round(status.expected_al),
            "lower_acceptance_length": _round(status.lower_al),
            "cusum": _round(status.cusum),
            "z": _round(status.z),
        },
        "stalled_for_s": _round(status.stalled_for_s, 1),
        "alerts": list(status.alerts),
        "labels": dict(status.labels),
        "gpus": list(status.gpus),
    }


def report_json(statuses: list[ReplicaStatus]) -> dict[str, Any]:
    return {"schema": SCHEMA, "replicas": [status_json(s) for s in statuses]}
