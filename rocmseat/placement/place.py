"""The one entry point of the placement room: `place(seat, ...)` answers, for a seat on this
node, every replica's name, index, port, PCI pair, HIP indices, NUMA binding, cache dir, state
dir and config-key arch (docs/launch.md, "Placement"). Launch, systemd, key, cache-audit, watch
and the speculation gate all ask here and never derive any of those fields themselves.

The inputs: the node's inventory (rocm seats; read from the sysfs root), the HIP numbering (the
probe's, or assumed from PCI bus order after the environment's ROCR_VISIBLE_DEVICES), and each
replica's identity: the pair it was given before (the unit's `--pair`, else the placement.json
launch recorded, rocmseat.placement.recorded).

The one merge rule: the resolver places every replica on the node, each replica with an
identity on its pair (rocmseat.placement.resolve). Where the node was read, its answer is the
record of each replica it places; where it was not (a monitoring host, a container, a cpu seat),
the record launch saved stands for its replica. A replica whose record is unusable and that
the node does not place is known by the seat's rule alone (its port, its dirs, no pair, `lost`:
nothing launches it). `require_node` (launch, systemd) makes a rocm seat whose node shows no
GPU an error; the readers (key, cache-audit, watch) say why instead (`Placement.why`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rocmseat.errors import ConfigError, NoDeviceError, RocmseatError
from rocmseat.hip.numbering import ROCR_MASK
from rocmseat.node.inventory import Inventory
from rocmseat.placement.record import HipNumbering, ReplicaPlacement, key_arch
from rocmseat.placement.recorded import Recorded, read_recorded
from rocmseat.placement.resolve import assumed_numbering, pick, resolve, rule_placement
from rocmseat.placement.rules import known_names, replica_index, seat_state_dir
from rocmseat.seat.model import Seat
from rocmseat.statedir import PLACEMENT_FILE
from rocmseat.text import printable


@dataclass(frozen=True, slots=True)
class Placement:
    seat: Seat
    state_root: Path
    inventory: Inventory | None  # None: the node was not read (cpu seat, or not readable here)
    records: tuple[ReplicaPlacement, ...]  # by index
    source: str  # "sysfs" | "state" | "seat" (an explicit or cpu seat, /sys not read) | "none"
    why: str  # when records is empty: why nothing is known, in words
    # replica -> the pair that is its identity (auto seats: the unit's --pair, else the
    # placement.json it ran with); the resolver keeps each replica on it
    identities: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # replica dir -> why its placement.json was not used ("" for the seat dir itself)
    problems: Mapping[str, str] = field(default_factory=dict)
    # replicas known only by the seat's rule (their record unusable, the node not placing them)
    unplaced: tuple[str, ...] = ()
    recorded: Recorded = field(default_factory=lambda: Recorded((), {}))

    def get(self, replica: str) -> ReplicaPlacement | None:
        return next((r for r in self.records if r.replica == replica), None)

    def pick(self, replica: str) -> ReplicaPlacement:
        """The record of `replica`; ConfigError listing the replicas when there is none."""
        return pick(self.records, replica)

    def known(self, replica: str) -> ReplicaPlacement | None:
        """The record of `replica`, or None where the seat can have it but this host cannot
        place it (an auto seat, the node not readable, nothing recorded); ConfigError naming
        the seat file when the seat can have no replica of that name."""
        record = self.get(replica)
        if record is None and (self.records or replica_index(self.seat, replica) is None):
            listed = ", ".join(r.replica for r in self.records) or known_names(self.seat)
            raise ConfigError(f"{self.seat.source_path or self.seat.name}: seat {self.seat.name} "
                              f"has no replica {printable(replica, 40)!r} ({listed})")
        return record

    def arch(self, replica: str) -> tuple[str | None, str]:
        """The GPU-arch input of the replica's config key, or None and why (key_arch)."""
        return key_arch(self.seat, self.get(replica),
                        self.why or self.problems.get(replica, ""))

    def renumbered(self, numbering: HipNumbering) -> Placement:
        """The same placement with another HIP numbering (the probe's: launch)."""
        return _merge(self.seat, self.inventory, self.state_root, numbering=numbering,
                      identities=self.identities, recorded=self.recorded, why=self.why,
                      require_node=True)


def seat_roots(seat: Seat, sysfs_root: Path | None,
               state_dir: Path | None) -> tuple[Path | None, Path]:
    """The roots a command about `seat` reads: the sysfs root (a rocm seat's: the option, else
    this node's, rocmseat.sysfs.fs.default_sysfs_root; a cpu seat reads no /sys) and the state
    dir (the option, else the seat's state_dir, else the default: rocmseat.state.state_root)."""
    from rocmseat.state import state_root
    from rocmseat.sysfs import fs

    sysfs = None
    if seat.backend == "rocm":
        sysfs = sysfs_root if sysfs_root is not None else fs.default_sysfs_root()
    return sysfs, state_root(state_dir, seat.state_dir)


def read_node(seat: Seat, sysfs_root: Path | None) -> Inventory | None:
    """The node inventory a rocm seat needs (None for cpu, or without a sysfs root);
    NoDeviceError when it shows no GPU."""
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


def place(seat: Seat, *, sysfs_root: Path | None, state_root: Path,
          environ: Mapping[str, str] | None = None, numbering: HipNumbering | None = None,
          pin: tuple[str, ...] | None = None, replica: str | None = None,
          require_node: bool = False) -> Placement:
    """Every replica of `seat` on this node (see the module docstring).

    `pin`: the pair the unit of `replica` was rendered with (`--pair`): that replica's identity
    on an auto seat. Without `numbering`, HIP indices are assumed from PCI bus order after
    `environ`'s ROCR_VISIBLE_DEVICES. `require_node`: a rocm seat's node must be readable and
    place its replicas (NoDeviceError otherwise)."""
    recorded = read_recorded(seat, state_root)
    identities = recorded.identities(seat)
    if pin is not None and replica is not None and seat.replicas.mode == "auto":
        identities[replica] = pin
    inventory: Inventory | None = None
    why = "no sysfs root given" if seat.backend == "rocm" and sysfs_root is None else ""
    try:
        inventory = read_node(seat, sysfs_root)
    except RocmseatError as exc:
        if require_node:
            raise
        why = exc.message
    if numbering is None and inventory is not None:
        numbering = assumed_numbering(inventory, (environ or {}).get(ROCR_MASK))
    return _merge(seat, inventory, state_root, numbering=numbering, identities=identities,
                  recorded=recorded, why=why, require_node=require_node)


def _merge(seat: Seat, inventory: Inventory | None, state_root: Path, *,
           numbering: HipNumbering | None, identities: Mapping[str, tuple[str, ...]],
           recorded: Recorded, why: str, require_node: bool) -> Placement:
    try:
        resolved = resolve(seat, inventory, state_root=state_root, numbering=numbering,
                           identities=identities)
    except NoDeviceError as exc:  # an auto seat and no GPU pair to place here
        if require_node:
            raise
        resolved = ()
        why = why or exc.message
    by_name = {r.replica: r for r in resolved}
    for record in recorded.records:
        if inventory is None or record.replica not in by_name:
            by_name[record.replica] = record
    unplaced = []
    for name, problem in recorded.problems.items():
        if name and name not in by_name:
            rule = rule_placement(seat, name, state_root=state_root,
                                  why=f"its {PLACEMENT_FILE} is not used ({problem})")
            if rule is not None:
                by_name[name] = rule
                unplaced.append(name)
    records = tuple(sorted(by_name.values(), key=lambda r: r.index))
    if not records:
        why = (f"seat {seat.name} places its replicas from the node's GPUs ([replicas] mode = "
               f"'auto') and this host cannot tell them: {why or 'no sysfs root given'}; and no "
               f"replica has a {PLACEMENT_FILE} under {seat_state_dir(state_root, seat.name)} "
               "(none was launched with this state dir)")
        source = "none"
    else:
        why = ""
        source = "state" if not resolved else "sysfs" if inventory is not None else "seat"
    return Placement(seat, state_root, inventory, records, source, why, dict(identities),
                     dict(recorded.problems), tuple(sorted(unplaced)), recorded)
