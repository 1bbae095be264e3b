"""The replica record: what the placement answers for one replica, and its file.

`ReplicaPlacement` is the frozen answer (docs/launch.md, "Placement"). Launch saves the record
it ran with as `placement.json` (`rocmseat.placement/v1`) in the replica's state dir:
`placement_json` writes that document, `parse_placement` reads it back through a strict
pydantic model (every field typed and bounded, no coercion, no unknown key), and
`record_problem` checks a record read back against the seat's own rule. `key_arch` is the one
rule for the GPU-arch input of a replica's config key.
"""

from __future__ import annotations

import platform
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from rocmseat import jsonio
from rocmseat.placement.rules import (
    MAX_PORT,
    http_base,
    known_names,
    probe_host,
    replica_cache_dir,
    replica_index,
    replica_state_dir,
)
from rocmseat.seat.model import Seat, is_replica_name, is_seat_name
from rocmseat.seat.naming import planned_port
from rocmseat.sysfs.parse import normalize_pci_address
from rocmseat.text import printable

SCHEMA = "rocmseat.placement/v1"
HIP_ORDER_ASSUMED = "pci-bus-order"
HIP_ORDER_PROBED = "hip-probe"
# A gfx target as the KFD topology's gfx_target_version prints (gfx1201, gfx942, gfx90a).
_GFX = re.compile(r"gfx[0-9a-f]{3,8}")
_TEXT_LIMIT = 4096


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
    # each GPU's partition modes, "SPX/NPS1" (rocmseat.sysfs.partition), in pair order; None:
    # the GPUs have none (Radeon, MI200) or were not read. Part of the key's arch (key_arch).
    partitions: tuple[str, ...] | None = None

    @property
    def base_url(self) -> str:
        """http://HOST:PORT the replica answers on (readiness probes, /metrics)."""
        return http_base(self.host, self.port)


# ----- the config key's arch input -----------------------------------------------------------


def cpu_arch(machine: str | None = None) -> str:
    """The arch of a cpu-backend replica: "cpu-<machine>" (x86_64, aarch64 ...)."""
    return f"cpu-{machine or platform.machine()}"


def key_arch(seat: Seat, record: ReplicaPlacement | None,
             unknown_why: str = "") -> tuple[str | None, str]:
    """The GPU-arch input of the replica's config key, or None and why: "cpu-<machine>" for a
    cpu seat, else the gfx target(s) of the pair its placement records ("+"-joined, sorted,
    unique). The one rule: `key`, `launch` and `cache-audit` all take the arch from here."""
    if seat.backend == "cpu":
        return cpu_arch(), ""
    if record is None:
        return None, unknown_why or "the replica's placement is not known here"
    if record.gfx_targets is None and record.lost and not record.pci_pair:
        return None, record.lost  # known by the seat's rule only (rule_placement)
    if not record.gfx_targets:
        return None, (f"the gfx target of replica {record.replica}'s GPUs "
                      f"({', '.join(record.pci_pair)}) is not known here: no readable GPU "
                      "inventory and no recorded one")
    if record.partitions is not None and len(record.partitions) == len(record.gfx_targets):
        # A partitioned Instinct GPU is another device per mode: CPX makes each XCD a device
        # of its own (amdgpu_xcp.c), NPS4 splits its memory; the graphs are compiled for
        # that device. "gfx942@SPX/NPS1" -> "gfx942@CPX/NPS4" moves the cache aside.
        return "+".join(sorted({f"{gfx}@{part}" for gfx, part in
                                zip(record.gfx_targets, record.partitions, strict=True)})), ""
    return "+".join(sorted(set(record.gfx_targets))), ""


# ----- placement.json ------------------------------------------------------------------------


def placement_json(record: ReplicaPlacement) -> str:
    """The text of the record's placement.json (strict JSON, rocmseat.jsonio)."""
    return jsonio.dumps(placement_doc(record)) + "\n"


def placement_doc(record: ReplicaPlacement) -> dict[str, Any]:
    """The record's placement.json as a JSON object."""
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
        **({} if record.partitions is None else {"partitions": list(record.partitions)}),
    }


_PARTITION = re.compile(r"(SPX|DPX|TPX|QPX|CPX|UNKNOWN)/(NPS1|NPS2|NPS4|NPS8|UNKNOWN)")


def _partition(value: str) -> str:
    if not _PARTITION.fullmatch(value):
        raise ValueError(f"not a partition mode pair like 'SPX/NPS1': {value!r:.40}")
    return value


class PlacementFileError(ValueError):
    """placement.json text that is not a placement record (the message names the key)."""


def _text(value: str) -> str:
    """Free text of a record (notes, cpulist): at most 4,096 characters, none of them a control
    or format character (C0, DEL, C1, U+2028/9, bidi overrides such as U+202E)."""
    if len(value) > _TEXT_LIMIT:
        raise ValueError(f"{len(value):,} characters; the limit is {_TEXT_LIMIT:,}")
    bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp")), None)
    if bad is not None:
        raise ValueError(f"holds the control or format character U+{ord(bad):04X}")
    return value


def _seat_name(value: str) -> str:
    if not is_seat_name(value):
        raise ValueError(f"{printable(repr(value), 60)} is not a seat name")
    return value


def _replica_name(value: str) -> str:
    if not is_replica_name(value):
        raise ValueError(f"{printable(repr(value), 60)} is not a replica name")
    return value


def _host(value: str) -> str:
    probe_host(value)  # ValueError names it
    return value


def _address(value: str) -> str:
    address = normalize_pci_address(value)
    if address is None:
        raise ValueError(f"{printable(repr(value), 60)} is not a PCI address")
    return address


def _gfx(value: str) -> str:
    """gfx targets become the config key's `gpu_arch` and reach every report: only the shape
    the KFD topology gives (`gfx1201`), never free text."""
    if not _GFX.fullmatch(value):
        raise ValueError(f"{printable(repr(value), 60)} is not a gfx target such as 'gfx1201'")
    return value


def _abs_path(value: str) -> str:
    _text(value)
    if not value.startswith("/"):
        raise ValueError(f"{printable(repr(value), 60)} is not an absolute path")
    return value


Text = Annotated[str, AfterValidator(_text)]
Small = Annotated[int, Field(ge=0, le=1 << 16)]


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class _NumaDoc(_Model):
    node: Small | None
    cpulist: Text | None
    cpus: Annotated[tuple[Annotated[int, Field(ge=0, le=1 << 20)], ...], Field(max_length=1 << 16)]
    note: Text


class _PlacementDoc(_Model):
    schema_: Literal["rocmseat.placement/v1"] = Field(alias="schema")
    seat: Annotated[str, AfterValidator(_seat_name)]
    replica: Annotated[str, AfterValidator(_replica_name)]
    index: Small
    host: Annotated[str, AfterValidator(_host)]
    port: Annotated[int, Field(ge=1, le=MAX_PORT)]
    pci_pair: Annotated[tuple[Annotated[str, AfterValidator(_address)], ...], Field(max_length=64)]
    gfx_targets: Annotated[tuple[Annotated[str, AfterValidator(_gfx)], ...],
                           Field(max_length=64)] | None
    hip_indices: Annotated[tuple[Small, ...], Field(max_length=64)] | None
    hip_index_source: Literal["", "pci-bus-order", "hip-probe"]
    hip_note: Text
    numa: _NumaDoc
    cache_dir: Annotated[str, AfterValidator(_abs_path)]
    state_dir: Annotated[str, AfterValidator(_abs_path)]
    partitions: Annotated[tuple[Annotated[str, AfterValidator(_partition)], ...],
                          Field(max_length=64)] | None = None


def parse_placement(text: str) -> ReplicaPlacement:
    """The record of placement.json `text`; PlacementFileError naming the first bad key.
    Hostile input: strict JSON, every field typed and bounded, nothing coerced or guessed."""
    try:
        doc = _PlacementDoc.model_validate_json(text)
    except ValidationError as exc:
        raise PlacementFileError(_first_error(exc)) from None
    numa = doc.numa
    return ReplicaPlacement(
        seat=doc.seat, replica=doc.replica, index=doc.index, host=doc.host, port=doc.port,
        pci_pair=doc.pci_pair, gfx_targets=doc.gfx_targets, hip_indices=doc.hip_indices,
        hip_index_source=doc.hip_index_source, hip_note=doc.hip_note,
        numa=NumaBinding(numa.node, numa.cpulist, numa.cpus, numa.note),
        cache_dir=Path(doc.cache_dir), state_dir=Path(doc.state_dir),
        partitions=doc.partitions,
    )


def _first_error(exc: ValidationError) -> str:
    error = exc.errors(include_url=False, include_input=False)[0]
    if error["type"] in ("json_invalid", "json_type") or not error["loc"]:
        why = error["msg"] if error["type"] == "json_invalid" else "not a JSON object"
        return printable(why, 200)
    key = ".".join(str(p) for p in error["loc"] if isinstance(p, str))
    message = error["msg"].removeprefix("Value error, ")
    return f"key {printable(key, 80)!r}: {printable(message, 200)}"


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
        return f"seat {seat.name} has no replica {name!r} ({known_names(seat)})"
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
