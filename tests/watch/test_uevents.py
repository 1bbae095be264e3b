"""Node events: recorded uevent property sets -> alerts for the replica whose GPU they touch.

The property sets are what `udevadm monitor --kernel --property` prints for the kernel's
KOBJ_CHANGE uevents: pci_uevent_ers() (drivers/pci/pci-driver.c), drm_dev_wedged_event()
(drivers/gpu/drm/drm_drv.c); devpaths as on a dual-socket R9700 host, where each GPU endpoint
sits behind the card's internal switch (root port -> upstream port -> downstream port -> GPU).
"""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rocmseat.watch import alerts as A
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.scrape import Target
from rocmseat.watch.uevents import GpuPath, node_events
from tests.conftest import FIXTURES, REPO
from tests.watch.conftest import Answer, FakeClock, page

R0_GPU = "/devices/pci0000:00/0000:00:01.1/0000:03:00.0/0000:04:00.0/0000:05:00.0"
R0_GPU2 = "/devices/pci0000:00/0000:00:03.1/0000:07:00.0/0000:08:00.0/0000:09:00.0"
R1_GPU = "/devices/pci0000:80/0000:80:01.1/0000:84:00.0/0000:85:00.0/0000:86:00.0"
GPUS = [GpuPath("r0", "0000:05:00.0", R0_GPU), GpuPath("r0", "0000:09:00.0", R0_GPU2),
        GpuPath("r1", "0000:86:00.0", R1_GPU)]


def aer(devpath, event, online):
    return {"ACTION": "change", "DEVPATH": devpath, "SUBSYSTEM": "pci", "DRIVER": "pcieport",
            "PCI_CLASS": "60400", "PCI_ID": "1022:1483", "PCI_SLOT_NAME": devpath.rsplit("/", 1)[1],
            "MODALIAS": "pci:v00001022d00001483sv00000000sd00000000bc06sc04i00",
            "ERROR_EVENT": event, "DEVICE_ONLINE": online, "SEQNUM": "5821"}


def drm(devpath, **extra):
    return {"ACTION": "change", "DEVPATH": devpath + "/drm/card1", "SUBSYSTEM": "drm",
            "DEVNAME": "/dev/dri/card1", "DEVTYPE": "drm_minor", "MAJOR": "226", "MINOR": "1",
            "SEQNUM": "6120", **extra}


def test_begin_recovery_on_the_root_port_above_r0_gpu():
    events = node_events(aer("/devices/pci0000:00/0000:00:01.1", "BEGIN_RECOVERY", "0"), GPUS)
    assert [(e.replica, e.alert, e.on) for e in events] == [("r0", A.GPU_AER_RECOVERY, True)]
    assert events[0].device == "0000:00:01.1"


def test_successful_and_failed_recovery():
    ok = node_events(aer(R1_GPU, "SUCCESSFUL_RECOVERY", "1"), GPUS)
    assert {(e.replica, e.alert, e.on) for e in ok} == {
        ("r1", A.GPU_AER_RECOVERY, False), ("r1", A.GPU_AER_FAILED, False)}
    bad = node_events(aer("/devices/pci0000:80/0000:80:01.1/0000:84:00.0", "FAILED_RECOVERY", "0"),
                      GPUS)
    assert {(e.replica, e.alert, e.on) for e in bad} == {
        ("r1", A.GPU_AER_RECOVERY, False), ("r1", A.GPU_AER_FAILED, True)}


def test_wedged_none_is_a_reset_that_holds_then_resolves():
    events = node_events(drm(R0_GPU2, WEDGED="none", PID="4242", TASK="python3"), GPUS)
    assert [(e.replica, e.alert, e.on) for e in events] == [("r0", A.GPU_RESET, True)]
    assert events[0].hold_s is not None and "PID=4242 TASK=python3" in events[0].detail


@pytest.mark.parametrize("method", ["rebind", "bus-reset", "rebind,bus-reset", "unknown",
                                    "vendor-specific"])
def test_wedged_needing_recovery(method):
    events = node_events(drm(R1_GPU, WEDGED=method), GPUS)
    assert [(e.replica, e.alert, e.on) for e in events] == [("r1", A.GPU_WEDGED, True)]


@pytest.mark.parametrize("props", [{"RESET": "1", "PID": "77", "NAME": "vllm", "FLAGS": "1"},
                                   {"AMDGPURESET": "1"}])
def test_amdgpu_reset_uevents(props):
    events = node_events(drm(R0_GPU, **props), GPUS)
    assert [(e.replica, e.alert) for e in events] == [("r0", A.GPU_RESET)]


def test_driver_bind_on_the_gpu_resolves_wedged():
    props = {"ACTION": "bind", "DEVPATH": R1_GPU, "SUBSYSTEM": "pci", "DRIVER": "amdgpu"}
    assert {(e.alert, e.on) for e in node_events(props, GPUS)} == {
        (A.GPU_WEDGED, False), (A.GPU_AER_FAILED, False)}


@pytest.mark.parametrize("props", [
    aer("/devices/pci0000:40/0000:40:01.1", "BEGIN_RECOVERY", "0"),  # another socket's port
    aer(R0_GPU + "/0000:05:00.1", "BEGIN_RECOVERY", "0") | {"DEVPATH": R0_GPU[:-1] + "1"},
    {"ACTION": "change", "DEVPATH": R0_GPU + "/drm/card1", "SUBSYSTEM": "drm", "HOTPLUG": "1"},
    {"ACTION": "add", "DEVPATH": "/devices/virtual/net/veth1", "SUBSYSTEM": "net"},
    {"ACTION": "change", "SUBSYSTEM": "pci"},
    {},
])
def test_unrelated_events_do_nothing(props):
    assert node_events(props, GPUS) == []


def test_watcher_turns_queued_events_into_transitions_and_expires_resets(tmp_path):
    clock, transitions = FakeClock(), []

    def fetch(url, timeout):
        return "# no vllm here\nup 1\n"

    w = Watcher([Target("r0", "http://x/metrics"), Target("r1", "http://y/metrics")],
                WatchConfig(state_dir=tmp_path, down_after=99), fetch=fetch, clock=clock,
                on_transition=transitions.append, gpu_paths=GPUS)
    w.events.put(drm(R0_GPU, WEDGED="none"))
    w.events.put(aer("/devices/pci0000:80/0000:80:01.1", "BEGIN_RECOVERY", "0"))
    w.step()
    assert [(t.replica, t.alert, t.state) for t in transitions] == [
        ("r0", A.GPU_RESET, "firing"), ("r1", A.GPU_AER_RECOVERY, "firing")]
    assert transitions[0].log_line() == (
        "rocmseat-watch replica=r0 alert=gpu_reset state=firing device=card1 event=WEDGED=none")
    clock.tick(601)
    w.step()
    w.close()
    assert (transitions[-1].replica, transitions[-1].alert, transitions[-1].state) == (
        "r0", A.GPU_RESET, "resolved")


# ----- the monitor's wiring in the service (watch/service.py run_service) --------------------
class FakeUdev:
    """A stand-in for pyudev (the library's netlink monitor needs a live udev): it resolves a
    PCI address to its kernel device path from a sysfs tree the way udev does (the target of
    bus/pci/devices/<address>) and lets the test deliver uevents to the observer's callback."""

    def __init__(self, sysfs: Path) -> None:
        self.sysfs = sysfs
        self.filters: list[str] = []
        self.resolved: list[str] = []
        self.callback: Callable[[Any], None] | None = None
        self.started = threading.Event()
        self.stopped = threading.Event()
        fake = self

        class Observer:
            def __init__(self, monitor: object, *, callback: Callable[[Any], None],
                         name: str) -> None:
                fake.callback = callback

            def start(self) -> None:
                fake.started.set()

            def send_stop(self) -> None:
                fake.stopped.set()

        def from_name(context: object, subsystem: str, name: str) -> SimpleNamespace:
            link = self.sysfs / "bus" / subsystem / "devices" / name
            fake.resolved.append(name)
            return SimpleNamespace(device_path="/" + str(link.resolve().relative_to(
                self.sysfs.resolve())))

        self.module = types.ModuleType("pyudev")
        self.module.Context = lambda: object()  # type: ignore[attr-defined]
        self.module.Monitor = SimpleNamespace(  # type: ignore[attr-defined]
            from_netlink=lambda context: SimpleNamespace(filter_by=self.filters.append))
        self.module.MonitorObserver = Observer  # type: ignore[attr-defined]
        self.module.Devices = SimpleNamespace(from_name=from_name)  # type: ignore[attr-defined]

    def send(self, props: dict[str, str]) -> None:
        assert self.callback is not None
        self.callback(SimpleNamespace(properties=props, action=props.get("ACTION"),
                                      device_path=props["DEVPATH"]))


def test_the_service_resolves_and_starts_the_monitor_for_an_auto_seat(tmp_path, monkeypatch,
                                                                    page_server):
    """Issue 10: for an auto seat (the flagship) watch knew no GPU path, so the node-event
    monitor never started. Its targets now carry each replica's pair (from the placement launch
    recorded); the service resolves them to device paths, starts the monitor, and an AER
    failure on r1's root port reaches r1 as an alert."""
    from rocmseat.launch import flow
    from rocmseat.placement.recorded import write_recorded
    from rocmseat.seat.load import load_seat
    from rocmseat.watch.service import Sinks, run_service
    from rocmseat.watch.targets import seat_targets

    x99 = FIXTURES / "sysfs" / "x99-r9700"
    port = int(page_server.url.split(":")[2].split("/")[0])
    seat_file = tmp_path / "seat.toml"
    seat_file.write_text((REPO / "launchers" / "r9700-mxfp4-dflash.toml").read_text()
                         .replace('"../checks/x99-r9700.toml"',
                                  f'"{REPO / "checks" / "x99-r9700.toml"}"')
                         .replace("port_base = 8000", f"port_base = {port - 1}"))
    seat = load_seat(seat_file)
    state = tmp_path / "state"
    # launch ran r1 only
    write_recorded(flow.place_for_launch(seat, x99, state_dir=state).records[1])
    # a monitoring host: its /sys shows no GPU, the placement launch recorded is all there is
    targets = seat_targets(seat, state, sysfs_root=FIXTURES / "sysfs" / "no-amdgpu")
    assert [(t.name, t.gpus) for t in targets] == [("r1", ("0000:86:00.0", "0000:89:00.0"))]

    udev = FakeUdev(x99)
    monkeypatch.setitem(sys.modules, "pyudev", udev.module)
    page_server.play(Answer(page("00-healthy.txt")))
    lines: list[str] = []
    stop = threading.Event()
    config = WatchConfig(interval_s=0.05, timeout_s=1.0, state_dir=state,
                         key_prefix=seat.name, down_after=99)
    service = threading.Thread(target=run_service, args=(targets, config, Sinks("off")),
                               kwargs={"log": lines.append, "stop": stop}, daemon=True)
    service.start()
    try:
        assert udev.started.wait(10), lines
        assert udev.filters == ["pci", "drm"] and udev.resolved == ["0000:86:00.0",
                                                                     "0000:89:00.0"]
        assert "rocmseat-watch node-events watching 2 GPU(s)" in lines
        udev.send(aer("/devices/pci0000:80/0000:80:02.0", "FAILED_RECOVERY", "0"))
        want = "rocmseat-watch replica=r1 alert=gpu_aer_failed state=firing"
        deadline = time.monotonic() + 10
        while not any(line.startswith(want) for line in lines) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(line.startswith(want) for line in lines), lines
    finally:
        stop.set()
        service.join(10)
    assert not service.is_alive() and udev.stopped.is_set()
