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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmseat.errors import ConfigError
from rocmseat.findings import Finding, Severity
from rocmseat.node.inventory import Inventory
from rocmseat.preflight.aer import AerThresholds
from rocmseat.preflight.events import EventThresholds
from rocmseat.preflight.windows import MAX_WINDOW_S
from rocmseat.sysfs.parse import KNOWN_SPEEDS_GTS, normalize_pci_address
from rocmseat.tomlio import TomlDoc, load_toml

_THRESHOLD_KEYS = {
    "aer_correctable_warn": "correctable_warn",
    "aer_correctable_fail": "correctable_fail",
    "replay_warn": "replay_warn",
    "replay_fail": "replay_fail",
    "ras_ce_warn": "ras_ce_warn",
    "ras_ce_fail": "ras_ce_fail",
    "ras_bad_pages_fail": "ras_bad_pages_fail",
    "window_h": "window_s",  # hours in the file, seconds in AerThresholds
}
# the events family's thresholds (rocmseat.preflight.events.EventThresholds), same table
_EVENT_KEYS = ("gpu_resets_fail", "ring_timeouts_fail")
MAX_WINDOW_H = MAX_WINDOW_S // 3600


@dataclass(frozen=True, slots=True)
class ExpectedGpu:
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
    name: str
    source: Path
    gpus: tuple[ExpectedGpu, ...]
    pairs: tuple[tuple[str, str], ...]
    thresholds: AerThresholds
    sha256: str | None = None  # of the file's bytes: a cached verdict names the profile it used
    events: EventThresholds = field(default_factory=EventThresholds)

    def expected_link(self, address: str) -> tuple[float, int] | None:
        gpu = next((g for g in self.gpus if g.pci_address == address), None)
        return None if gpu is None else gpu.link


class _Where:
    """Errors located in the profile's text by the TOML loader's locator (rocmseat.tomlio)."""

    def __init__(self, doc: TomlDoc) -> None:
        self.doc = doc

    def error(
        self, key: str, why: str, *, line_key: str | None = None, nth: int = 0
    ) -> ConfigError:
        """`key` as written in messages ("gpu[0].speed_gts"); its line from the document.
        (`line_key` and `nth` are what a line scan needed; the locator counts [[gpu]] itself.)"""
        return self.doc.error(_loc(key), why)


def _loc(key: str) -> tuple[str | int, ...]:
    """"gpu[0].speed_gts" -> ("gpu", 0, "speed_gts")."""
    loc: list[str | int] = []
    for part in key.split("."):
        name, _, rest = part.partition("[")
        loc.append(name)
        loc.extend(int(i) for i in re.findall(r"(\d+)\]", "[" + rest) if rest)
    return tuple(loc)


MAX_SOCKET = 4095  # physical_package_id; numa_node has the same kernel bound (MAX_NUMNODES)
MAX_THRESHOLD = (1 << 32) - 1  # errors per window; a larger one would never fire
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def load_profile(path: Path) -> Profile:
    # one loader for every TOML file: a regular file only, capped, UTF-8, nesting bounded, a
    # 5,000-digit integer a located error (rocmseat.tomlio)
    doc = load_toml(path, what="profile", invalid="not valid TOML")
    data, where = doc.data, _Where(doc)
    unknown = set(data) - {"name", "description", "thresholds", "gpu", "pair"}
    if unknown:
        key = sorted(unknown)[0]
        raise where.error(key, "unknown key (expected name, description, thresholds, gpu, pair)")
    name = data.get("name", path.stem)
    if not isinstance(name, str):
        raise where.error("name", "must be a string")
    for key in ("name", "description"):
        value = data.get(key)
        if key in data and not isinstance(value, str):
            raise where.error(key, "must be a string")
        bad = _CONTROL_RE.search(value) if isinstance(value, str) else None
        if bad is not None:
            # the name reaches the terminal, JSON and the textfile: no escapes, no second line
            raise where.error(key, f"control character U+{ord(bad.group()):04X} in the value")
    return Profile(
        name=name,
        source=path,
        gpus=_gpus(data.get("gpu", []), where),
        pairs=_pairs(data.get("pair", []), where),
        thresholds=_thresholds(data.get("thresholds", {}), where),
        sha256=doc.sha256,
        events=_event_thresholds(data.get("thresholds", {})),
    )


def _address(value: Any, key: str, where: _Where, nth: int) -> str:
    address = normalize_pci_address(value) if isinstance(value, str) else None
    if address is None:
        raise where.error(
            key, f"not a PCI address: {value!r}", line_key=key.rsplit(".", 1)[-1], nth=nth
        )
    return address


def _gpus(entries: Any, where: _Where) -> tuple[ExpectedGpu, ...]:
    if not isinstance(entries, list):
        raise where.error("gpu", "must be an array of tables ([[gpu]])")
    gpus = []
    for index, entry in enumerate(entries):
        key = f"gpu[{index}]"
        if not isinstance(entry, dict):
            raise where.error(key, "must be a table")
        extra = set(entry) - {"pci_address", "speed_gts", "width", "socket", "note"}
        if extra:
            bad = sorted(extra)[0]
            raise where.error(f"{key}.{bad}", "unknown key", line_key=bad)
        address = _address(entry.get("pci_address"), f"{key}.pci_address", where, index)
        speed = entry.get("speed_gts")
        width = entry.get("width")
        socket = entry.get("socket")
        if speed is not None and (
            not isinstance(speed, int | float)
            or isinstance(speed, bool)
            or float(speed) not in KNOWN_SPEEDS_GTS
        ):
            raise where.error(
                f"{key}.speed_gts",
                f"must be one of {KNOWN_SPEEDS_GTS}",
                line_key="speed_gts",
                nth=_nth(entries, index, "speed_gts"),
            )
        if width is not None and (
            not isinstance(width, int) or isinstance(width, bool) or not 1 <= width <= 32
        ):
            raise where.error(
                f"{key}.width",
                "must be a lane count 1..32",
                line_key="width",
                nth=_nth(entries, index, "width"),
            )
        if (speed is None) != (width is None):
            raise where.error(
                f"{key}.pci_address",
                "give speed_gts and width together",
                line_key="pci_address",
                nth=index,
            )
        if socket is not None and (
            not isinstance(socket, int)
            or isinstance(socket, bool)
            or not 0 <= socket <= MAX_SOCKET
        ):
            raise where.error(
                f"{key}.socket",
                f"must be a socket number 0..{MAX_SOCKET}",
                line_key="socket",
                nth=_nth(entries, index, "socket"),
            )
        gpus.append(ExpectedGpu(address, None if speed is None else float(speed), width, socket))
    return tuple(gpus)


def _nth(entries: list[Any], index: int, key: str) -> int:
    return sum(1 for e in entries[:index] if isinstance(e, dict) and key in e)


def _pairs(entries: Any, where: _Where) -> tuple[tuple[str, str], ...]:
    if not isinstance(entries, list):
        raise where.error("pair", "must be an array of tables ([[pair]])")
    pairs = []
    for index, entry in enumerate(entries):
        key = f"pair[{index}].gpus"
        gpus = entry.get("gpus") if isinstance(entry, dict) else None
        if not isinstance(gpus, list) or len(gpus) != 2:
            raise where.error(key, "must list two PCI addresses", line_key="gpus", nth=index)
        a = _address(gpus[0], key, where, index)
        b = _address(gpus[1], key, where, index)
        if a == b:
            raise where.error(key, "a pair needs two different GPUs", line_key="gpus", nth=index)
        pairs.append((min(a, b), max(a, b)))
    return tuple(pairs)


def _event_thresholds(table: Any) -> EventThresholds:
    """The events family's keys of a [thresholds] table _thresholds already validated."""
    if not isinstance(table, dict):
        return EventThresholds()
    return EventThresholds(**{k: max(1, table[k]) for k in _EVENT_KEYS if k in table})


def _thresholds(table: Any, where: _Where) -> AerThresholds:
    if not isinstance(table, dict):
        raise where.error("thresholds", "must be a table")
    values = {}
    for key, value in table.items():
        if key not in _THRESHOLD_KEYS and key not in _EVENT_KEYS:
            known = ", ".join([*_THRESHOLD_KEYS, *_EVENT_KEYS])
            raise where.error(f"thresholds.{key}", f"unknown (known: {known})")
        if not isinstance(value, int) or isinstance(value, bool):
            raise where.error(f"thresholds.{key}", f"must be an integer 0..{MAX_THRESHOLD}")
        if value < 0:
            raise where.error(f"thresholds.{key}", "must be a non-negative integer")
        if value > MAX_THRESHOLD:
            raise where.error(f"thresholds.{key}", f"must be an integer 0..{MAX_THRESHOLD}")
        if key == "window_h":
            if not 1 <= value <= MAX_WINDOW_H:
                raise where.error(
                    f"thresholds.{key}", f"must be a window of 1..{MAX_WINDOW_H} hours"
                )
            value *= 3600
        if key in _EVENT_KEYS:
            continue  # _event_thresholds (checked here with the others)
        values[_THRESHOLD_KEYS[key]] = value
    thresholds = AerThresholds(**values)
    for kind in ("correctable", "replay", "ras_ce"):
        warn, fail = getattr(thresholds, f"{kind}_warn"), getattr(thresholds, f"{kind}_fail")
        if warn > fail:
            name = "aer_correctable" if kind == "correctable" else kind
            given = f"{name}_warn" if f"{name}_warn" in table else f"{name}_fail"
            raise where.error(
                f"thresholds.{given}", f"{name}_warn {warn} is above {name}_fail {fail}"
            )
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
                Finding(
                    "profile.gpu.missing",
                    Severity.FAIL,
                    expected.pci_address,
                    f"profile {profile.name} expects a GPU at {expected.pci_address}; none found",
                    "a GPU fell off the bus (dmesg), or the profile is out of date",
                )
            )
        elif expected.socket is not None and gpu.socket != expected.socket:
            findings.append(
                Finding(
                    "profile.gpu.socket",
                    Severity.FAIL,
                    expected.pci_address,
                    f"profile {profile.name} expects socket {expected.socket}; found {gpu.socket}",
                )
            )
        else:
            findings.append(
                Finding(
                    "profile.gpu.present",
                    Severity.OK,
                    expected.pci_address,
                    f"present as profile {profile.name} expects",
                )
            )
    known = {g.pci_address for g in profile.gpus}
    for address in sorted(present):
        if address not in known and (not checked or address in checked):
            findings.append(
                Finding(
                    "profile.gpu.unexpected",
                    Severity.WARN,
                    address,
                    f"GPU not listed in profile {profile.name}",
                    "add it to the profile",
                )
            )
    return findings
