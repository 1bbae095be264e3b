"""A replica's mode under remediation: with its drafter, without it (step 2), out of rotation,
or being reset (docs/remediate.md).

Without its drafter a replica runs the seat's own configuration minus `[drafter]`: launch
(`rocmseat launch --no-drafter`) computes its own config key from that seat, so its cache is
keyed apart from the drafter's (docs/remediate.md).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocmseat.seat.model import Seat


class Mode(enum.StrEnum):
    """The values of `mode` in rocmseat.remediation-state/v1 (and of ROCMSEAT_REMEDIATE_MODE
    for the two a replica restarts in): str-valued, so the documents read as before."""

    DRAFTER = "drafter"
    NO_DRAFTER = "no-drafter"
    OUT_OF_ROTATION = "out-of-rotation"
    RESETTING = "resetting"  # `rocmseat remediate reset` owns it until its restart is done


def without_drafter(seat: Seat) -> Seat:
    """The seat minus its drafter (its source file and text kept, for located errors)."""
    return seat.model_copy(update={"drafter": None})
