"""amdgpu's module parameters as the loaded driver holds them: `<sysfs>/module/amdgpu/parameters/`.

`bad_page_threshold` (amdgpu_drv.c: `module_param_named(bad_page_threshold,
amdgpu_bad_page_threshold, int, 0444)`, default -1) decides when the driver calls a GPU's retired
VRAM pages too many (amdgpu_ras.c amdgpu_ras_validate_threshold; rocmseat.preflight.ras). Read
under the sysfs root, so a fixture tree carries its own; absent (no amdgpu module loaded, or a
tree without it) is None: the driver's default applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocmseat.sysfs.attrs import read_parsed
from rocmseat.sysfs.parse import parse_int

DEFAULT_BAD_PAGE_THRESHOLD = -1  # amdgpu_drv.c: int amdgpu_bad_page_threshold = -1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class DriverParams:
    """amdgpu's module parameters preflight judges by (module/amdgpu/parameters)."""

    bad_page_threshold: int | None  # None: the file is absent (the default applies)
    errors: tuple[str, ...] = ()  # the file exists and cannot be read or parsed


NO_PARAMS = DriverParams(None)


def _parse_module_int(text: str, source: str) -> int:
    return parse_int(text, source, minimum=_INT_MIN, maximum=_INT_MAX)


def read_driver_params(sysfs_root: Path) -> DriverParams:
    path = sysfs_root / "module" / "amdgpu" / "parameters" / "bad_page_threshold"
    value, error = read_parsed(path, _parse_module_int)
    return DriverParams(value, (error,) if error else ())
