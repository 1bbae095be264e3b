"""The replicas of a seat as watch targets: names, /metrics URLs, cache dirs, GPUs.

Every field comes from the seat's placement (rocmseat.placement): the replica's own port
(port_base + its index in the seat, never its position in a list of what was found), its GPU
pair (node events need it), its cache dir. The node is read (a rocm seat: the sysfs root, by
default the real one, rocmseat.sysfs.fs.default_sysfs_root) and merged with the record launch
saved for each replica (`placement.json` in the replica's state dir): a replica the node places
but that never launched is still watched (and reported down when nothing answers); one that only
has a record (a monitoring host whose /sys shows no GPU) is watched from it. A replica whose
record is unusable is watched on the port the seat's rule gives it, with one line saying why
its record was not used: it never stops the others from being watched. An auto seat with
neither a readable node nor any record is a config error that says so
(rocmseat.placement.place).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Final

from rocmseat.errors import ConfigError
from rocmseat.seat.model import Seat
from rocmseat.watch.scrape import Target

log = logging.getLogger("rocmseat.watch.targets")


class _Node:
    """The default of `sysfs_root`: the node this runs on (its sysfs root)."""

    def __repr__(self) -> str:
        return "NODE"


NODE: Final = _Node()


def seat_targets(seat: Seat, state_dir: Path | None, *,
                 sysfs_root: Path | _Node | None = NODE,
                 say: Callable[[str], None] | None = None) -> list[Target]:
    """One target per replica of `seat`, in index order.

    `sysfs_root`: where to read the node's GPUs (NODE, the default: this node's sysfs root; None:
    only the seat file and the recorded placements). A cpu seat reads no sysfs. `say`: where a
    one-line problem goes (a placement.json that was not used); default: this module's logger.
    """
    from rocmseat.placement.place import place
    from rocmseat.state import state_root

    tell = say if say is not None else log.warning
    root: Path | None
    if seat.backend != "rocm":
        root = None
    elif isinstance(sysfs_root, _Node):
        from rocmseat.sysfs import fs

        root = fs.default_sysfs_root()
    else:
        root = sysfs_root
    known = place(seat, sysfs_root=root, state_root=state_root(state_dir, seat.state_dir))
    for name, problem in sorted(known.problems.items()):
        placed = "watched on its port by the seat's rule" if name in known.unplaced else (
            "watched from the node's placement" if name in {r.replica for r in known.records}
            else "not watched: not a replica of this seat")
        tell(f"{problem} ({placed})" if name else problem)
    if not known.records:
        where = "" if root is None else f" (read {root})"
        raise ConfigError(f"{seat.source_path}: key 'replicas': {known.why}",
                          hint="launch a replica with this state dir first (it records its "
                          "placement.json), or run watch on the GPU node, whose sysfs it reads"
                          f"{where}")
    targets = []
    for record in known.records:
        try:
            url = f"{record.base_url}/metrics"
        except ValueError as exc:
            raise ConfigError(f"{seat.source_path}: key 'engine.host': {exc}") from None
        targets.append(Target(record.replica, url, record.cache_dir, record.pci_pair,
                              engine=seat.engine.kind))
    return targets
