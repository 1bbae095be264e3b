"""The replicas of a seat as watch targets: names, /metrics URLs, cache dirs, GPUs.

Every field comes from the seat's placement (rocmseat.seat.placement): the replica's own port
(port_base + its index in the seat, never its position in a list of what was found), its GPU
pair (node events need it), its cache dir. On a host whose /sys shows no GPU the placement is
the record launch saved (`placement.json` in the replica's state dir); an auto seat with neither
is a config error that says so (rocmseat.launch.placed.known_placement).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rocmseat.errors import ConfigError
from rocmseat.watch.scrape import Target


def seat_targets(seat: Any, state_dir: Path | None, *,
                 sysfs_root: Path | None = None) -> list[Target]:
    """One target per replica of `seat`, in index order. `sysfs_root`: read the node's GPUs
    there (None: only the seat file and the recorded placements are used)."""
    from rocmseat.launch.placed import known_placement

    known = known_placement(seat, sysfs_root=sysfs_root, state_root=state_dir)
    if known.unplaced:
        # a replica that launched but whose record is unreadable: never silently unwatched
        raise ConfigError(known.problems[known.unplaced[0]],
                          hint="launch the replica again (it rewrites its placement.json)")
    if not known.records:
        raise ConfigError(f"{seat.source_path}: key 'replicas': {known.why}",
                          hint="launch a replica first (it records its placement), or run "
                          "watch where the GPUs are")
    targets = []
    for record in known.records:
        try:
            url = f"{record.base_url}/metrics"
        except ValueError as exc:
            raise ConfigError(f"{seat.source_path}: key 'engine.host': {exc}") from None
        targets.append(Target(record.replica, url, record.cache_dir, record.pci_pair))
    return targets
