"""The placement resolver (pure): a validated seat, the node inventory (None where /sys was not
read), the HIP numbering and each replica's identity in; one frozen `ReplicaPlacement` per
replica out (docs/launch.md, "Placement"). The edge that gathers these inputs and merges what
launch recorded is rocmseat.placement.place.

HIP indices are in the node's global numbering, the one HIP uses with no HIP-level mask
(`HIP_VISIBLE_DEVICES` / `CUDA_VISIBLE_DEVICES`) set; ROCr's own `ROCR_VISIBLE_DEVICES`
selection, when the environment has one, is part of that numbering (rocmseat.hip.numbering).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from rocmseat.errors import ConfigError, NoDeviceError, RocmseatError
from rocmseat.hip.numbering import ROCR_MASK, rocr_selection
from rocmseat.node.inventory import Inventory
from rocmseat.placement.groups import GroupPlan, group_pairs, plan_groups
from rocmseat.placement.record import (
    HIP_ORDER_ASSUMED,
    HIP_ORDER_PROBED,
    HipNumbering,
    NumaBinding,
    ReplicaPlacement,
)
from rocmseat.placement.rules import (
    located,
    replica_cache_dir,
    replica_index,
    replica_port,
    replica_state_dir,
)
from rocmseat.preflight.xgmi import hive_of, link_problem
from rocmseat.seat.model import Seat, check_listen
from rocmseat.seat.naming import planned_port, replica_name
from rocmseat.sysfs.parse import normalize_pci_address
from rocmseat.text import printable

# Set per replica from its pair by launch; a seat that sets one would put every replica on the
# same GPUs (docs/launch.md).
DEVICE_SELECTION_ENV = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                        "GPU_DEVICE_ORDINAL")


# ----- HIP numbering -------------------------------------------------------------------------


def assumed_numbering(inventory: Inventory, rocr_visible: str | None = None) -> HipNumbering:
    """The numbering without a HIP probe. Assumption, stated: ROCr enumerates the KFD topology's
    GPU nodes in PCI bus order; `ROCR_VISIBLE_DEVICES` (from the environment launch runs in)
    then selects and orders them (rocmseat.hip.numbering)."""
    bus_order = sorted(g.pci_address for g in inventory.gpus)
    chosen = rocr_selection(rocr_visible, len(bus_order))
    if chosen is None:
        return HipNumbering({}, HIP_ORDER_ASSUMED,
                            f"{ROCR_MASK}={rocr_visible} names GPUs by UUID: only the HIP probe "
                            "can number them")
    note = "indices by PCI bus order, assumed"
    if rocr_visible is not None:
        note += f", after {ROCR_MASK}={rocr_visible}"
    return HipNumbering({bus_order[k]: i for i, k in enumerate(chosen)}, HIP_ORDER_ASSUMED, note)


def probed_numbering(devices: Sequence[str], rocr_visible: str | None = None) -> HipNumbering:
    """The numbering the HIP probe read with no HIP-level mask: device i is `devices[i]`
    (hipDeviceGetPCIBusId of each index)."""
    by_pci: dict[str, int] = {}
    for index, raw in enumerate(devices):
        address = normalize_pci_address(raw)
        if address is not None and address not in by_pci:
            by_pci[address] = index
    note = "indices from the HIP probe"
    if rocr_visible is not None:
        note += f", under {ROCR_MASK}={rocr_visible}"
    return HipNumbering(by_pci, HIP_ORDER_PROBED, note)


# ----- the resolver --------------------------------------------------------------------------


def resolve(seat: Seat, inventory: Inventory | None, *, state_root: Path,
            numbering: HipNumbering | None = None,
            identities: Mapping[str, Sequence[str]] | None = None,
            ) -> tuple[ReplicaPlacement, ...]:
    """Every replica of `seat` on this node.

    `inventory` None: /sys was not read; a cpu seat and an explicit rocm seat still place (GPU
    facts unknown), an auto rocm seat cannot (NoDeviceError). `numbering` None: assumed from the
    inventory (PCI bus order, no ROCr selection).

    `identities` (auto seats): replica name -> the pair it was given before (the unit's `--pair`,
    else its placement.json). A replica's pair is a stable identity, never re-indexed: a
    replica with an identity keeps that pair, or is placed `lost` (its GPU is gone, or the pair
    is no longer socket-local, or another replica claims the same GPU), and the node's other
    socket-local pairs go, in proposal order, to the lowest indices no identity holds
    (docs/launch.md, "A replica's pair is its identity").
    """
    if seat.backend == "rocm":
        for name in DEVICE_SELECTION_ENV:
            if name in seat.env:
                raise located(seat, ("env", name), "is set per replica by rocmseat from its GPU "
                              "pair; remove it from [env]")
    slots = _slots(seat, inventory, identities or {})
    _check_names(seat, slots)
    if numbering is None and inventory is not None and seat.backend == "rocm":
        numbering = assumed_numbering(inventory)
    records = []
    for index, pair, lost in slots:
        name = replica_name(seat, index)
        if seat.backend == "rocm" and len(pair) != seat.tp:
            raise located(seat, ("tp",), f"tp = {seat.tp} but replica {name} has {len(pair)} "
                          f"GPUs ({', '.join(pair)})")
        indices, source, hip_note = _hip(pair, inventory, numbering)
        records.append(ReplicaPlacement(
            seat=seat.name, replica=name, index=index, host=seat.engine.host,
            port=replica_port(seat, index), pci_pair=pair, gfx_targets=_gfx(pair, inventory),
            hip_indices=indices, hip_index_source=source, hip_note=hip_note,
            numa=_numa(seat, pair, inventory), cache_dir=replica_cache_dir(seat, name),
            state_dir=replica_state_dir(state_root, seat.name, name), lost=lost,
            partitions=_partitions(pair, inventory),
        ))
    check_exporter_port(seat, records)
    return tuple(records)


def rule_placement(seat: Seat, name: str, *, state_root: Path,
                   why: str) -> ReplicaPlacement | None:
    """What the seat's rule alone says of replica `name` (None: the seat has no such replica):
    index, port, host, cache and state dirs; no pair, no node facts (`why` says why not). For
    a replica whose placement.json is unusable on a host that cannot read the node: it is still
    watched on its port, never silently dropped. `lost` is set: nothing may launch it."""
    index = replica_index(seat, name)
    if index is None:
        return None
    return ReplicaPlacement(
        seat=seat.name, replica=name, index=index, host=seat.engine.host,
        port=planned_port(seat, index), pci_pair=(),
        gfx_targets=() if seat.backend == "cpu" else None, hip_indices=None,
        hip_index_source="", hip_note=why, numa=NumaBinding(None, None, (), why),
        cache_dir=replica_cache_dir(seat, name),
        state_dir=replica_state_dir(state_root, seat.name, name), lost=why,
    )


def check_exporter_port(seat: Seat, records: Sequence[ReplicaPlacement]) -> None:
    """The watchdog's exporter may not listen on a replica's port. The seat file alone knows
    only the replicas it names (rocmseat.seat.rules); an auto seat's count is known here."""
    listen = seat.watch.exporter_listen
    if listen is None or listen == "off":
        return
    _, port = check_listen(listen)
    for record in records:
        if record.port == port:
            raise located(seat, ("watch", "exporter_listen"),
                          f"port {port} is replica {record.replica}'s port (serve.port_base "
                          f"{seat.serve.port_base} + {record.index}); pick a port outside "
                          f"{records[0].port}..{records[-1].port}")


def pick(records: Sequence[ReplicaPlacement], replica: str) -> ReplicaPlacement:
    for record in records:
        if record.replica == replica:
            return record
    names = ", ".join(r.replica for r in records) or "none"
    raise ConfigError(f"--replica {printable(replica, 40)!r}: no such replica in this seat "
                      f"(replicas: {names})")


Slot = tuple[int, tuple[str, ...], str]  # index, pair, why lost ("" when placed)


def _slots(seat: Seat, inventory: Inventory | None,
           identities: Mapping[str, Sequence[str]]) -> list[Slot]:
    if seat.backend == "cpu":
        return [(0, (), "")]
    if seat.replicas.mode == "explicit":
        pairs = tuple(tuple(normalize_pci_address(a) or a for a in p)
                      for p in seat.replicas.pairs or ())
        if inventory is not None:
            known = {g.pci_address for g in inventory.gpus}
            for i, pair in enumerate(pairs):
                for address in pair:
                    if address not in known:
                        raise located(seat, ("replicas", "pairs", i),
                                      f"GPU {address} is not in the inventory of "
                                      f"{inventory.sysfs_root} ({', '.join(sorted(known))})")
        return [(i, pair, "") for i, pair in enumerate(pairs)]
    if inventory is None or (not inventory.gpus and not identities):
        where = "" if inventory is None else f" under {inventory.sysfs_root}"
        raise NoDeviceError(f"no AMD GPU{where}: an auto seat's pairs come from the node",
                            hint="run on the GPU node (or pass --sysfs-root), or set "
                            "[replicas] mode = 'explicit'")
    held = _held(seat, inventory, identities)
    claimed = {a for _, pair, _ in held for a in pair}
    free = [g for g in inventory.gpus if g.pci_address not in claimed]
    plan = plan_groups(dataclasses.replace(inventory, gpus=tuple(free)), seat.tp) if free \
        else GroupPlan(seat.tp, (), "none")
    if not held and not plan.groups:
        what = "socket-local GPU pair" if seat.tp == 2 else f"TP{seat.tp} group"
        if plan.rule == "xgmi-hive":
            # the GPUs are there and a link is down: a refused start (exit 1), naming the link
            raise RocmseatError(f"no {what} among {len(inventory.gpus)} GPUs: {plan.why}",
                                hint="run `rocmseat preflight --only xgmi`; serve a smaller "
                                "tp around the link, or mend it")
        raise NoDeviceError(
            f"no {what} among {len(inventory.gpus)} GPUs"
            + (f": {plan.why}" if plan.why else ""),
            hint="run `rocmseat preflight` to see why, or set [replicas] mode = 'explicit'",
        )
    taken = {index for index, _, _ in held}
    slots = list(held)
    index = 0
    for group in plan.groups:
        while index in taken:
            index += 1
        slots.append((index, group, ""))
        taken.add(index)
    return sorted(slots)


def _held(seat: Seat, inventory: Inventory,
          identities: Mapping[str, Sequence[str]]) -> list[Slot]:
    """The replicas with an identity, each on its pair or `lost` with the reason."""
    owners: dict[str, list[str]] = {}
    wanted: list[tuple[int, str, tuple[str, ...]]] = []
    for name, raw in identities.items():
        index = replica_index(seat, name)
        pair = tuple(normalize_pci_address(a) or a for a in raw)
        if index is None or len(pair) != seat.tp:
            continue  # not a replica of this seat: the callers check records before this
        wanted.append((index, name, pair))
        for address in pair:
            owners.setdefault(address, []).append(name)
    slots: list[Slot] = []
    for index, name, pair in sorted(wanted):
        shown = ", ".join(pair)
        missing = [a for a in pair if inventory.gpu(a) is None]
        shared = sorted({o for a in pair for o in owners[a] if o != name})
        sockets = {g.socket for g in (inventory.gpu(a) for a in pair) if g is not None}
        hive = seat.tp > 2 or (seat.tp == 2 and hive_of(inventory))
        broken = [w for a, b in group_pairs(pair) if (w := link_problem(inventory, a, b))] \
            if hive and not missing else []
        lost = ""
        if missing:
            lost = (f"GPU {', '.join(missing)} of replica {name}'s pair ({shown}) is not on "
                    f"this node (no such card under {inventory.sysfs_root})")
        elif shared:
            lost = (f"replica {name}'s pair ({shown}) shares a GPU with replica "
                    f"{', '.join(shared)}: two engines would drive one GPU")
        elif broken:
            lost = (f"replica {name}'s group ({shown}) is no longer all one XGMI hop apart "
                    f"with every link up: {broken[0]}")
        elif not hive and seat.tp == 2 and (len(sockets) != 1 or None in sockets):
            lost = (f"replica {name}'s pair ({shown}) is no longer a socket-local pair of this "
                    "node (sockets " + ", ".join("unknown" if s is None else str(s)
                                                  for s in sorted(sockets, key=str)) + ")")
        slots.append((index, pair, lost))
    return slots


def _check_names(seat: Seat, slots: Sequence[Slot]) -> None:
    names = seat.replicas.names
    count = max((index for index, _, _ in slots), default=-1) + 1
    if names is not None and len(names) < count:
        raise located(seat, ("replicas", "names"),
                      f"[replicas] names lists {len(names)} names for {count} replicas")


def _gfx(pair: tuple[str, ...], inventory: Inventory | None) -> tuple[str, ...] | None:
    if not pair:
        return ()
    if inventory is None:
        return None
    targets = []
    for address in pair:
        gpu = inventory.gpu(address)
        if gpu is None or gpu.gfx_target is None:
            return None
        targets.append(gpu.gfx_target)
    return tuple(targets)


def _partitions(pair: tuple[str, ...], inventory: Inventory | None) -> tuple[str, ...] | None:
    """Each GPU's "COMPUTE/MEMORY" partition modes, or None unless every GPU reports both."""
    if not pair or inventory is None:
        return None
    modes = []
    for address in pair:
        gpu = inventory.gpu(address)
        part = gpu.amdgpu.partition if gpu is not None else None
        if part is not None and part.errors:
            # never the arch of an unpartitioned GPU for one whose mode cannot be read: the
            # key says it (preflight's xgmi.partition says why)
            modes.append("UNKNOWN/UNKNOWN")
            continue
        if part is None or part.compute is None or part.memory is None:
            return None
        modes.append(f"{part.compute}/{part.memory}")
    return tuple(modes)


def _hip(pair: tuple[str, ...], inventory: Inventory | None,
         numbering: HipNumbering | None) -> tuple[tuple[int, ...] | None, str, str]:
    if not pair:
        return (), "", ""
    if numbering is None:
        return None, "", ("the node's GPUs were not read here" if inventory is None
                          else "no HIP numbering")
    split = [a for a in pair if inventory is not None and (g := inventory.gpu(a)) is not None
             and g.amdgpu.partition is not None
             and g.amdgpu.partition.compute not in (None, "SPX")]
    if split and numbering.source != HIP_ORDER_PROBED:
        # each XCP partition is a device of its own (KFD lists one node per partition): one
        # index per PCI function in bus order is wrong; only HIP's own numbering will do
        return None, numbering.source, (f"GPU {split[0]} is partitioned (compute "
                                        "partition not SPX): HIP numbers each partition as a "
                                        "device; only the HIP probe can number them")
    missing = [a for a in pair if a not in numbering.by_pci]
    if missing:
        seen = ", ".join(sorted(numbering.by_pci, key=numbering.by_pci.__getitem__)) or "none"
        return None, numbering.source, (f"HIP does not see {', '.join(missing)} "
                                        f"({numbering.note}; HIP sees: {seen})")
    return tuple(numbering.by_pci[a] for a in pair), numbering.source, numbering.note


def _numa(seat: Seat, pair: tuple[str, ...], inventory: Inventory | None) -> NumaBinding:
    if seat.backend == "cpu":
        return NumaBinding(None, None, (), "backend cpu: no GPU to be near")
    if inventory is None:
        return NumaBinding(None, None, (), "the node's NUMA layout was not read here")
    gpus = [inventory.gpu(a) for a in pair]
    nodes = {g.numa_node for g in gpus if g is not None}
    if len(nodes) != 1 or None in nodes:
        shown = ", ".join("unknown" if n is None else str(n) for n in sorted(nodes, key=str))
        what = "pair" if len(pair) == 2 else "group"
        if None not in nodes:
            return NumaBinding(None, None, (), f"the {what} spans NUMA nodes {shown} (no one "
                               "node to bind it to)")
        return NumaBinding(None, None, (),
                           f"the {what}'s GPUs do not share one known NUMA node ({shown}): "
                           "not bound")
    node_id = next(iter(nodes))
    assert node_id is not None
    node = next((n for n in inventory.numa_nodes if n.node_id == node_id), None)
    cpulist = node.cpulist if node is not None else None
    cpus = tuple(node.cpus or ()) if node is not None else ()
    return NumaBinding(node_id, cpulist, cpus, "")
