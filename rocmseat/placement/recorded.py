"""The placement launch recorded: `<replica state dir>/placement.json` (`rocmseat.placement/v1`),
written by launch once a replica passed its gate, read back by every reader of the placement
(rocmseat.placement.place).

A placement.json is hostile input and decides which GPUs a replica gets: it is read as a state
file (rocmseat.safeio.read_trusted_state: no link, owned by root or the reader, not writable by
group or others, up to the state dir), parsed by the strict model of
rocmseat.placement.record, and cross-checked against the seat's own rule (`record_problem`).
A record that fails any of that is not used; the replica it names is reported with the reason,
one line, and nothing else is held up by it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmseat.errors import ReadError
from rocmseat.placement.record import (
    SCHEMA,
    PlacementFileError,
    ReplicaPlacement,
    parse_placement,
    placement_doc,
    record_problem,
)
from rocmseat.placement.rules import replica_index, seat_state_dir
from rocmseat.seat.model import Seat
from rocmseat.statedir import PLACEMENT, SEAT_DIR, Document, ReplicaDir, StateDir
from rocmseat.text import printable

PLACEMENT_LIMIT_BYTES = 64 << 10  # a record is ~1 KiB


def _parse(text: str, shown: str) -> ReplicaPlacement:
    try:
        return parse_placement(text)
    except PlacementFileError as exc:
        raise PlacementFileError(f"{shown}: not a placement record: "
                                 f"{printable(str(exc), 300)}") from None


# the placement record (rocmseat.placement.record's strict model); mode 0644: no argv, no env
PLACEMENT_RECORD = Document(PLACEMENT, SCHEMA, _parse, limit_bytes=PLACEMENT_LIMIT_BYTES)


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


def write_recorded(record: ReplicaPlacement) -> Path:
    """Save the record launch runs with (atomic; no argv, no environment: mode 0644), in the
    state dir its own state_dir lies in."""
    return StateDir.above(record.state_dir).write(PLACEMENT_RECORD, placement_doc(record),
                                                  seat=record.seat, replica=record.replica)


def read_recorded(seat: Seat, state_root: Path | None) -> Recorded:
    """The placement.json of every replica of `seat` under `state_root` that is a record of
    that replica agreeing with the seat's rule, and per replica dir whose file is not used
    (unreadable, a link, not a record, another seat's or replica's, against the rule, or
    sharing a GPU with another record) one line why."""
    if state_root is None:
        return Recorded((), {})
    seat_dir = seat_state_dir(state_root, seat.name)
    names, problem = _replica_dirs(seat_dir, state_root, seat.name)
    if problem is not None:
        return Recorded((), {"": problem})
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
        record, why = _read_one(seat, state_root, name)
        if why is not None:
            problems[name] = why
        elif record is not None:
            found.append(record)
    records = _without_clashes(found, problems)
    return Recorded(tuple(sorted(records, key=lambda r: r.index)), problems)


def _replica_dirs(seat_dir: Path, state_root: Path, seat: str) -> tuple[list[str], str | None]:
    """The names in the seat's state dir (none when there is no dir), or one line why they
    cannot be listed."""
    for linked in (seat_dir.parent, seat_dir):
        if linked.is_symlink():
            return [], f"{linked}: is a symlink; no placement.json is read through one"
    try:
        return StateDir(state_root).names(SEAT_DIR, seat=seat) or [], None
    except ReadError as exc:  # a link on the way (UntrustedState)
        return [], printable(exc.message, 400)
    except OSError as exc:
        return [], f"{seat_dir}: {exc.strerror or exc}"


def _read_one(seat: Seat, state_root: Path,
              name: str) -> tuple[ReplicaPlacement | None, str | None]:
    """(record, None), (None, why), or (None, None) when the dir holds no placement.json."""
    state = StateDir(state_root)
    path = state.path(PLACEMENT_RECORD, seat=seat.name, replica=name)
    try:
        record = state.read(PLACEMENT_RECORD, seat=seat.name, replica=name)
    except ReadError as exc:  # UntrustedState is one
        return None, printable(exc.message, 400)
    except PlacementFileError as exc:
        return None, str(exc)
    if record is None:
        return None, None
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
        problems[record.replica] = (f"{ReplicaDir(record.state_dir).placement}: {what} {value} "
                                    f"is also in the record of {other}: neither is used")
    return kept
