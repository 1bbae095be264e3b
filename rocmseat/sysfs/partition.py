"""An Instinct GPU's partition modes and power policies (read-only: rocmseat never writes them).

- `current_compute_partition`: "%s\\n" of amdgpu_gfx_compute_mode_desc() (SPX, DPX, TPX, QPX,
  CPX, UNKNOWN; drivers/gpu/drm/amd/amdgpu/amdgpu_gfx.c,
  amdgpu_gfx_get_current_compute_partition()); `current_memory_partition`: NPS1, NPS2, NPS4,
  NPS8 or UNKNOWN (amdgpu_gmc.c current_memory_partition_show()). Both answer EPERM while the
  GPU is in reset. Absent on parts without partitions (Radeon, MI200).
- `pm_policy/<policy>` (amdgpu_pm.c, DOC pm_policy): one "<level> : <name>" line per level, the
  level in force marked by a `*`; rocmseat reads `soc_pstate` and `xgmi_plpd` for the startup
  report. The older `xgmi_plpd_policy` attribute was removed in 2024 and is not read.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmseat.errors import ParseError
from rocmseat.sysfs.attrs import Collector

COMPUTE_MODES = ("SPX", "DPX", "TPX", "QPX", "CPX", "UNKNOWN")
MEMORY_MODES = ("NPS1", "NPS2", "NPS4", "NPS8", "UNKNOWN")
POLICIES = ("soc_pstate", "xgmi_plpd")
_LEVEL_RE = re.compile(r"^\s*(\d{1,2})\s*:\s*([A-Za-z0-9_]{1,40})\s*(\*?)\s*$")


@dataclass(frozen=True, slots=True)
class PartitionReading:
    """A GPU's compute and memory partition modes and its DPM policies."""

    compute: str | None  # None: no such attribute (the part has no partitions)
    memory: str | None
    policies: tuple[tuple[str, str | None], ...]  # (policy, current level name or None)
    errors: tuple[str, ...] = ()


def _mode(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(text: str, source: str) -> str:
        value = text.strip()
        if value not in choices:
            raise ParseError(source, text, f"not a partition mode ({', '.join(choices)})")
        return value
    return parse


parse_compute_partition = _mode(COMPUTE_MODES)
parse_memory_partition = _mode(MEMORY_MODES)


def parse_policy(text: str, source: str = "<text>") -> str | None:
    """A pm_policy file -> the starred level's name; None when no level is starred;
    ParseError on a line that is no level or on two stars."""
    current = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        match = _LEVEL_RE.match(line)
        if match is None:
            raise ParseError(f"{source}:{number}", line, 'not "<level> : <name>"')
        if match.group(3):
            if current is not None:
                raise ParseError(source, text[:80], "two levels marked current (*)")
            current = match.group(2)
    return current


def read_partition(device_dir: Path) -> PartitionReading:
    attrs = Collector(device_dir)
    compute = attrs.get("current_compute_partition", parse_compute_partition)
    memory = attrs.get("current_memory_partition", parse_memory_partition)
    policies = []
    for name in POLICIES:
        if (device_dir / "pm_policy" / name).exists():
            policies.append((name, attrs.get(f"pm_policy/{name}", parse_policy)))
    return PartitionReading(compute, memory, tuple(policies), tuple(attrs.errors))


def read_node_policy(sysfs_root: Path, addresses: Sequence[str]) -> dict[str, dict[str, str]]:
    """The partition modes and pm_policy levels of the GPUs at `addresses` (PCI, under
    `sysfs_root/bus/pci/devices`), for the startup report: {address: {"compute_partition":
    "SPX", "memory_partition": "NPS1", "soc_pstate": ..., "xgmi_plpd": ...}}, only what the
    GPU reports (a Radeon part: nothing); a value that cannot be read is "unreadable"."""
    out: dict[str, dict[str, str]] = {}
    for address in addresses:
        reading = read_partition(sysfs_root / "bus" / "pci" / "devices" / address)
        values = {"compute_partition": reading.compute, "memory_partition": reading.memory,
                  **dict(reading.policies)}
        shown = {k: v for k, v in values.items() if v is not None}
        for error in reading.errors:
            name = error.split(": ", 1)[0].rsplit("/", 1)[-1]
            key = name.replace("current_", "") if name.startswith("current_") else name
            shown.setdefault(key, "unreadable")
        if shown:
            out[address] = shown
    return out
