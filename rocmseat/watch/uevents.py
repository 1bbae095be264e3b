"""Node events: kernel uevents on a replica's GPU path -> alerts for that replica.

`node_events` is a pure function over one uevent's properties (what `udevadm monitor --property`
or pyudev's `Device.properties` shows); `UeventMonitor` is the thin live part (pyudev netlink).

What the kernel sends (sources cited in docs/watch.md):
- PCIe AER recovery, `pci_uevent_ers()` in drivers/pci/pci-driver.c, KOBJ_CHANGE on the PCI
  device (often the bridge above the GPU): `ERROR_EVENT=BEGIN_RECOVERY` + `DEVICE_ONLINE=0`,
  `ERROR_EVENT=SUCCESSFUL_RECOVERY` + `DEVICE_ONLINE=1`, `ERROR_EVENT=FAILED_RECOVERY` +
  `DEVICE_ONLINE=0`.
- DRM device wedged, `drm_dev_wedged_event()` in drivers/gpu/drm/drm_drv.c (Linux 6.14+),
  KOBJ_CHANGE on the card's primary node: `WEDGED=<method>[,<method>...]` with methods
  none | rebind | bus-reset | vendor-specific, or `WEDGED=unknown`; later kernels add `PID=` and
  `TASK=`. amdgpu sends `WEDGED=none` from amdgpu_device_gpu_recover() after a successful reset
  ("device wedged, but recovered through reset"): a reset, not a wedge.
- amdgpu reset uevents proposed on amd-gfx (drm_sysfs_reset_event: `RESET=1`, `PID=`, `NAME=`,
  `FLAGS=`; an earlier `AMDGPURESET=1`): read as a reset where a vendor kernel ships them.
- `ACTION=bind` of the GPU's PCI function: the driver is back (resolves wedged / failed recovery).
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rocmseat.watch.alerts import GPU_AER_FAILED, GPU_AER_RECOVERY, GPU_RESET, GPU_WEDGED


@dataclass(frozen=True, slots=True)
class GpuPath:
    replica: str
    pci_address: str
    devpath: str  # the GPU function's kernel device path, "/devices/pci0000:00/.../0000:03:00.0"


@dataclass(frozen=True, slots=True)
class NodeEvent:
    replica: str
    alert: str
    on: bool
    device: str
    detail: str
    hold_s: float | None = None  # a one-shot event: resolves by itself after this long


RESET_HOLD_S = 600.0


def _affected(devpath: str, gpus: Iterable[GpuPath], *, below_ok: bool) -> list[GpuPath]:
    path = devpath.rstrip("/")
    hits = []
    for gpu in gpus:
        if gpu.devpath == path or gpu.devpath.startswith(path + "/"):
            hits.append(gpu)  # the GPU itself or a bridge above it
        elif below_ok and path.startswith(gpu.devpath + "/"):
            hits.append(gpu)  # a child of the GPU function (drm/cardN)
    return hits


def node_events(props: Mapping[str, str], gpus: Iterable[GpuPath]) -> list[NodeEvent]:  # noqa: PLR0912
    """The alert changes one uevent means for the replicas whose GPUs it touches."""
    devpath = props.get("DEVPATH", "")
    subsystem = props.get("SUBSYSTEM", "")
    action = props.get("ACTION", "")
    if not devpath:
        return []
    device = devpath.rstrip("/").rsplit("/", 1)[-1]
    changes: list[tuple[str, bool, float | None, str]] = []
    if subsystem == "pci":
        error_event = props.get("ERROR_EVENT", "")
        if error_event == "BEGIN_RECOVERY":
            changes.append((GPU_AER_RECOVERY, True, None, "BEGIN_RECOVERY"))
        elif error_event == "SUCCESSFUL_RECOVERY":
            changes += [(GPU_AER_RECOVERY, False, None, "SUCCESSFUL_RECOVERY"),
                        (GPU_AER_FAILED, False, None, "SUCCESSFUL_RECOVERY")]
        elif error_event == "FAILED_RECOVERY":
            changes += [(GPU_AER_RECOVERY, False, None, "FAILED_RECOVERY"),
                        (GPU_AER_FAILED, True, None, "FAILED_RECOVERY")]
        elif action == "bind" and props.get("DRIVER") == "amdgpu":
            changes += [(GPU_WEDGED, False, None, "driver bound"),
                        (GPU_AER_FAILED, False, None, "driver bound")]
        hits = _affected(devpath, gpus, below_ok=False)
        if action == "bind":  # only the GPU function itself, not a bridge being bound
            hits = [gpu for gpu in hits if gpu.devpath == devpath.rstrip("/")]
    elif subsystem == "drm" and action == "change":
        wedged = props.get("WEDGED")
        if wedged is not None:
            methods = {m.strip() for m in wedged.split(",") if m.strip()}
            detail = f"WEDGED={wedged}"
            if pid := props.get("PID"):
                detail += f" PID={pid} TASK={props.get('TASK', '')}".rstrip()
            if methods == {"none"}:
                changes.append((GPU_RESET, True, RESET_HOLD_S, detail))
            else:
                changes.append((GPU_WEDGED, True, None, detail))
        elif props.get("RESET") == "1" or props.get("AMDGPURESET") == "1":
            detail = "RESET=1" if props.get("RESET") == "1" else "AMDGPURESET=1"
            if pid := props.get("PID"):
                detail += f" PID={pid}"
            changes.append((GPU_RESET, True, RESET_HOLD_S, detail))
        hits = _affected(devpath, gpus, below_ok=True)
    else:
        return []
    replicas = sorted({gpu.replica for gpu in hits})
    return [
        NodeEvent(replica, alert, on, device, detail, hold)
        for replica in replicas
        for alert, on, hold, detail in changes
    ]


class UeventMonitor:
    """pyudev netlink monitor on the pci and drm subsystems; properties go into a queue that the
    evaluation loop drains (the handler itself stays pure and runs on the loop's thread)."""

    def __init__(self, sink: queue.Queue[dict[str, str]]) -> None:
        import pyudev

        self._context = pyudev.Context()
        monitor = pyudev.Monitor.from_netlink(self._context)
        monitor.filter_by("pci")
        monitor.filter_by("drm")

        def on_device(device: Any) -> None:
            props = {str(k): str(v) for k, v in device.properties.items()}
            props.setdefault("ACTION", str(device.action or ""))
            props.setdefault("DEVPATH", str(device.device_path))
            sink.put(props)

        self._observer = pyudev.MonitorObserver(monitor, callback=on_device, name="rocmseat-udev")

    def start(self) -> None:
        self._observer.start()

    def stop(self) -> None:
        self._observer.send_stop()

    def resolve(self, replica_gpus: Mapping[str, Iterable[str]]) -> list[GpuPath]:
        """The kernel device path of each replica GPU, by PCI address."""
        import pyudev

        out = []
        for replica, addresses in replica_gpus.items():
            for address in addresses:
                try:
                    dev = pyudev.Devices.from_name(self._context, "pci", address)
                except Exception:  # pyudev raises DeviceNotFoundByNameError and friends
                    continue
                out.append(GpuPath(replica, address, str(dev.device_path)))
        return out


MonitorFactory = Callable[["queue.Queue[dict[str, str]]"], UeventMonitor]
