"""The GPU firmware's view of its PCIe link: one reading per GPU, each figure with its source.

The SMU firmware sets the link and says so twice: the starred row of `pp_dpm_pcie` (amdgpu_pm.c;
smu_cmn_print_pcie_levels() stars every row equal to the current link) and the
`pcie_link_speed`/`pcie_link_width` of `gpu_metrics` (rocmseat.sysfs.gpu_metrics). Several starred
rows with equal values are one active level; starred rows that differ, or none starred, say
nothing certain (a runtime-suspended GPU stars no row); the two sources disagreeing is unknown
too. Never a guess: `problem` carries the reason whenever the firmware spoke but `speed_gts` is
None.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmseat.node.inventory import Gpu
from rocmseat.sysfs.attrs import errors_of
from rocmseat.sysfs.parse import DpmLevel, format_speed


@dataclass(frozen=True, slots=True)
class FirmwareLink:
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
    if not levels or len({(lv.speed_gts, lv.width) for lv in active}) == 1:
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
    dpm_link: tuple[float, int] | None = None
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
            dpm_link = (active[0].speed_gts, active[0].width)
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
    link = dpm_link or metrics_link
    if link is None and metrics_problem is not None:
        problems.append(metrics_problem)
    if dpm_link is not None and metrics_link is not None and dpm_link != metrics_link:
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
    return FirmwareLink(link[0], link[1], tuple(sources), top, active_index, None)
