"""Pure parsers for the sysfs attributes preflight reads: text in, value out.

Every parser raises `rocmseat.errors.ParseError(source, text, why)` on text it does not
understand, and nothing else (tests/sysfs/test_parse.py checks that with hypothesis).
`source` only names the file in the message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rocmseat.errors import ParseError
from rocmseat.text import CONTROL_CLASS

_U64_MAX = (1 << 64) - 1

# Both kernel spellings (drivers/pci/probe.c pci_speed_string(), and the switch it replaced in
# 5.7, "Use pci_speed_string() for all PCI/PCI-X/PCIe strings"): "8.0 GT/s PCIe" and "8 GT/s".
_SPEED_RE = re.compile(r"^\s*(\d{1,3}(?:\.\d{1,3})?)\s*GT/s(?:\s+PCIe)?\s*$")
_UNKNOWN_SPEEDS = {"unknown", "unknown speed"}
KNOWN_SPEEDS_GTS = (2.5, 5.0, 8.0, 16.0, 32.0, 64.0)


def parse_link_speed(text: str, source: str = "<text>") -> float | None:
    """`current_link_speed`/`max_link_speed` -> GT/s; None when the kernel says Unknown."""
    stripped = text.strip()
    if stripped.lower() in _UNKNOWN_SPEEDS:
        return None
    match = _SPEED_RE.match(stripped)
    if match is None:
        raise ParseError(source, text, "not a PCIe link speed")
    value = float(match.group(1))
    if value not in KNOWN_SPEEDS_GTS:
        raise ParseError(source, text, "not a PCIe data rate (2.5, 5, 8, 16, 32, 64 GT/s)")
    return value


def generation(speed_gts: float) -> int:
    """PCIe generation of a data rate (2.5 -> 1 ... 64 -> 6)."""
    return KNOWN_SPEEDS_GTS.index(speed_gts) + 1


def format_speed(speed_gts: float | None) -> str:
    if speed_gts is None:
        return "unknown speed"
    return f"{speed_gts:g} GT/s"


def parse_int(
    text: str, source: str = "<text>", *, minimum: int = 0, maximum: int = _U64_MAX
) -> int:
    """A decimal integer on one line (widths, counters, numa_node with minimum=-1)."""
    stripped = text.strip()
    if not re.fullmatch(r"-?\d{1,20}", stripped):
        raise ParseError(source, text, "not an integer")
    value = int(stripped)
    if not minimum <= value <= maximum:
        raise ParseError(source, text, f"out of range {minimum}..{maximum}")
    return value


def parse_link_width(text: str, source: str = "<text>") -> int:
    """`current_link_width`/`max_link_width`: lanes (0 means the link is down)."""
    return parse_int(text, source, maximum=32)


def parse_numa_node(text: str, source: str = "<text>") -> int | None:
    """`numa_node`: the node, or None for -1 ("unknown", no ACPI _PXM)."""
    value = parse_int(text, source, minimum=-1, maximum=4095)
    return None if value == -1 else value


# the control-character rule, and U+FFFD: what decoding left of bytes that are not UTF-8
_CONTROL_RE = re.compile(f"[{CONTROL_CLASS}\\ufffd]")


def parse_free_text(text: str, source: str = "<text>") -> str:
    """A one-line free-text attribute (product_name): stripped, no control characters."""
    stripped = text.strip()
    bad = _CONTROL_RE.search(stripped)
    if bad is not None:
        what = "bytes that are not UTF-8" if bad.group() == "\ufffd" else "a control character"
        raise ParseError(source, text, f"{what} in a text attribute")
    return stripped


def parse_hex_id(text: str, source: str = "<text>") -> int:
    """`vendor`, `device`, `class`: `0x1002`, `0x030000`."""
    stripped = text.strip()
    if not re.fullmatch(r"0x[0-9a-fA-F]{1,8}", stripped):
        raise ParseError(source, text, "not a 0x-prefixed hex id")
    return int(stripped, 16)


def parse_cpulist(text: str, source: str = "<text>") -> tuple[int, ...]:
    """cpulist format (`0-13,28-41`); an empty line is no CPUs (a memory-only NUMA node)."""
    stripped = text.strip()
    if not stripped:
        return ()
    cpus: set[int] = set()
    for part in stripped.split(","):
        match = re.fullmatch(r"(\d{1,5})(?:-(\d{1,5}))?", part.strip())
        if match is None:
            raise ParseError(source, text, "not a cpulist")
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) else low
        if high < low or high - low > 65536:
            raise ParseError(source, text, "bad cpulist range")
        cpus.update(range(low, high + 1))
    return tuple(sorted(cpus))


def parse_distance(text: str, source: str = "<text>") -> tuple[int, ...]:
    """`nodeN/distance`: one value per node, self = 10."""
    parts = text.split()
    if not parts or not all(re.fullmatch(r"\d{1,4}", p) for p in parts):
        raise ParseError(source, text, "not a NUMA distance row")
    return tuple(int(p) for p in parts)


# --- AER ---------------------------------------------------------------------------------------
# drivers/pci/pcie/aer.c aer_stats_dev_attr: "<name> <u64>" per named bit, "<array>_bit[N] <u64>"
# for unnamed nonzero bits, then "TOTAL_ERR_COR|FATAL|NONFATAL <u64>". Old kernels printed long
# names with spaces (ABI sample, Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats); map
# them to today's short lspci-style names so baselines compare across kernels.
LONG_AER_NAMES = {
    "Receiver Error": "RxErr",
    "Bad TLP": "BadTLP",
    "Bad DLLP": "BadDLLP",
    "RELAY_NUM Rollover": "Rollover",
    "Replay Timer Timeout": "Timeout",
    "Advisory Non-Fatal": "NonFatalErr",
    "Corrected Internal Error": "CorrIntErr",
    "Header Log Overflow": "HeaderOF",
    "Data Link Protocol": "DLP",
    "Surprise Down Error": "SDES",
    "Poisoned TLP": "TLP",
    "Flow Control Protocol": "FCP",
    "Completion Timeout": "CmpltTO",
    "Completer Abort": "CmpltAbrt",
    "Unexpected Completion": "UnxCmplt",
    "Receiver Overflow": "RxOF",
    "Malformed TLP": "MalfTLP",
    "Unsupported Request": "UnsupReq",
    "ACS Violation": "ACSViol",
    "Uncorrectable Internal Error": "UncorrIntErr",
    "MC Blocked TLP": "BlockedTLP",
    "AtomicOp Egress Blocked": "AtomicOpBlocked",
    "TLP Prefix Blocked Error": "TLPBlockedErr",
    "Poisoned TLP Egress Blocked": "PoisonTLPBlocked",
}
_TOTAL_NAMES = frozenset({"TOTAL_ERR_COR", "TOTAL_ERR_FATAL", "TOTAL_ERR_NONFATAL"})
_AER_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_ \-]{0,63}(?:\[\d{1,3}\])?$")


@dataclass(frozen=True, slots=True)
class AerCounters:
    """One `aer_dev_*` file: counts by (short) name, and its TOTAL_ERR_* line if present."""

    counts: tuple[tuple[str, int], ...]
    total: int | None

    def as_dict(self) -> dict[str, int]:
        return dict(self.counts)


def parse_aer_counters(text: str, source: str = "<text>") -> AerCounters:
    counts: dict[str, int] = {}
    total: int | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.strip().rsplit(None, 1)
        if len(parts) != 2:
            raise ParseError(f"{source}:{number}", line, "not '<name> <count>'")
        name, count_text = parts
        count = parse_int(count_text, f"{source}:{number}")
        if name.startswith("TOTAL_ERR_"):
            # aer.c prints exactly TOTAL_ERR_COR, TOTAL_ERR_FATAL or TOTAL_ERR_NONFATAL; any
            # other spelling (a NUL or garbage inside the name) is not a total
            if name not in _TOTAL_NAMES:
                raise ParseError(f"{source}:{number}", line, "not an AER total name")
            total = count
            continue
        if not _AER_NAME_RE.fullmatch(name):
            raise ParseError(f"{source}:{number}", line, "not an AER counter name")
        name = LONG_AER_NAMES.get(name, name)
        counts[name] = counts.get(name, 0) + count
    if not counts and total is None:
        raise ParseError(source, text, "no AER counters")
    return AerCounters(tuple(counts.items()), total)


# --- amdgpu pp_dpm_pcie -------------------------------------------------------------------------
# smu_cmn_print_pcie_levels(): "%d: %s %s %dMhz %s\n" -> "1: 8.0GT/s, x16 619Mhz *"; the star
# marks every row equal to the current link (zero, one or several rows); Vega10 printed no Mhz
# field ("0: 8.0GT/s, x16 "); an ASIC with nothing to print emits a lone "\n".
_DPM_RE = re.compile(
    r"^(\d{1,2}):\s+(\d{1,3}(?:\.\d{1,3})?)GT/s,?\s+x(\d{1,2})(?:\s+(\d{1,6})\s*Mhz)?\s*(\*)?\s*$"
)


@dataclass(frozen=True, slots=True)
class DpmLevel:
    """One line of amdgpu's pp_dpm_pcie: a link speed and width level, `*` when active."""

    index: int
    speed_gts: float
    width: int
    lclk_mhz: int | None  # None on the Vega10 format
    active: bool


def parse_pp_dpm_pcie(text: str, source: str = "<text>") -> tuple[DpmLevel, ...]:
    levels = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _DPM_RE.match(line)
        if match is None:
            raise ParseError(f"{source}:{number}", line, "not a pp_dpm_pcie level")
        speed = float(match.group(2))
        if speed not in KNOWN_SPEEDS_GTS:
            raise ParseError(f"{source}:{number}", line, "not a PCIe data rate")
        levels.append(
            DpmLevel(
                index=int(match.group(1)),
                speed_gts=speed,
                width=int(match.group(3)),
                lclk_mhz=int(match.group(4)) if match.group(4) else None,
                active=match.group(5) is not None,
            )
        )
    return tuple(levels)


# --- KFD topology -------------------------------------------------------------------------------
def parse_kfd_properties(text: str, source: str = "<text>") -> dict[str, int]:
    """`topology/nodes/N/properties`: one `key value` pair per line (kfd_topology.c)."""
    props: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not re.fullmatch(r"[a-z0-9_]{1,64}", parts[0]):
            raise ParseError(f"{source}:{number}", line, "not '<key> <value>'")
        props[parts[0]] = parse_int(parts[1], f"{source}:{number}")
    return props


def gfx_target(version: int) -> str | None:
    """KFD gfx_target_version -> "gfx1201" (90402 -> gfx942); None for 0 (a CPU node)."""
    if version <= 0:
        return None
    major, minor, step = version // 10000, (version // 100) % 100, version % 100
    return f"gfx{major}{minor:x}{step:x}"


_BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_SHORT_BDF_RE = re.compile(r"^[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def is_pci_address(name: str) -> bool:
    return _BDF_RE.fullmatch(name) is not None


def normalize_pci_address(text: str) -> str | None:
    """`05:00.0` or `0000:05:00.0` (any case) -> `0000:05:00.0`; None if neither."""
    value = text.strip().lower()
    if _SHORT_BDF_RE.fullmatch(value):
        value = "0000:" + value
    return value if _BDF_RE.fullmatch(value) else None


def short_address(address: str) -> str:
    """`0000:05:00.0` -> `05:00.0` (domain 0 only; other domains keep it)."""
    return address[5:] if address.startswith("0000:") else address
