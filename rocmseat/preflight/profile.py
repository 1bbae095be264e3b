"""Expectation profiles (checks/*.toml): which GPU sits where, its expected link, the pairs,
and the AER thresholds. Loading fails with a ConfigError naming the file, the line and the key.

    name = "x99-r9700"
    [thresholds]                      # optional; AerThresholds' fields
    aer_correctable_warn = 1
    window_h = 24                     # the error window (docs/preflight.md, "Error windows")
    [[gpu]]
    pci_address = "0000:09:00.0"
    speed_gts = 8.0                   # optional, with width
    width = 8
    socket = 0                        # optional
    [[pair]]
    gpus = ["0000:05:00.0", "0000:09:00.0"]
    [xgmi]                            # optional: the XGMI hive (rocmseat.preflight.xgmi)
    hive_members = 8
    links_per_peer = 1
    width = 16
    speed_gts = 32
    compute_partition = "SPX"
    memory_partition = "NPS1"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from rocmseat.findings import Finding, Subject
from rocmseat.node.inventory import Inventory
from rocmseat.preflight.aer import AerThresholds
from rocmseat.preflight.events import EventThresholds
from rocmseat.preflight.profile_doc import (
    GpuDoc,
    PairDoc,
    ProfileDoc,
    ThresholdsDoc,
    XgmiDoc,
    profile_problem,
)
from rocmseat.preflight.xgmi import NO_EXPECTATIONS, XgmiExpectations
from rocmseat.sysfs.partition import COMPUTE_MODES, MEMORY_MODES
from rocmseat.tomlio import TomlDoc, load_toml

_THRESHOLD_KEYS = {  # the file's keys -> AerThresholds' fields
    "aer_correctable_warn": "correctable_warn",
    "aer_correctable_fail": "correctable_fail",
    "replay_warn": "replay_warn",
    "replay_fail": "replay_fail",
    "ras_ce_warn": "ras_ce_warn",
    "ras_ce_fail": "ras_ce_fail",
    "ras_bad_pages_fail": "ras_bad_pages_fail",
}
# the events family's thresholds (rocmseat.preflight.events.EventThresholds), same table
_EVENT_KEYS = ("gpu_resets_fail", "ring_timeouts_fail")


@dataclass(frozen=True, slots=True)
class ExpectedGpu:
    """One GPU the profile expects: its address, its link, its socket."""

    pci_address: str
    speed_gts: float | None
    width: int | None
    socket: int | None

    @property
    def link(self) -> tuple[float, int] | None:
        if self.speed_gts is None or self.width is None:
            return None
        return (self.speed_gts, self.width)


@dataclass(frozen=True, slots=True)
class Profile:
    """An expectations profile (checks/*.toml), as load_profile checked it."""

    name: str
    source: Path
    gpus: tuple[ExpectedGpu, ...]
    pairs: tuple[tuple[str, str], ...]
    thresholds: AerThresholds
    sha256: str | None = None  # of the file's bytes: a cached verdict names the profile it used
    events: EventThresholds = field(default_factory=EventThresholds)
    xgmi: XgmiExpectations = NO_EXPECTATIONS

    def expected_link(self, address: str) -> tuple[float, int] | None:
        gpu = next((g for g in self.gpus if g.pci_address == address), None)
        return None if gpu is None else gpu.link


def load_profile(path: Path) -> Profile:
    """The profile at `path`, or one ConfigError naming the file, the line and the key (exit 2).

    One loader for every TOML file (rocmseat.tomlio: a regular file only, capped, UTF-8, nesting
    bounded, a 5,000-digit integer a located error); one strict model for the keys
    (rocmseat.preflight.profile_doc); the facts across keys are checked here."""
    doc = load_toml(path, what="profile", invalid="not valid TOML")
    try:
        model = ProfileDoc.model_validate(doc.data)
    except ValidationError as exc:
        loc, why = profile_problem(exc)
        raise doc.error(loc, why) from None
    return Profile(
        name=model.name if model.name is not None else path.stem,
        source=path,
        gpus=_gpus(model.gpu, doc),
        pairs=_pairs(model.pair, doc),
        thresholds=_thresholds(model.thresholds, doc),
        sha256=doc.sha256,
        events=_event_thresholds(model.thresholds),
        xgmi=_xgmi(model.xgmi, doc),
    )


def _xgmi(table: XgmiDoc, doc: TomlDoc) -> XgmiExpectations:
    for key, modes in (("compute_partition", COMPUTE_MODES), ("memory_partition", MEMORY_MODES)):
        value = getattr(table, key)
        if value is not None and value not in modes[:-1]:
            raise doc.error(("xgmi", key), f"must be one of {', '.join(modes[:-1])}")
    return XgmiExpectations(table.hive_members, table.links_per_peer, table.width,
                            table.speed_gts, table.compute_partition, table.memory_partition)


def _gpus(entries: Sequence[GpuDoc], doc: TomlDoc) -> tuple[ExpectedGpu, ...]:
    for index, entry in enumerate(entries):
        if (entry.speed_gts is None) != (entry.width is None):
            raise doc.error(("gpu", index, "pci_address"), "give speed_gts and width together")
    return tuple(ExpectedGpu(e.pci_address, e.speed_gts, e.width, e.socket) for e in entries)


def _pairs(entries: Sequence[PairDoc], doc: TomlDoc) -> tuple[tuple[str, str], ...]:
    pairs = []
    for index, entry in enumerate(entries):
        a, b = entry.gpus
        if a == b:
            raise doc.error(("pair", index, "gpus"), "a pair needs two different GPUs")
        pairs.append((min(a, b), max(a, b)))
    return tuple(pairs)


def _event_thresholds(table: ThresholdsDoc) -> EventThresholds:
    """The events family's keys of the [thresholds] table (at least 1: 0 would fail every GPU)."""
    given = table.model_dump(exclude_none=True)
    return EventThresholds(**{k: max(1, given[k]) for k in _EVENT_KEYS if k in given})


def _thresholds(table: ThresholdsDoc, doc: TomlDoc) -> AerThresholds:
    given = table.model_dump(exclude_none=True)
    values: dict[str, int] = {
        _THRESHOLD_KEYS[k]: v for k, v in given.items() if k in _THRESHOLD_KEYS
    }
    if "window_h" in given:
        values["window_s"] = given["window_h"] * 3600  # hours in the file, seconds in the run
    thresholds = AerThresholds(**values)
    for kind in ("correctable", "replay", "ras_ce"):
        warn, fail = getattr(thresholds, f"{kind}_warn"), getattr(thresholds, f"{kind}_fail")
        if warn > fail:
            name = "aer_correctable" if kind == "correctable" else kind
            key = f"{name}_warn" if f"{name}_warn" in given else f"{name}_fail"
            raise doc.error(("thresholds", key), f"{name}_warn {warn} is above {name}_fail {fail}")
    return thresholds


def judge_profile(inventory: Inventory, profile: Profile, checked: set[str]) -> list[Finding]:
    """`profile.*`: expected GPUs present, on their socket; no unexpected GPU.

    Expected links are judged by pcie.link (pcie.link.expected), expected pairs by numa.
    """
    findings = []
    present = {g.pci_address: g for g in inventory.gpus}
    for expected in profile.gpus:
        if checked and expected.pci_address not in checked:
            continue
        gpu = present.get(expected.pci_address)
        if gpu is None:
            findings.append(
                Subject(expected.pci_address).fail(
                    "profile.gpu.missing",
                    f"profile {profile.name} expects a GPU at {expected.pci_address}; none found",
                    "a GPU fell off the bus (dmesg), or the profile is out of date",
                )
            )
        elif expected.socket is not None and gpu.socket != expected.socket:
            findings.append(
                Subject(expected.pci_address).fail(
                    "profile.gpu.socket",
                    f"profile {profile.name} expects socket {expected.socket}; found {gpu.socket}",
                )
            )
        else:
            findings.append(
                Subject(expected.pci_address).ok(
                    "profile.gpu.present", f"present as profile {profile.name} expects",
                )
            )
    known = {g.pci_address for g in profile.gpus}
    for address in sorted(present):
        if address not in known and (not checked or address in checked):
            findings.append(
                Subject(address).warn(
                    "profile.gpu.unexpected", f"GPU not listed in profile {profile.name}",
                    "add it to the profile",
                )
            )
    return findings
