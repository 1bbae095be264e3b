"""The placement of a seat's replicas: the one answer to "which replicas exist, on which GPUs,
ports, caches and state dirs" (docs/launch.md, "Placement"; docs/architecture.md, "Data flow").

Pure: a validated seat, the node inventory (None where /sys was not read) and the HIP numbering
in; one frozen `ReplicaPlacement` per replica out. Launch, key, cache-audit, watch targets and the
systemd units read these records and never derive a name, port, pair, HIP index, NUMA node, cache
dir or state dir themselves. Launch saves the record it ran with as `placement.json`
(`rocmseat.placement/v1`) in the replica's state dir; `placement_json` / `placement_from_json`
are the two directions of that file's text (rocmseat.launch.placed reads and writes it).

HIP indices are in the node's global numbering, the one HIP uses with no HIP-level mask
(`HIP_VISIBLE_DEVICES` / `CUDA_VISIBLE_DEVICES`) set; ROCr's own `ROCR_VISIBLE_DEVICES`
selection, when the environment has one, is part of that numbering (rocmseat.hip.numbering).
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.errors import ConfigError, NoDeviceError
from rocmseat.hip.numbering import ROCR_MASK, rocr_selection
from rocmseat.node.inventory import Inventory
from rocmseat.seat.locate import Loc, format_loc, locate, printable
from rocmseat.seat.model import Seat, check_listen, is_host
from rocmseat.sysfs.parse import normalize_pci_address

SCHEMA = "rocmseat.placement/v1"
FILE_NAME = "placement.json"
HIP_ORDER_ASSUMED = "pci-bus-order"
HIP_ORDER_PROBED = "hip-probe"
MAX_PORT = 65535
# Set per replica from its pair by launch; a seat that sets one would put every replica on the
# same GPUs (docs/launch.md).
DEVICE_SELECTION_ENV = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES",
                        "GPU_DEVICE_ORDINAL")
_WILDCARD_HOSTS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}
# The seat's other units are rocmseat-<seat>-watch.service and -preflight.service: a replica of
# either name would be rendered onto (and replaced by) that unit (docs/seat.md, [replicas]).
RESERVED_REPLICA_NAMES = ("watch", "preflight")
_DEFAULT_NAME = re.compile(r"r(0|[1-9][0-9]{0,4})")
# A gfx target as the KFD topology's gfx_target_version prints (gfx1201, gfx942, gfx90a).
_GFX = re.compile(r"gfx[0-9a-f]{3,8}")


@dataclass(frozen=True, slots=True)
class NumaBinding:
    node: int | None  # the pair's common NUMA node; None: not bound (note says why)
    cpulist: str | None  # that node's cpulist text
    cpus: tuple[int, ...]  # its CPUs (empty when unknown)
    note: str  # why not bound, in words ("" when bound)


@dataclass(frozen=True, slots=True)
class HipNumbering:
    """PCI address -> HIP device index with no HIP-level mask (the node's global numbering)."""

    by_pci: Mapping[str, int]
    source: str  # HIP_ORDER_ASSUMED | HIP_ORDER_PROBED
    note: str  # where the numbers come from, in words


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    seat: str
    replica: str
    index: int  # position in the seat's replica list: the port and the name follow from it
    host: str  # engine.host as the seat says it (the engine listens there)
    port: int
    pci_pair: tuple[str, ...]  # empty for backend cpu
    gfx_targets: tuple[str, ...] | None  # of the pair, in order; None: not known here
    hip_indices: tuple[int, ...] | None  # global numbering; None: not known (hip_note says why)
    hip_index_source: str  # HIP_ORDER_ASSUMED | HIP_ORDER_PROBED | "" (cpu, or unknown)
    hip_note: str
    numa: NumaBinding
    cache_dir: Path
    state_dir: Path  # <state dir>/seats/<seat>/<replica>
    # Why this replica cannot start on this node ("" when it can): its pair, a stable identity
    # (the unit's --pair, else its placement.json), lost a GPU or is no longer socket-local.
    # Never written to placement.json: launch refuses such a replica before it saves one.
    lost: str = ""

    @property
    def base_url(self) -> str:
        """http://HOST:PORT the replica answers on (readiness probes, /metrics)."""
        return http_base(self.host, self.port)


# ----- one rule per fact ---------------------------------------------------------------------


def seat_state_dir(state_root: Path, seat: str) -> Path:
    """`<state dir>/seats/<seat>`: one dir per replica below it."""
    return state_root / "seats" / seat


def replica_state_dir(state_root: Path, seat: str, replica: str) -> Path:
    """`<state dir>/seats/<seat>/<replica>`: startup reports, placement.json, the launch lock."""
    return seat_state_dir(state_root, seat) / replica


def replica_cache_dir(seat: Seat, replica: str) -> Path:
    """`<cache_root>/<replica>`: the replica's live cache (docs/cache.md, "The store")."""
    return seat.cache_root / replica


def replica_name(seat: Seat, index: int) -> str:
    names = seat.replicas.names
    return names[index] if names is not None and index < len(names) else f"r{index}"


def replica_index(seat: Seat, name: str) -> int | None:
    """The index a replica called `name` has in `seat` by the naming rule (`[replicas] names[i]`,
    else `r<i>`), or None when the seat can have no replica of that name: not in `names`, not
    `r<i>` in canonical spelling, past the seat's pairs (explicit) or its one replica (cpu), or
    past the last port. Whether the node has that many pairs is the resolver's question."""
    names = seat.replicas.names
    if names is not None:
        if name not in names:
            return None
        index = names.index(name)
    else:
        match = _DEFAULT_NAME.fullmatch(name)
        if match is None:
            return None
        index = int(match.group(1))
    if seat.backend == "cpu" and index != 0:
        return None
    if seat.replicas.mode == "explicit" and index >= len(seat.replicas.pairs or ()):
        return None
    if planned_port(seat, index) > MAX_PORT:
        return None
    return index


def planned_port(seat: Seat, index: int) -> int:
    """The one port rule: replica i listens on serve.port_base + i (unchecked; see replica_port)."""
    return seat.serve.port_base + index


def replica_port(seat: Seat, index: int) -> int:
    """Replica i's port; past 65535 is the seat's error, located."""
    port = planned_port(seat, index)
    if port > MAX_PORT:
        raise located(seat, ("serve", "port_base"),
                      f"replica {replica_name(seat, index)} (index {index}) would listen on port "
                      f"{port}: {seat.serve.port_base} + {index} is past {MAX_PORT}",
                      hint="lower serve.port_base so every replica's port fits")
    return port


def located(seat: Seat, loc: Loc, why: str, hint: str | None = None) -> ConfigError:
    """A ConfigError naming the seat file, the key's line and the key (from the text the seat
    was parsed from: no file is read again)."""
    where = str(seat.source_path or seat.name)
    if seat.source_text is not None:
        line = locate(seat.source_text, loc)
        if line is not None:
            where = f"{where}:{line}"
    return ConfigError(f"{where}: key '{format_loc(loc)}': {why}", hint=hint)


def probe_host(host: str) -> str:
    """The host a client connects to for `engine.host`: the loopback for a wildcard, else the
    host itself when it is an IP literal or a DNS name (the seat loader's rule,
    rocmseat.seat.model.is_host); ValueError for anything else: a URL built from it would point
    elsewhere ("127.0.0.1@evil.example/#")."""
    connect = _WILDCARD_HOSTS.get(host, host)
    if not is_host(connect):
        raise ValueError(f"{host!r:.80} is not a host name or an IP address")
    return connect


def http_base(host: str, port: int) -> str:
    """`http://HOST:PORT` with an IPv6 literal in brackets (RFC 3986 section 3.2.2)."""
    connect = probe_host(host)
    if not 0 < port <= MAX_PORT:
        raise ValueError(f"port {port} is outside 1..{MAX_PORT}")
    shown = f"[{connect}]" if ":" in connect else connect
    return f"http://{shown}:{port}"


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
    raise ConfigError(f"--replica {replica!r}: no such replica in this seat (replicas: {names})")


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
    from rocmseat.preflight.pairs import propose_pairs

    proposed = propose_pairs(dataclasses.replace(inventory, gpus=tuple(free))) if free else ()
    if not held and not proposed:
        raise NoDeviceError(
            f"no socket-local GPU pair among {len(inventory.gpus)} GPUs",
            hint="run `rocmseat preflight` to see why, or set [replicas] mode = 'explicit'",
        )
    taken = {index for index, _, _ in held}
    slots = list(held)
    index = 0
    for proposal in proposed:
        while index in taken:
            index += 1
        slots.append((index, proposal.addresses(), ""))
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
        lost = ""
        if missing:
            lost = (f"GPU {', '.join(missing)} of replica {name}'s pair ({shown}) is not on "
                    f"this node (no such card under {inventory.sysfs_root})")
        elif shared:
            lost = (f"replica {name}'s pair ({shown}) shares a GPU with replica "
                    f"{', '.join(shared)}: two engines would drive one GPU")
        elif len(sockets) != 1 or None in sockets:
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


def _hip(pair: tuple[str, ...], inventory: Inventory | None,
         numbering: HipNumbering | None) -> tuple[tuple[int, ...] | None, str, str]:
    if not pair:
        return (), "", ""
    if numbering is None:
        return None, "", ("the node's GPUs were not read here" if inventory is None
                          else "no HIP numbering")
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
        return NumaBinding(None, None, (),
                           f"the pair's GPUs do not share one known NUMA node ({shown}): "
                           "not bound")
    node_id = next(iter(nodes))
    assert node_id is not None
    node = next((n for n in inventory.numa_nodes if n.node_id == node_id), None)
    cpulist = node.cpulist if node is not None else None
    cpus = tuple(node.cpus or ()) if node is not None else ()
    return NumaBinding(node_id, cpulist, cpus, "")


# ----- placement.json (text <-> record) ------------------------------------------------------


def placement_json(record: ReplicaPlacement) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "seat": record.seat,
        "replica": record.replica,
        "index": record.index,
        "host": record.host,
        "port": record.port,
        "pci_pair": list(record.pci_pair),
        "gfx_targets": None if record.gfx_targets is None else list(record.gfx_targets),
        "hip_indices": None if record.hip_indices is None else list(record.hip_indices),
        "hip_index_source": record.hip_index_source,
        "hip_note": record.hip_note,
        "numa": {"node": record.numa.node, "cpulist": record.numa.cpulist,
                 "cpus": list(record.numa.cpus), "note": record.numa.note},
        "cache_dir": str(record.cache_dir),
        "state_dir": str(record.state_dir),
    }


class PlacementFileError(ValueError):
    """placement.json text that is not a placement record (the message names the key)."""


def placement_from_json(doc: Any) -> ReplicaPlacement:
    """The record of a parsed placement.json; PlacementFileError naming the first bad key.
    Hostile input: every field is type-checked, ranges too; nothing is guessed."""
    if not isinstance(doc, dict):
        raise PlacementFileError("not a JSON object")
    if doc.get("schema") != SCHEMA:
        raise PlacementFileError(f"key 'schema': expected {SCHEMA!r}")
    numa = _get(doc, "numa", dict)
    pair = tuple(_address(a, "pci_pair") for a in _get(doc, "pci_pair", list))
    return ReplicaPlacement(
        seat=_name(_get(doc, "seat", str), "seat"),
        replica=_name(_get(doc, "replica", str), "replica"),
        index=_int(_get(doc, "index", int), "index", 0, 1 << 16),
        host=_host(_get(doc, "host", str)),
        port=_int(_get(doc, "port", int), "port", 1, MAX_PORT),
        pci_pair=pair,
        gfx_targets=_gfx_targets(doc),
        hip_indices=_opt_ints(doc, "hip_indices"),
        hip_index_source=_choice(_get(doc, "hip_index_source", str), "hip_index_source",
                                 ("", HIP_ORDER_ASSUMED, HIP_ORDER_PROBED)),
        hip_note=_text(_get(doc, "hip_note", str), "hip_note"),
        numa=NumaBinding(
            node=None if numa.get("node") is None else _int(_get(numa, "node", int), "numa.node",
                                                            0, 1 << 16),
            cpulist=None if numa.get("cpulist") is None else _text(_get(numa, "cpulist", str),
                                                                   "numa.cpulist"),
            cpus=tuple(_int(c, "numa.cpus", 0, 1 << 20) for c in _get(numa, "cpus", list)),
            note=_text(_get(numa, "note", str), "numa.note"),
        ),
        cache_dir=_path(_get(doc, "cache_dir", str), "cache_dir"),
        state_dir=_path(_get(doc, "state_dir", str), "state_dir"),
    )


def _get(doc: Mapping[str, Any], key: str, kind: type) -> Any:
    value = doc.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise PlacementFileError(f"key {key!r}: expected {kind.__name__}, not {value!r:.60}")
    return value


def _int(value: Any, key: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise PlacementFileError(f"key {key!r}: {value!r:.60} is not an integer in "
                                 f"{low}..{high}")
    return value


def _text(value: str, key: str) -> str:
    """Free text of a record (notes, cpulist): at most 4,096 characters, none of them a control
    or format character (C0, DEL, C1, U+2028/9, bidi overrides such as U+202E)."""
    if len(value) > 4096:
        raise PlacementFileError(f"key {key!r}: {len(value):,} characters; the limit is 4,096")
    bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None:
        raise PlacementFileError(f"key {key!r}: holds the control or format character "
                                 f"U+{ord(bad):04X}")
    return value


def _name(value: str, key: str) -> str:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,63}", value):
        raise PlacementFileError(f"key {key!r}: {value!r:.60} is not a seat or replica name")
    return value


def _host(value: str) -> str:
    try:
        probe_host(value)
    except ValueError as exc:
        raise PlacementFileError(f"key 'host': {exc}") from None
    return value


def _address(value: Any, key: str) -> str:
    address = normalize_pci_address(value) if isinstance(value, str) else None
    if address is None:
        raise PlacementFileError(f"key {key!r}: {value!r:.60} is not a PCI address")
    return address


def _choice(value: str, key: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise PlacementFileError(f"key {key!r}: {value!r:.60} is not one of {allowed}")
    return value


def _path(value: str, key: str) -> Path:
    _text(value, key)
    if not value.startswith("/") or "\0" in value:
        raise PlacementFileError(f"key {key!r}: {value!r:.60} is not an absolute path")
    return Path(value)


def _gfx_targets(doc: Mapping[str, Any]) -> tuple[str, ...] | None:
    """gfx targets become the config key's `gpu_arch` and reach every report: only the shape
    the KFD topology gives (`gfx1201`), never free text."""
    if doc.get("gfx_targets") is None:
        return None
    items = _get(doc, "gfx_targets", list)
    if len(items) > 64:
        raise PlacementFileError(f"key 'gfx_targets': {len(items)} entries")
    for item in items:
        if not isinstance(item, str) or not _GFX.fullmatch(item):
            raise PlacementFileError(f"key 'gfx_targets': {_shown(item)} is not a gfx target "
                                     "such as 'gfx1201'")
    return tuple(items)


def _shown(value: Any) -> str:
    return printable(repr(value), 60)


def record_problem(seat: Seat, record: ReplicaPlacement, state_root: Path) -> str | None:
    """Why a recorded placement disagrees with the seat's own placement rule (None: it agrees).

    A placement.json is hostile input like any other: its replica must be one the seat can
    have, and its index, host, port, cache dir, state dir and pair length are what the rule
    gives that replica (an explicit seat: its pair too). Only the pair of an auto seat and the
    node facts (HIP indices, NUMA, gfx) are the record's own to say."""
    name = record.replica
    index = replica_index(seat, name)
    if record.seat != seat.name:
        return f"the record of seat {record.seat}, not of {seat.name}"
    if index is None:
        known = ", ".join(seat.replicas.names) if seat.replicas.names is not None else "r0, r1, ..."
        return f"seat {seat.name} has no replica {name!r} ({known})"
    expected: list[tuple[str, Any, Any]] = [
        ("index", record.index, index),
        ("host", record.host, seat.engine.host),
        ("port", record.port, planned_port(seat, index)),
        ("cache_dir", str(record.cache_dir), str(replica_cache_dir(seat, name))),
        ("state_dir", str(record.state_dir), str(replica_state_dir(state_root, seat.name, name))),
        ("pci_pair length", len(record.pci_pair), seat.tp if seat.backend == "rocm" else 0),
    ]
    if seat.backend == "rocm" and seat.replicas.mode == "explicit":
        pairs = seat.replicas.pairs or ()
        pair = tuple(normalize_pci_address(a) or a for a in pairs[index])
        expected.append(("pci_pair", list(record.pci_pair), list(pair)))
    for key, found, rule in expected:
        if found != rule:
            return (f"key {key!r} is {printable(repr(found), 120)} but the seat gives replica "
                    f"{name} {printable(repr(rule), 120)}")
    return None


def _opt_ints(doc: Mapping[str, Any], key: str) -> tuple[int, ...] | None:
    if doc.get(key) is None:
        return None
    return tuple(_int(v, key, 0, 1 << 16) for v in _get(doc, key, list))
