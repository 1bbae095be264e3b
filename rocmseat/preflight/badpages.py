"""The driver's own bad-page threshold: when amdgpu calls a GPU's retired VRAM pages too many.

amdgpu_ras.c amdgpu_ras_validate_threshold() (AMD's amdgpu and mainline since amd-gfx "drm/amdgpu:
... bad_page_threshold" by Hawking Zhang, 2025-01-22; the rule rocmseat follows) reads the module
parameter `amdgpu_bad_page_threshold` (amdgpu_drv.c, default -1; rocmseat.sysfs.module_params):

- `-1` (default): `bad_page_cnt_threshold = (reserved_pages_in_bytes >> 21) << 4`, where
  amdgpu_ras_init_reserved_vram_size() reserves AMDGPU_RAS_RESERVED_VRAM_SIZE_DEFAULT (16 MiB) on
  MP0 13.0.2, 13.0.6, 13.0.12 and 13.0.15 (128 pages) and twice that on 13.0.14 (256 pages), and
  nothing elsewhere (no threshold to judge against);
- `-2`: VRAM / RAS_BAD_PAGE_COVER (100 MiB), capped at the EEPROM's record count;
- a positive value: that value (capped likewise); past it the driver sets `is_rma` and halts the
  GPU's runtime services;
- `0`: bad page retirement is disabled (debugging): there is no threshold.

Past a -1/-2 threshold amdgpu_ras_eeprom_check() logs "RAS records:%d exceed threshold:%d" and
"Please consult AMD Service Action Guide (SAG) for appropriate service procedures" and keeps the
GPU running. Older drivers (before 2025-01) applied VRAM / 100 MiB to any negative value, -1
included: on those the default threshold of a 192 GiB MI300X was 1,965 pages.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmseat.node.inventory import Gpu
from rocmseat.sysfs.attrs import errors_of
from rocmseat.sysfs.module_params import DEFAULT_BAD_PAGE_THRESHOLD

BAD_PAGE_COVER_BYTES = 100 * 1024 * 1024  # amdgpu_ras.c RAS_BAD_PAGE_COVER
RESERVED_VRAM_DEFAULT_BYTES = 16 << 20  # amdgpu_ras.h AMDGPU_RAS_RESERVED_VRAM_SIZE_DEFAULT
# amdgpu_ras_init_reserved_vram_size(): MP0 IP version -> bytes reserved for retired pages
RESERVED_VRAM_BY_MP0 = {
    (13, 0, 2): RESERVED_VRAM_DEFAULT_BYTES,
    (13, 0, 6): RESERVED_VRAM_DEFAULT_BYTES,
    (13, 0, 12): RESERVED_VRAM_DEFAULT_BYTES,
    (13, 0, 15): RESERVED_VRAM_DEFAULT_BYTES,
    (13, 0, 14): RESERVED_VRAM_DEFAULT_BYTES << 1,
}
# Without ip_discovery, the MP0 version of the parts whose gfx target fixes it (derived: MI200
# GC 9.4.2 ships MP0 13.0.2, MI300 GC 9.4.3 MP0 13.0.6 in their IP discovery tables)
MP0_BY_GFX = {"gfx90a": (13, 0, 2), "gfx942": (13, 0, 6)}


@dataclass(frozen=True, slots=True)
class BadPageRule:
    """The bad-page threshold the driver applies to a GPU, and how it arrives at it."""

    pages: int | None  # the threshold; None: the driver applies none
    words: str  # how the driver arrives at it
    halts: bool = False  # past it the driver marks the GPU for RMA and halts it (a positive value)


def _mp0(gpu: Gpu) -> tuple[tuple[int, int, int] | None, str]:
    if gpu.amdgpu.mp0_version is not None:
        return gpu.amdgpu.mp0_version, "ip_discovery"
    if gpu.gfx_target in MP0_BY_GFX:
        return MP0_BY_GFX[gpu.gfx_target], f"{gpu.gfx_target}'s"
    return None, ""


def _version(mp0: tuple[int, int, int]) -> str:
    return ".".join(str(n) for n in mp0)


def rule_problem(gpu: Gpu) -> str | None:
    """Why the driver's threshold cannot be told: the module parameter, or (for -1) the MP0
    version it derives from, exists and cannot be read. Never a guessed default over it."""
    if gpu.driver_params.errors:
        return gpu.driver_params.errors[0]
    param = gpu.driver_params.bad_page_threshold
    if param in (None, DEFAULT_BAD_PAGE_THRESHOLD):
        unreadable = errors_of(gpu.amdgpu.errors, "major", "minor", "revision")
        if unreadable:
            return f"{unreadable[0]} (the MP0 version the default threshold derives from)"
    return None


def driver_bad_page_rule(gpu: Gpu) -> BadPageRule:
    """The threshold the loaded amdgpu applies to this GPU (the module's docstring)."""
    param = gpu.driver_params.bad_page_threshold
    shown = f"bad_page_threshold {param}" if param is not None else (
        f"bad_page_threshold {DEFAULT_BAD_PAGE_THRESHOLD} (the default: the module parameter is "
        "not exposed)"
    )
    value = DEFAULT_BAD_PAGE_THRESHOLD if param is None else param
    vram = gpu.amdgpu.mem_info_vram_total_bytes
    if value == 0:
        return BadPageRule(None, f"{shown}: the driver does not retire bad pages (debugging)")
    if value > 0:
        return BadPageRule(value, f"{shown} (user-defined: the driver halts the GPU past it)",
                           halts=True)
    if value == -2:
        if not vram:
            return BadPageRule(None, f"{shown}: VRAM / 100 MiB, and the VRAM size is unknown")
        return BadPageRule(vram // BAD_PAGE_COVER_BYTES,
                           f"{shown}: VRAM / 100 MiB, capped at the EEPROM's record count")
    if value != -1:
        # amdgpu_ras_validate_threshold() applies min(max_count, value) to any other value: a
        # negative one leaves no count that could exceed it
        return BadPageRule(None, f"{shown}: no threshold the driver can reach")
    mp0, source = _mp0(gpu)
    if mp0 is None:
        return BadPageRule(None, f"{shown}: the MP0 IP version is not known (no ip_discovery), "
                                 "so neither is the reserved VRAM the threshold derives from")
    reserved = RESERVED_VRAM_BY_MP0.get(mp0)
    if reserved is None:
        return BadPageRule(None, f"{shown}: MP0 {_version(mp0)} reserves no VRAM for retired "
                                 "pages, so the driver sets no threshold")
    return BadPageRule(
        (reserved >> 21) << 4,
        f"{shown}: {reserved >> 20} MiB of reserved VRAM on MP0 {_version(mp0)} ({source})",
    )
