"""A replica's mode under remediation: with its drafter, or without (step 2).

Without its drafter a replica runs the seat's own configuration minus `[drafter]`: launch
(`rocmseat launch --no-drafter`) computes its own config key from that seat, so its cache is
keyed apart from the drafter's (docs/remediate.md).
"""

from __future__ import annotations

from rocmseat.seat.model import Seat

NO_DRAFTER_FLAG = "--no-drafter"


def without_drafter(seat: Seat) -> Seat:
    """The seat minus its drafter (its source file and text kept, for located errors)."""
    return seat.model_copy(update={"drafter": None})
