"""Wiring: a seat's remediator for `rocmseat watch SEAT --remediate` (docs/remediate.md).

The replicas it may act on are the ones launch recorded (their placement.json in the state dir:
rocmseat.placement.recorded.read_recorded); a rocm seat's node must have a passing preflight verdict
of this boot (rocmseat.preflight.verdict_doc), read afresh before each step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rocmseat.placement.record import ReplicaPlacement
from rocmseat.seat.model import Seat
from rocmseat.watch.remediate.actions import SeatEdge
from rocmseat.watch.remediate.service import VERDICT_MAX_AGE_S, Remediator, Setup


def node_refusal(state_dir: Path, sysfs_root: Path | None) -> Callable[[], str | None]:
    """Why the node's preflight forbids acting (None: it passes, or the seat has no node
    preflight: a cpu seat)."""
    def judge() -> str | None:
        if sysfs_root is None:
            return None
        from rocmseat.preflight.verdict_doc import UnusableVerdict, load_verdict

        try:
            verdict = load_verdict(state_dir, sysfs_root, max_age_s=VERDICT_MAX_AGE_S,
                                   now_unix_s=time.time())
        except UnusableVerdict as exc:
            return f"cannot tell ({exc})"
        if verdict.exit_code() != 0:
            return "it fails"
        return None

    return judge


def remediator_factory(seat: Seat, seat_file: Path, state_dir: Path, mode: str, *, node: str,
                       sysfs_root: Path | None) -> Callable[[Callable[[str], None]], Remediator]:
    from rocmseat.placement.recorded import read_recorded

    def launched() -> dict[str, ReplicaPlacement]:
        return {r.replica: r for r in read_recorded(seat, state_dir).records}

    def make(log: Callable[[str], None]) -> Remediator:
        records_now = launched()
        log(f"rocmseat-remediate start mode={mode} replicas={','.join(sorted(records_now)) or '-'} "
            f"restart={'command' if seat.remediate.restart_command else 'systemd'}")
        # an alert episode outlives a gap of the detector's resolve hold (resolve_windows
        # judged windows, one per interval: rocmseat.watch.detector)
        from rocmseat.watch.detector import DetectorParams

        hold_s = (seat.watch.interval_s or 10.0) * DetectorParams().resolve_windows
        return Remediator(Setup(seat, seat_file, state_dir, mode, node, records_now,
                                episode_hold_s=hold_s), SeatEdge(seat, records_now), log=log,
                          node_refusal=node_refusal(state_dir, sysfs_root), reread=launched)

    return make
