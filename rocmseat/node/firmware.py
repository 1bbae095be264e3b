"""The GPU firmware's view of its PCIe link: one reading per GPU, each figure with its source.

The SMU firmware sets the link and says so twice: the starred row of `pp_dpm_pcie` (amdgpu_pm.c;
smu_cmn_print_pcie_levels() stars every row equal to the current link) and the
`pcie_link_speed`/`pcie_link_width` of `gpu_metrics` (rocmseat.sysfs.gpu_metrics). Several starred
rows with equal values are one active level; starred rows that differ, or none starred, say
nothing certain (a runtime-suspended GPU stars no row); the two sources disagreeing is unknown
too. Never a guess: `problem` carries the reason whenever the firmware spoke but `speed_gts` is
None.

Two kernel quirks are facts, not contradictions:
- smu_v14_0_2_ppt.c (SMU 14.0.2/14.0.3: RDNA4, gfx1200/gfx1201), smu_v14_0_2_get_gpu_metrics():
  `#define LINK_SPEED_MAX 3` and `if ((metrics->PcieRate - 1) > LINK_SPEED_MAX)
  gpu_metrics->pcie_link_speed = pcie_gen_to_speed(1)`: any rate above Gen4 reads 2.5 GT/s in
  gpu_metrics. With pp_dpm_pcie starring a faster level at the same width, pp_dpm_pcie's figure
  is the link (amdgpu_top's dump of an RX 9060 XT shows the same: Gen5 x16 starred, 25).
  smu_v13_0_0/smu_v13_0_7 (RDNA3) carry the same clause, but their links stop at Gen4, which it
  never clamps: there a 2.5 GT/s gpu_metrics against a faster star stays a contradiction.
- smu7_hwmgr.c smu7_print_clock_levels(), case PP_PCIE (Polaris, Tonga, Fiji: gfx802/gfx803/
  gfx805): each row is a fixed string ("2.5GT/s, x8", "5.0GT/s, x16", "8.0GT/s, x16") whatever
  the lanes, and the star marks the current speed only. Its rows give a speed, never a width.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmseat.node.inventory import Gpu
from rocmseat.sysfs.attrs import errors_of
from rocmseat.sysfs.parse import DpmLevel, format_speed


@dataclass(frozen=True, slots=True)
class FirmwareLink:
    """The GPU's link as its firmware reports it (pp_dpm_pcie, gpu_metrics)."""

    speed_gts: float | None
    width: int | None
    sources: tuple[str, ...]  # "pp_dpm_pcie level 1", "gpu_metrics v1.3"
    # the highest pp_dpm_pcie level, and whether the active link is it; None without a table
    # (MI200/MI300 have no pp_dpm_pcie: gpu_metrics' link is the current one, no idle levels)
    top: DpmLevel | None
    active_index: int | None
    problem: str | None  # why the firmware's link is not known although it spoke

    @property
    def known(self) -> bool:
        return self.speed_gts is not None and self.width is not None

    @property
    def at_top(self) -> bool | None:
        if self.top is None or not self.known or self.active_index is None:
            return None
        return (self.speed_gts, self.width) == (self.top.speed_gts, self.top.width)

    def words(self) -> str:
        width = "x?" if self.width is None else f"x{self.width}"
        return f"{format_speed(self.speed_gts)} {width}"


# SMU 14.0.2 / 14.0.3 (smu_v14_0_2_ppt.c): gpu_metrics' speed is clamped to 2.5 GT/s above Gen4
SMU_14_0_2_GFX = frozenset({"gfx1200", "gfx1201"})
# smu7_hwmgr.c parts: pp_dpm_pcie rows carry fixed lane strings
SMU7_GFX = frozenset({"gfx802", "gfx803", "gfx805"})
CLAMPED_SPEED_GTS = 2.5


def dpm_lanes_known(gpu: Gpu) -> bool:
    """Whether pp_dpm_pcie's `x<lanes>` are the level's lanes (not on smu7: fixed strings)."""
    return gpu.gfx_target not in SMU7_GFX


def _levels_words(levels: list[DpmLevel]) -> str:
    return ", ".join(f"{lv.index} ({format_speed(lv.speed_gts)} x{lv.width})" for lv in levels)


def _unreadable(errors: tuple[str, ...], name: str) -> list[str]:
    """The read errors of a firmware source, but "not supported by the kernel" (EOPNOTSUPP,
    ENODATA: amdgpu answers so where the ASIC has no such table): that one is absent."""
    return [e for e in errors_of(errors, name) if ": not supported by the kernel (" not in e]


def dpm_star_problem(gpu: Gpu) -> str | None:
    """Why pp_dpm_pcie's stars name no one active level (None: they do, or there are no rows).
    Several starred rows with equal values are one level."""
    levels = gpu.amdgpu.pp_dpm_pcie or ()
    active = [lv for lv in levels if lv.active]
    lanes = dpm_lanes_known(gpu)
    if not levels or len({(lv.speed_gts, lv.width if lanes else 0) for lv in active}) == 1:
        return None
    if active:
        return f"pp_dpm_pcie stars rows that differ: {_levels_words(active)}"
    status = gpu.amdgpu.runtime_status
    if status and status != "active":
        return f"pp_dpm_pcie stars no row: the GPU is runtime-{status} (power/runtime_status)"
    return "pp_dpm_pcie stars no row (the current link matches none of its levels)"


def firmware_link(gpu: Gpu) -> FirmwareLink:
    amdgpu = gpu.amdgpu
    problems: list[str] = []  # contradictions: the firmware's word is uncertain
    read_errors: list[str] = []  # a source that exists and cannot be read: uncertain too
    sources: list[str] = []
    dpm_link: tuple[float, int | None] | None = None
    active_index = None
    top = None
    levels = amdgpu.pp_dpm_pcie or ()
    read_errors += _unreadable(amdgpu.errors, "pp_dpm_pcie")
    if levels:
        top = max(levels, key=lambda lv: (lv.speed_gts, lv.width))
        active = [lv for lv in levels if lv.active]
        star_problem = dpm_star_problem(gpu)
        if star_problem is not None:
            problems.append(star_problem)
        else:
            # smu7 prints a fixed lane string: the speed only (the module's docstring)
            dpm_link = (active[0].speed_gts, active[0].width if dpm_lanes_known(gpu) else None)
            active_index = active[0].index
            sources.append("pp_dpm_pcie level " + ", ".join(str(lv.index) for lv in active))
    metrics_link: tuple[float, int] | None = None
    read_errors += _unreadable(amdgpu.errors, "gpu_metrics")
    metrics = amdgpu.gpu_metrics
    metrics_problem = None
    if metrics is not None and metrics.has_pcie_link:
        if metrics.link_problem:
            # e.g. a generation index where 0.1 GT/s belongs (some SMU 13 firmware, as amdsmi
            # notes): no figure from gpu_metrics, not a contradiction of pp_dpm_pcie's star
            metrics_problem = f"gpu_metrics {metrics.revision}: {metrics.link_problem}"
        elif metrics.pcie_link_speed_gts is not None and metrics.pcie_link_width is not None:
            metrics_link = (metrics.pcie_link_speed_gts, metrics.pcie_link_width)
            sources.append(f"gpu_metrics {metrics.revision}")
    if _clamped(gpu, dpm_link, metrics_link):
        assert metrics is not None
        sources[-1] = (f"gpu_metrics {metrics.revision} clamped to 2.5 GT/s above Gen4 "
                       "(smu_v14_0_2)")
        metrics_link = dpm_link  # type: ignore[assignment]
    link = dpm_link or metrics_link
    if link is None and metrics_problem is not None:
        problems.append(metrics_problem)
    if dpm_link is not None and dpm_link[1] is None:
        problems.append(
            f"pp_dpm_pcie says {format_speed(dpm_link[0])} and no width (smu7 prints fixed lane "
            "strings, smu7_hwmgr.c)"
            + (f"; gpu_metrics says x{metrics_link[1]}" if metrics_link else "")
        )
        link = None
    elif dpm_link is not None and metrics_link is not None and dpm_link != metrics_link:
        problems.append(
            f"pp_dpm_pcie's active level says {format_speed(dpm_link[0])} x{dpm_link[1]}, "
            f"gpu_metrics says {format_speed(metrics_link[0])} x{metrics_link[1]}"
        )
        link = None
    if link is None or problems or read_errors:
        # a source that contradicts itself or the other, or one that exists and cannot be read
        # (a FIFO, garbage, a truncated table), leaves the firmware's word uncertain
        reasons = problems + read_errors
        return FirmwareLink(
            None, None, tuple(sources), top, None, "; ".join(reasons) if reasons else None
        )
    assert link[1] is not None
    return FirmwareLink(link[0], link[1], tuple(sources), top, active_index, None)


def _clamped(
    gpu: Gpu, dpm_link: tuple[float, int | None] | None, metrics_link: tuple[float, int] | None
) -> bool:
    """smu_v14_0_2's clamp: gpu_metrics 2.5 GT/s, the starred level faster at the same width."""
    return (
        gpu.gfx_target in SMU_14_0_2_GFX
        and dpm_link is not None
        and metrics_link is not None
        and metrics_link[0] == CLAMPED_SPEED_GTS
        and dpm_link[0] > CLAMPED_SPEED_GTS
        and dpm_link[1] == metrics_link[1]
    )
