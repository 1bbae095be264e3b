"""What a seat file alone says of replica i's name and port: the seat loader checks a file by
these rules, and the placement room builds every replica's record on them (rocmseat.placement.
rules holds the rest of the seat's placement rules). Pure; the schema (pydantic) is imported for
types only, so `--pair` parsing (preflight's start) does not load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rocmseat.seat.model import Seat

# The seat's other units are rocmseat-<seat>-watch.service and -preflight.service: a replica of
# either name would be rendered onto (and replaced by) that unit (docs/seat.md, [replicas]).
RESERVED_REPLICA_NAMES = ("watch", "preflight")

def replica_name(seat: Seat, index: int) -> str:
    names = seat.replicas.names
    return names[index] if names is not None and index < len(names) else f"r{index}"


def planned_port(seat: Seat, index: int) -> int:
    """The one port rule: replica i listens on serve.port_base + i (unchecked; see replica_port)."""
    return seat.serve.port_base + index
