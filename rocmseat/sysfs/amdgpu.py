"""amdgpu attributes of a GPU's PCI directory (Documentation/gpu/amdgpu/driver-misc.rst,
drivers/gpu/drm/amd/pm/amdgpu_pm.c).

`pp_dpm_pcie` is absent on MI200/MI300-class parts (amdgpu_pm.c marks it ATTR_STATE_UNSUPPORTED
for GC 9.4.2/9.4.3/9.4.4/9.5.0), reads as a lone "\\n" where the ASIC prints nothing, and stars
zero, one or several rows: every field here is optional. `gpu_metrics` is the firmware's binary
table (rocmseat.sysfs.gpu_metrics); `power/runtime_status` ("active", "suspended": the PCI
runtime-PM state, Documentation/ABI/testing/sysfs-devices-power) says why a suspended GPU stars
no pp_dpm_pcie row.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rocmseat.sysfs.attrs import Collector, read_text
from rocmseat.sysfs.gpu_metrics import GpuMetrics, parse_gpu_metrics
from rocmseat.sysfs.parse import DpmLevel, parse_int, parse_pp_dpm_pcie
from rocmseat.sysfs.ras import RasReading, read_ras


@dataclass(frozen=True, slots=True)
class AmdgpuReading:
    driver: str | None  # name the `driver` symlink points to ("amdgpu"), None if unbound
    pp_dpm_pcie: tuple[DpmLevel, ...] | None  # None: file absent; (): empty file
    pcie_replay_count: int | None
    gpu_busy_percent: int | None
    unique_id: str | None
    mem_info_vram_total_bytes: int | None
    product_name: str | None
    errors: tuple[str, ...] = ()
    gpu_metrics: GpuMetrics | None = None  # None: absent or unreadable (the reason in errors)
    runtime_status: str | None = None  # power/runtime_status: "active", "suspended" ...
    ras: RasReading | None = None  # None: no ras/ directory (Radeon parts): not applicable


def read_amdgpu(device_dir: Path) -> AmdgpuReading:
    attrs = Collector(device_dir)
    return AmdgpuReading(
        driver=driver_name(device_dir),
        pp_dpm_pcie=attrs.get("pp_dpm_pcie", parse_pp_dpm_pcie),
        pcie_replay_count=attrs.get("pcie_replay_count", parse_int),
        gpu_busy_percent=attrs.get("gpu_busy_percent", lambda t, s: parse_int(t, s, maximum=100)),
        unique_id=attrs.text("unique_id"),
        mem_info_vram_total_bytes=attrs.get("mem_info_vram_total", parse_int),
        product_name=attrs.text("product_name"),
        gpu_metrics=attrs.get_bytes("gpu_metrics", parse_gpu_metrics),
        runtime_status=read_text(device_dir / "power" / "runtime_status")[0] or None,
        ras=read_ras(device_dir),
        errors=tuple(attrs.errors),
    )


def driver_name(device_dir: Path) -> str | None:
    """`driver -> ../../../../bus/pci/drivers/amdgpu`: the bound driver's name."""
    try:
        return os.path.basename(os.readlink(device_dir / "driver")) or None
    except OSError:
        return None
