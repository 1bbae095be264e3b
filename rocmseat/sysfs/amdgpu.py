"""amdgpu attributes of a GPU's PCI directory (Documentation/gpu/amdgpu/driver-misc.rst,
drivers/gpu/drm/amd/pm/amdgpu_pm.c).

`pp_dpm_pcie` is absent on MI200/MI300-class parts (amdgpu_pm.c marks it ATTR_STATE_UNSUPPORTED
for GC 9.4.2/9.4.3/9.4.4/9.5.0), reads as a lone "\\n" where the ASIC prints nothing, and stars
zero, one or several rows: every field here is optional. `gpu_metrics` is the firmware's binary
table (rocmseat.sysfs.gpu_metrics); `power/runtime_status` ("active", "suspended": the PCI
runtime-PM state, Documentation/ABI/testing/sysfs-devices-power) says why a suspended GPU stars
no pp_dpm_pcie row.

A runtime-suspended GPU (BACO: the default for a headless dGPU no client holds open) is asleep,
not unreadable. Since amd-gfx "drm/amd/pm: use pm_runtime_get_if_active for debugfs getters"
(2024-09) and amdgpu_pm_get_access_if_active() (amdgpu_pm.c), the pm getters (pp_dpm_pcie,
gpu_metrics, gpu_busy_percent) answer EPERM instead of waking it; older kernels resumed the GPU
(pm_runtime_get_sync) to answer. So power/runtime_status is read first and a `suspended` GPU's pm
getters are not read at all (a health check never wakes a GPU as a side effect); an EPERM from a
getter says the same. `asleep` carries why. The PCI link and AER files do not go through these
getters and are read as usual.

`error` is not asleep: the PM core prints it whenever `dev->power.runtime_error` is set
(drivers/base/power/sysfs.c runtime_status_show(), checked before any status), which a failed
runtime suspend or resume callback sets (drivers/base/power/runtime.c rpm_callback()); from then
on rpm_resume() returns -EINVAL for every resume ("if (dev->power.runtime_error) retval =
-EINVAL") until the status is set again (pm_runtime_set_active(), a driver rebind). The GPU
cannot be woken: `runtime_error` carries it, and its pm getters are not read either (their
EPERM would only repeat it, and an older kernel's pm_runtime_get_sync() would fail the same way).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rocmseat.sysfs.attrs import Collector, read_text
from rocmseat.sysfs.gpu_metrics import GpuMetrics, parse_gpu_metrics
from rocmseat.sysfs.parse import DpmLevel, parse_int, parse_pp_dpm_pcie
from rocmseat.sysfs.partition import PartitionReading, read_partition
from rocmseat.sysfs.pci import Bar, parse_resource
from rocmseat.sysfs.ras import RasReading, read_ras
from rocmseat.sysfs.xgmi import XgmiReading, read_xgmi


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
    # why the pm getters were not read (runtime suspend), or None
    asleep: str | None = None
    # power/runtime_status is `error`: a runtime resume or suspend failed, the GPU cannot be
    # woken until the driver is rebound (see the module text); None otherwise
    runtime_error: str | None = None
    # MP0 (PSP) IP version from ip_discovery, for the driver's bad-page rule; None: not exposed
    mp0_version: tuple[int, int, int] | None = None
    # the function's assigned BARs (`resource`, rocmseat.sysfs.pci.parse_resource); None: absent
    bars: tuple[Bar, ...] | None = None
    xgmi: XgmiReading | None = None  # None: in no XGMI hive (rocmseat.sysfs.xgmi)
    partition: PartitionReading | None = None  # partition modes, pm_policy levels


# The pm getters read here (amdgpu_pm.c): each goes through amdgpu_pm_get_access_if_active().
PM_GETTERS = ("pp_dpm_pcie", "gpu_metrics", "gpu_busy_percent")
# ip_discovery/die/<die>/<hw_id>/<instance>/{major,minor,revision} (amdgpu_discovery.c, struct
# ip_hw_instance); MP0_HWID is 255 (drivers/gpu/drm/amd/include/soc15_hw_ip.h).
MP0_DIR = ("ip_discovery", "die", "0", "255", "0")


def _busy(text: str, source: str) -> int:
    return parse_int(text, source, maximum=100)


def read_amdgpu(device_dir: Path) -> AmdgpuReading:
    attrs = Collector(device_dir)
    runtime_status = read_text(device_dir / "power" / "runtime_status")[0] or None
    asleep = runtime_error = None
    dpm = metrics = busy = None
    if runtime_status == "error":
        runtime_error = "power/runtime_status is error"
    elif runtime_status == "suspended":
        asleep = "power/runtime_status is suspended"
    else:
        dpm, denied_dpm = attrs.get_pm("pp_dpm_pcie", parse_pp_dpm_pcie)
        metrics, denied_metrics = attrs.get_pm("gpu_metrics", parse_gpu_metrics, binary=True)
        busy, denied_busy = attrs.get_pm("gpu_busy_percent", _busy)
        denied = [n for n, d in zip(PM_GETTERS, (denied_dpm, denied_metrics, denied_busy),
                                    strict=True) if d]
        if denied:
            asleep = f"{', '.join(denied)}: Operation not permitted (EPERM)"
    # read before the reading is built: their errors join `errors`
    mp0 = _mp0_version(attrs)
    bars = attrs.get("resource", parse_resource)
    return AmdgpuReading(
        driver=driver_name(device_dir),
        pp_dpm_pcie=dpm,
        pcie_replay_count=attrs.get("pcie_replay_count", parse_int),
        gpu_busy_percent=busy,
        unique_id=attrs.text("unique_id"),
        mem_info_vram_total_bytes=attrs.get("mem_info_vram_total", parse_int),
        product_name=attrs.text("product_name"),
        gpu_metrics=metrics,
        runtime_status=runtime_status,
        ras=read_ras(device_dir),
        errors=tuple(attrs.errors),
        asleep=asleep,
        runtime_error=runtime_error,
        mp0_version=mp0,
        bars=bars,
        xgmi=read_xgmi(device_dir),
        partition=read_partition(device_dir),
    )


def _mp0_version(attrs: Collector) -> tuple[int, int, int] | None:
    base = "/".join(MP0_DIR)
    parts = [attrs.get(f"{base}/{name}", lambda t, s: parse_int(t, s, maximum=255))
             for name in ("major", "minor", "revision")]
    if any(p is None for p in parts):
        return None
    major, minor, revision = parts
    assert major is not None and minor is not None and revision is not None
    return major, minor, revision


def driver_name(device_dir: Path) -> str | None:
    """`driver -> ../../../../bus/pci/drivers/amdgpu`: the bound driver's name."""
    try:
        return os.path.basename(os.readlink(device_dir / "driver")) or None
    except OSError:
        return None
