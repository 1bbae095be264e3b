"""Where a seat's replicas are on this host: the edge around the pure placement resolver.

It gathers the resolver's inputs (the node inventory from a sysfs root) and reads and writes the
record launch ran with, `<replica state dir>/placement.json` (`rocmseat.placement/v1`). It
decides nothing itself: names, ports, pairs and dirs come from rocmseat.seat.placement.

`known_placement` is for the readers that must work on a host whose /sys shows no GPU (a
monitoring host, a container): watch and cache-audit and key. It takes the sysfs answer when the
node's GPUs can be read, the recorded placement.json of each replica otherwise, and says why when
it has neither (an auto seat names its replicas only through the node).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rocmseat.atomic import atomic_write_json
from rocmseat.errors import NoDeviceError, ReadError, RocmseatError
from rocmseat.node.inventory import Inventory
from rocmseat.safeio import read_regular_text
from rocmseat.seat.model import Seat
from rocmseat.seat.placement import (
    FILE_NAME,
    HipNumbering,
    ReplicaPlacement,
    placement_from_json,
    placement_json,
    resolve,
)

PLACEMENT_LIMIT_BYTES = 64 << 10  # a record is ~1 KiB


@dataclass(frozen=True, slots=True)
class KnownPlacement:
    records: tuple[ReplicaPlacement, ...]  # by index
    source: str  # "sysfs" | "state" | "seat" (an explicit or cpu seat, /sys not read) | "none"
    why: str  # when records is empty: why nothing is known, in words
    # replica dir -> why its placement.json could not be used ("" for the seat dir itself)
    problems: Mapping[str, str] = field(default_factory=dict)
    unplaced: tuple[str, ...] = ()  # replicas whose only record is one of those files


def read_node(seat: Seat, sysfs_root: Path | None) -> Inventory | None:
    """The node inventory a rocm seat needs (None for cpu); NoDeviceError when it shows no GPU."""
    if seat.backend == "cpu" or sysfs_root is None:
        return None
    from rocmseat.node.inventory import read_inventory

    inventory = read_inventory(sysfs_root)
    if not inventory.gpus:
        found = f" (found {', '.join(inventory.other_cards)})" if inventory.other_cards else ""
        raise NoDeviceError(f"no AMD GPU under {sysfs_root / 'class' / 'drm'}{found}: "
                            f"rocm seat {seat.name} has nothing to run on",
                            hint="check --sysfs-root, or `rocmseat preflight` on this node")
    return inventory


def write_recorded(record: ReplicaPlacement) -> Path:
    """Save the record launch runs with (atomic; no argv, no environment: mode 0644)."""
    path = record.state_dir / FILE_NAME
    atomic_write_json(path, placement_json(record))
    return path


def read_recorded(seat: Seat, state_root: Path | None) -> tuple[list[ReplicaPlacement],
                                                                 dict[str, str]]:
    """The placement.json of every replica of `seat` under `state_root`, and per replica dir
    whose file could not be used (unreadable, not a record, another seat's) one line why."""
    if state_root is None:
        return [], {}
    seat_dir = state_root / "seats" / seat.name
    try:
        names = sorted(p.name for p in seat_dir.iterdir())
    except FileNotFoundError:
        return [], {}
    except OSError as exc:
        return [], {"": f"{seat_dir}: {exc.strerror or exc}"}
    records: list[ReplicaPlacement] = []
    problems: dict[str, str] = {}
    for name in names:
        path = seat_dir / name / FILE_NAME
        try:
            text = read_regular_text(path, limit_bytes=PLACEMENT_LIMIT_BYTES)
        except ReadError as exc:
            if path.exists() or path.is_symlink():
                problems[name] = exc.message
            continue
        try:
            record = placement_from_json(json.loads(text))
        except (ValueError, RecursionError) as exc:  # PlacementFileError is a ValueError
            problems[name] = f"{path}: not a placement record: {exc}"
            continue
        if record.seat != seat.name or record.replica != name:
            problems[name] = (f"{path}: the record of {record.seat}/{record.replica}, not of "
                              f"{seat.name}/{name}")
            continue
        records.append(record)
    return sorted(records, key=lambda r: r.index), problems


def known_placement(seat: Seat, *, sysfs_root: Path | None, state_root: Path | None,
                    numbering: HipNumbering | None = None) -> KnownPlacement:
    """The replicas of `seat` as far as this host can tell (see the module docstring). A record
    launch saved wins over the resolver's answer for the same replica: it is what runs."""
    recorded, problems = read_recorded(seat, state_root)
    root = state_root if state_root is not None else Path("<no state dir>")
    inventory: Inventory | None = None
    sysfs_why = "no sysfs root given"
    if seat.backend == "rocm" and sysfs_root is not None:
        try:
            inventory = read_node(seat, sysfs_root)
        except RocmseatError as exc:
            sysfs_why = exc.message
    try:
        resolved = resolve(seat, inventory, state_root=root, numbering=numbering)
        source = "sysfs" if inventory is not None else "seat"
    except NoDeviceError:  # an auto seat and no GPU to pair here
        resolved, source = (), "none"
    if not resolved and not recorded:
        return KnownPlacement((), "none", (
            f"seat {seat.name} places its replicas from the node's GPUs ([replicas] mode = "
            f"'auto') and this host cannot tell them: {sysfs_why}; and no replica has a "
            f"{FILE_NAME} under {root / 'seats' / seat.name} (none was launched with this "
            "state dir)"), problems, tuple(n for n in problems if n))
    by_name = {r.replica: r for r in resolved}
    by_name.update({r.replica: r for r in recorded})
    if not resolved:
        source = "state"
    records = tuple(sorted(by_name.values(), key=lambda r: r.index))
    unplaced = tuple(n for n in problems if n and n not in by_name)
    return KnownPlacement(records, source, "", problems, unplaced)
