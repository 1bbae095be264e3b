"""Where a seat's replicas are on this host: the edge around the pure placement resolver.

It gathers the resolver's inputs (the node inventory from a sysfs root, and each replica's
identity: the pair it ran on, from the `placement.json` launch saved) and reads and writes that
record, `<replica state dir>/placement.json` (`rocmseat.placement/v1`). It decides nothing
itself: names, ports, pairs and dirs come from rocmseat.seat.placement.

A placement.json is hostile input: it is read only as a regular file (never through a link: launch
writes it atomically, so a link there was planted), parsed with every field checked, and
cross-checked against the seat's own placement rule (rocmseat.seat.placement.record_problem).
A record that fails any of that is not used; the replica it names is reported with the reason,
one line, and nothing else is held up by it.

`known_placement` is for the readers that must work on a host whose /sys shows no GPU (a
monitoring host, a container): watch, cache-audit and key. It takes the node's answer where the
node's GPUs can be read, merged with the recorded placement.json of each replica (a record wins:
it is what runs), the seat's rule alone for a replica whose record is unusable, and says why
when it has nothing.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocmseat.atomic import atomic_write_json
from rocmseat.errors import NoDeviceError, ReadError, RocmseatError
from rocmseat.node.inventory import Inventory
from rocmseat.safeio import read_regular_text
from rocmseat.seat.locate import printable
from rocmseat.seat.model import Seat
from rocmseat.seat.placement import (
    FILE_NAME,
    HipNumbering,
    ReplicaPlacement,
    placement_from_json,
    placement_json,
    record_problem,
    replica_index,
    replica_state_dir,
    resolve,
    rule_placement,
    seat_state_dir,
)

PLACEMENT_LIMIT_BYTES = 64 << 10  # a record is ~1 KiB


@dataclass(frozen=True, slots=True)
class KnownPlacement:
    records: tuple[ReplicaPlacement, ...]  # by index
    source: str  # "sysfs" | "state" | "seat" (an explicit or cpu seat, /sys not read) | "none"
    why: str  # when records is empty: why nothing is known, in words
    # replica dir -> why its placement.json was not used ("" for the seat dir itself)
    problems: Mapping[str, str] = field(default_factory=dict)
    # replicas known only by the seat's rule (their record unusable, the node not readable):
    # watched on their port, no GPU pair (rocmseat.seat.placement.rule_placement)
    unplaced: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Recorded:
    """The usable placement.json records of a seat, and why each other one is not used."""

    records: tuple[ReplicaPlacement, ...]  # by index
    problems: Mapping[str, str]  # replica dir name ("" for the seat dir) -> one line

    def identities(self, seat: Seat) -> dict[str, tuple[str, ...]]:
        """replica -> the pair it ran on (auto rocm seats: the resolver keeps it)."""
        if seat.backend != "rocm" or seat.replicas.mode != "auto":
            return {}
        return {r.replica: r.pci_pair for r in self.records}


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


def read_recorded(seat: Seat, state_root: Path | None) -> Recorded:
    """The placement.json of every replica of `seat` under `state_root` that is a record of
    that replica agreeing with the seat's rule, and per replica dir whose file is not used
    (unreadable, a link, not a record, another seat's or replica's, against the rule, or
    sharing a GPU with another record) one line why."""
    if state_root is None:
        return Recorded((), {})
    seat_dir = seat_state_dir(state_root, seat.name)
    for linked in (seat_dir.parent, seat_dir):
        if linked.is_symlink():
            return Recorded((), {"": f"{linked}: is a symlink; no placement.json is read "
                                     "through one"})
    try:
        names = sorted(os.listdir(seat_dir))
    except (FileNotFoundError, NotADirectoryError):
        return Recorded((), {})
    except OSError as exc:
        return Recorded((), {"": f"{seat_dir}: {exc.strerror or exc}"})
    found: list[ReplicaPlacement] = []
    problems: dict[str, str] = {}
    for name in names:
        directory = seat_dir / name
        try:
            info = os.lstat(directory)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode):
            if replica_index(seat, name) is not None:
                problems[name] = (f"{directory}: is a symlink; a replica's state dir is never a "
                                  "link (its placement.json is not read through one)")
            continue
        if not stat.S_ISDIR(info.st_mode):
            continue
        path = replica_state_dir(state_root, seat.name, name) / FILE_NAME
        record, why = _read_one(seat, state_root, path, name)
        if why is not None:
            problems[name] = why
        elif record is not None:
            found.append(record)
    records = _without_clashes(found, problems)
    return Recorded(tuple(sorted(records, key=lambda r: r.index)), problems)


def _read_one(seat: Seat, state_root: Path, path: Path,
              name: str) -> tuple[ReplicaPlacement | None, str | None]:
    """(record, None), (None, why), or (None, None) when the dir holds no placement.json."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            return None, (f"{path}: is a symlink; launch writes its placement.json in place, so "
                          "a link was planted: not followed")
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    try:
        text = read_regular_text(path, limit_bytes=PLACEMENT_LIMIT_BYTES)
    except ReadError as exc:
        return None, printable(exc.message, 400)
    try:
        record = placement_from_json(json.loads(text))
    except (ValueError, RecursionError) as exc:  # PlacementFileError is a ValueError
        return None, f"{path}: not a placement record: {printable(str(exc), 300)}"
    if record.seat != seat.name or record.replica != name:
        return None, (f"{path}: the record of {record.seat}/{record.replica}, not of "
                      f"{seat.name}/{name}")
    why = record_problem(seat, record, state_root)
    if why is not None:
        return None, f"{path}: {why}"
    return record, None


def _without_clashes(records: Sequence[ReplicaPlacement],
                     problems: dict[str, str]) -> list[ReplicaPlacement]:
    """Records that share an index, a port or a GPU with another are all refused: which of them
    tells the truth cannot be known, and two engines on one GPU must never be planned."""
    owners: dict[tuple[str, object], list[str]] = {}
    for record in records:
        keys: list[tuple[str, object]] = [("index", record.index), ("port", record.port)]
        keys += [("GPU", address) for address in record.pci_pair]
        for key in keys:
            owners.setdefault(key, []).append(record.replica)
    kept = []
    for record in records:
        clash = next(((what, value, others) for (what, value), others in owners.items()
                      if record.replica in others and len(others) > 1), None)
        if clash is None:
            kept.append(record)
            continue
        what, value, others = clash
        other = ", ".join(o for o in others if o != record.replica)
        problems[record.replica] = (f"{record.state_dir / FILE_NAME}: {what} {value} is also in "
                                    f"the record of {other}: neither is used")
    return kept


def known_placement(seat: Seat, *, sysfs_root: Path | None, state_root: Path | None,
                    numbering: HipNumbering | None = None) -> KnownPlacement:
    """The replicas of `seat` as far as this host can tell (see the module docstring). A record
    launch saved wins over the resolver's answer for the same replica: it is what runs."""
    recorded = read_recorded(seat, state_root)
    problems = dict(recorded.problems)
    root = state_root if state_root is not None else Path("<no state dir>")
    inventory: Inventory | None = None
    sysfs_why = "no sysfs root given"
    if seat.backend == "rocm" and sysfs_root is not None:
        try:
            inventory = read_node(seat, sysfs_root)
        except RocmseatError as exc:
            sysfs_why = exc.message
    try:
        resolved = resolve(seat, inventory, state_root=root, numbering=numbering,
                           identities=recorded.identities(seat))
        source = "sysfs" if inventory is not None else "seat"
    except NoDeviceError as exc:  # an auto seat and no GPU to pair here
        resolved, source = (), "none"
        if inventory is not None:
            sysfs_why = exc.message
    by_name = {r.replica: r for r in resolved}
    by_name.update({r.replica: r for r in recorded.records})
    unplaced = []
    for name, why in problems.items():
        if name and name not in by_name:
            rule = rule_placement(seat, name, state_root=root, why=f"its {FILE_NAME} is not "
                                  f"used ({why})")
            if rule is not None:
                by_name[name] = rule
                unplaced.append(name)
    if not by_name:
        return KnownPlacement((), "none", (
            f"seat {seat.name} places its replicas from the node's GPUs ([replicas] mode = "
            f"'auto') and this host cannot tell them: {sysfs_why}; and no replica has a "
            f"{FILE_NAME} under {seat_state_dir(root, seat.name)} (none was launched with this "
            "state dir)"), problems, ())
    if not resolved:
        source = "state"
    records = tuple(sorted(by_name.values(), key=lambda r: r.index))
    return KnownPlacement(records, source, "", problems, tuple(sorted(unplaced)))
