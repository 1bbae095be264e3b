"""The kernel log, live in the watchdog: lines written to a test kmsg source -> alerts on the
replica whose GPUs they name (rocmseat/watch/kernel.py), the stall's kernel cause, and the
remediation refusal for a lost GPU.

The lines are real corpus lines (tests/fixtures/kernel-log/corpus/) re-addressed to the x99
fixture's GPUs, in the /dev/kmsg record format of Documentation/ABI/testing/dev-kmsg.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rocmseat.sysfs.kernel_events import CATALOGUE
from rocmseat.sysfs.kernlog import KernelEvent, KernelLogParser
from rocmseat.watch import alerts as A
from rocmseat.watch.kernel import (
    HOLD_S,
    NODE,
    KernelAlerts,
    KernelFollower,
    _alert_for,
    _blocks,
    upstream_paths,
)
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.scrape import Target
from tests.sysfs.conftest import SYSFS_FIXTURES
from tests.watch.conftest import FakeClock

R0 = ("0000:05:00.0", "0000:09:00.0")
R1 = ("0000:86:00.0", "0000:89:00.0")
# corpus/cosmic-epoch-3764.log and corpus/rocm-2804-reset-failed.log, re-addressed
TIMEOUT = "3,1201,8123000000,-;amdgpu 0000:86:00.0: ring gfx_0.0.0 timeout, signaled seq=57638, " \
          "emitted seq=57641"
PROCESS = "3,1202,8123000010,-;amdgpu 0000:86:00.0:  Process python3 pid 2288 thread python3 " \
          "pid 2316"
FAILED = "3,1203,8126000000,-;amdgpu 0000:86:00.0: amdgpu: GPU reset(1) failed"
FAULT = "3,1204,8127000000,-;amdgpu 0000:05:00.0: amdgpu: [gfxhub] page fault (src_id:0 " \
        "ring:24 vmid:8 pasid:32770, for process python pid 1796 thread python pid 1796)"
RECOVERED = "6,1205,8128000000,-;amdgpu 0000:86:00.0: amdgpu: GPU reset succeeded, trying to " \
            "resume"


def parsed(*lines: str):
    parser = KernelLogParser()
    out = []
    for line in lines:
        out += parser.feed(line)
    return [e for e in out + parser.flush() if isinstance(e, KernelEvent)]


def test_an_event_alerts_only_the_replica_holding_its_gpu():
    gpus = {"r0": R0, "r1": R1}
    state = KernelAlerts()
    (timeout,) = parsed(TIMEOUT, PROCESS)
    changes = state.apply(timeout, gpus, 0.0)
    assert [(c.replica, c.alert, c.on, c.hold_s) for c in changes] == [
        ("r1", A.GPU_RING_TIMEOUT, True, HOLD_S)]
    assert changes[0].detail.startswith("ring gfx_0.0.0 timeout on 0000:86:00.0 at ")
    (failed,) = parsed(FAILED)
    assert [(c.replica, c.alert, c.on, c.hold_s) for c in state.apply(failed, gpus, 0)] \
        == [("r1", A.GPU_LOST, True, None)]
    (ok,) = parsed(RECOVERED)
    assert [(c.alert, c.on) for c in state.apply(ok, gpus, 0)] == [(A.GPU_LOST, False)]
    (fault,) = parsed(FAULT)
    assert [(c.replica, c.alert) for c in state.apply(fault, gpus, 0)] == [
        ("r0", A.GPU_PAGE_FAULT)]
    assert state.apply(fault, {"r1": R1}, 0) == []  # a GPU no replica holds


# ----- issue 34 item 6: per GPU, every fatal class, the path above the GPU, the node ----------
# amdgpu_device.c amdgpu_device_health_check(): dev_err(adev->dev, "device lost from bus!")
# (6.10+); amdgpu_device.c amdgpu_do_asic_reset(): dev_info(tmp_adev->dev, "GPU reset
# succeeded, trying to resume") (every kernel since 4.x)
LOST_05 = "3,2001,9000000000,-;amdgpu 0000:05:00.0: amdgpu: device lost from bus!"
RESET_OK_09 = ("6,2002,9001000000,-;amdgpu 0000:09:00.0: amdgpu: GPU reset succeeded, trying "
               "to resume")
RESET_OK_05 = ("6,2003,9002000000,-;amdgpu 0000:05:00.0: amdgpu: GPU reset succeeded, trying "
               "to resume")
# corpus/rocm-32.log (a root port's fatal AER above an amdgpu GPU), re-addressed to x99's root
# port 0000:00:02.0 above r0's 0000:05:00.0: aer.c aer_print_error() "PCIe Bus Error:
# severity=%s, type=%s, ..." with "Uncorrected (Fatal)" (5.x; "Uncorrectable (Fatal)" 6.x)
AER_ROOT = ("3,2010,9010000000,-;pcieport 0000:00:02.0: PCIe Bus Error: severity=Uncorrected "
            "(Fatal), type=Transaction Layer, id=0010(Receiver ID)")
AER_BIT = "3,2011,9010000100,-;pcieport 0000:00:02.0:    [18] Malformed TLP          (First)"
# the same on r0's GPU's own upstream (switch) port 0000:03:00.0, 6.x wording
AER_USP = ("3,2012,9011000000,-;pcieport 0000:03:00.0: PCIe Bus Error: severity=Uncorrectable "
           "(Fatal), type=Transaction Layer, (Requester ID)")
# amdgpu_ras.c amdgpu_ras_error_print_error_data(): "%ld uncorrectable hardware errors detected
# in %s block"; amdgpu_umc.c: "Poison is consumed by client %d"; amdgpu_ras_eeprom.c
# amdgpu_ras_eeprom_check(): "RAS records:%d exceed threshold:%d"
RAS_UE = ("3,2020,9020000000,-;amdgpu 0000:05:00.0: amdgpu: 2 uncorrectable hardware errors "
          "detected in umc block")
POISON = "3,2021,9021000000,-;amdgpu 0000:05:00.0: amdgpu: Poison is consumed by client 11"
THRESHOLD = "4,2022,9022000000,-;amdgpu 0000:05:00.0: amdgpu: RAS records:130 exceed threshold:128"
# corpus/yoga-linux-38.log: amdgpu_job.c amdgpu_job_timedout()'s DRM_ERROR of older kernels,
# which names no device
DRM_TIMEOUT = ("3,2030,9030000000,-;[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring sdma0 "
               "timeout, signaled seq=121570, emitted seq=121572")
# amdgpu_job.c of the same era: DRM_ERROR("GPU Recovery Failed: %d\n", r), no device
DRM_RECOVERY_FAILED = ("3,2031,9031000000,-;[drm:amdgpu_job_timedout [amdgpu]] *ERROR* GPU "
                       "Recovery Failed: -22")
X99 = SYSFS_FIXTURES / "x99-r9700"
GPUS = {"r0": R0, "r1": R1}


def _apply(state: KernelAlerts, *lines: str, gpus=GPUS):
    return [c for e in parsed(*lines) for c in state.apply(e, gpus, 0.0)]


def test_a_reset_on_the_other_gpu_never_resolves_a_lost_one():
    """Before: the TP2 replica's `gpu_lost` on 05:00.0 was resolved by "GPU reset succeeded"
    on 09:00.0 (the alert was the replica's, not the GPU's)."""
    state = KernelAlerts()
    assert [(c.replica, c.alert, c.on) for c in _apply(state, LOST_05)] == [
        ("r0", A.GPU_LOST, True)]
    assert _apply(state, RESET_OK_09) == []  # the other GPU came back: 05:00.0 did not
    held = state.blocking(R0)
    assert held is not None and held.startswith(
        "gpu_lost: device lost from the bus on 0000:05:00.0 at ")
    assert state.blocking(R1) is None
    assert [(c.replica, c.alert, c.on) for c in _apply(state, RESET_OK_05)] == [
        ("r0", A.GPU_LOST, False)]
    assert state.blocking(R0) is None


@pytest.mark.parametrize("event_class", [c.name for c in CATALOGUE if c.severity == "fatal"])
def test_every_fatal_class_raises_an_alert_and_blocks(event_class):
    event = KernelEvent(event_class, R0[1], "amdgpu", None, None, None, None, None, None, "m")
    state = KernelAlerts()
    changes = state.apply(event, GPUS, 0.0)
    assert _blocks(event_class) and _alert_for(event_class) is not None
    assert [(c.replica, c.on, c.hold_s) for c in changes] == [("r0", True, None)]
    assert A.SEVERITY[changes[0].alert] == "critical"
    assert state.blocking(R0) is not None and state.blocking(R1) is None


def test_an_unknown_fatal_class_still_alerts():
    """A class the catalogue adds later is fatal by its severity: gpu_fatal until it says."""
    assert _alert_for("no_such_class") is None and not _blocks("no_such_class")
    fatal = [c.name for c in CATALOGUE if c.severity == "fatal"]
    assert {_alert_for(name) for name in fatal} <= {
        A.GPU_LOST, A.GPU_AER_FATAL, A.GPU_RAS_UNCORRECTABLE, A.GPU_BAD_PAGE_THRESHOLD,
        A.GPU_FATAL}
    assert not [c.name for c in CATALOGUE if c.severity != "fatal" and _blocks(c.name)]


@pytest.mark.parametrize(("line", "alert"), [
    (RAS_UE, A.GPU_RAS_UNCORRECTABLE), (POISON, A.GPU_RAS_UNCORRECTABLE),
    (THRESHOLD, A.GPU_BAD_PAGE_THRESHOLD)])
def test_ras_lines_alert_the_replica_and_hold_it(line, alert):
    """Before: no alert at all for RAS uncorrectable, poison or the bad-page threshold."""
    state = KernelAlerts()
    assert [(c.replica, c.alert, c.on) for c in _apply(state, line)] == [("r0", alert, True)]
    assert state.blocking(R0) is not None
    _apply(state, RESET_OK_05)
    # a reset clears the RAS error, never the retired pages (the GPU's EEPROM table)
    assert (state.blocking(R0) is None) == (alert != A.GPU_BAD_PAGE_THRESHOLD)


def test_the_x99_tree_gives_each_gpu_its_bridges():
    paths = upstream_paths(X99, [*R0, *R1, "0000:ff:00.0"])
    assert paths["0000:05:00.0"] == ("0000:04:00.0", "0000:03:00.0", "0000:00:02.0")
    assert paths["0000:09:00.0"][-1] == "0000:00:03.0"
    assert "0000:ff:00.0" not in paths  # not in the tree: no bridges, its lines still count


@pytest.mark.parametrize(("lines", "port"), [((AER_ROOT, AER_BIT), "0000:00:02.0"),
                                             ((AER_USP,), "0000:03:00.0")])
def test_a_fatal_aer_on_a_bridge_above_the_gpu_reaches_its_replica(lines, port):
    """Before: dropped (the line names the port, not the GPU)."""
    state = KernelAlerts(upstream=upstream_paths(X99, [*R0, *R1]))
    changes = _apply(state, *lines)
    assert [(c.replica, c.alert, c.on, c.device) for c in changes] == [
        ("r0", A.GPU_AER_FATAL, True, port)]
    assert "(upstream of 0000:05:00.0)" in changes[0].detail
    assert state.blocking(R0) is not None and state.blocking(R1) is None
    assert _apply(KernelAlerts(), *lines) == []  # without the tree: no GPU named


def test_a_line_naming_no_device_is_the_nodes():
    """Before: silence (an event with no device went nowhere)."""
    state = KernelAlerts()
    changes = _apply(state, DRM_TIMEOUT)
    assert [(c.replica, c.alert, c.device, c.hold_s) for c in changes] == [
        ("r0", A.GPU_RING_TIMEOUT, NODE, HOLD_S), ("r1", A.GPU_RING_TIMEOUT, NODE, HOLD_S)]
    assert "on an unnamed GPU of the node at " in changes[0].detail
    assert state.blocking(R0) is None  # a ring timeout is no fatal class
    lost = _apply(state, DRM_RECOVERY_FAILED)
    assert [(c.replica, c.alert, c.device) for c in lost] == [
        ("r0", A.GPU_LOST, NODE), ("r1", A.GPU_LOST, NODE)]
    # r0's GPUs both came back: r0 is free, r1 (whose GPU it may have been) is not
    assert _apply(state, RESET_OK_05) == []
    assert [(c.replica, c.alert, c.on) for c in _apply(state, RESET_OK_09)] == [
        ("r0", A.GPU_LOST, False)]
    assert state.blocking(R0) is None
    assert state.blocking(R1) is not None and "unnamed GPU of the node" in state.blocking(R1)


def test_fatal_lines_alert_within_one_step_of_the_watcher(tmp_path):
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    clock, transitions = FakeClock(), []
    w = Watcher([Target("r0", "http://x/metrics", gpus=R0),
                 Target("r1", "http://y/metrics", gpus=R1)],
                WatchConfig(state_dir=tmp_path, down_after=99), fetch=lambda u, t: "up 1\n",
                clock=clock, on_transition=transitions.append)
    w.kernel = KernelFollower(kmsg, upstream_paths(X99, [*R0, *R1]))
    try:
        assert w.kernel.start() is None
        w.step()
        with kmsg.open("a") as f:
            f.write("\n".join([AER_ROOT, AER_BIT, LOST_05, RESET_OK_09]) + "\n")
        clock.tick(2)
        w.step()
        fired = {(t.replica, t.alert) for t in transitions if t.state == "firing"}
        assert fired == {("r0", A.GPU_AER_FATAL), ("r0", A.GPU_LOST)}
        assert not [t for t in transitions if t.state == "resolved"]
        status = next(s for s in w.statuses if s.replica == "r0")
        assert status.blocked_by is not None and "gpu_lost" in status.blocked_by
        assert w.blocking_alert("r0") == status.blocked_by and w.blocking_alert("r1") is None
        clock.tick(HOLD_S * 3)
        w.step()  # fatal alerts are no one-shots
        assert not [t for t in transitions if t.state == "resolved"]
    finally:
        w.kernel.close()
        w.close()


def stalled_page(tokens: float) -> str:
    return ("vllm:num_requests_running 2\n"
            f"vllm:generation_tokens_total {tokens}\n")


def test_the_watcher_alerts_within_one_step_and_names_the_stalls_cause(tmp_path):
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("6,1,1000,-;amdgpu 0000:86:00.0: amdgpu: SMU is resumed successfully!\n")
    clock, transitions = FakeClock(), []
    w = Watcher([Target("r0", "http://x/metrics", gpus=R0),
                 Target("r1", "http://y/metrics", gpus=R1)],
                WatchConfig(state_dir=tmp_path, down_after=99, stall_after_s=1.0,
                            expect_spec=False),
                fetch=lambda url, timeout: stalled_page(5), clock=clock,
                on_transition=transitions.append)
    w.kernel = KernelFollower(kmsg)
    assert w.kernel.start() is None
    w.step()
    # the follower starts at the log's end: the old line is history
    assert [t for t in transitions if t.alert.startswith("gpu_")] == []
    with kmsg.open("a") as f:
        f.write(f"{TIMEOUT}\n{PROCESS}\n{FAULT}\n")
    clock.tick(2)
    w.step()
    fired = {(t.replica, t.alert) for t in transitions if t.state == "firing"}
    assert {("r1", A.GPU_RING_TIMEOUT), ("r0", A.GPU_PAGE_FAULT)} <= fired
    ring = next(t for t in transitions if t.alert == A.GPU_RING_TIMEOUT)
    assert "device=0000:86:00.0" in ring.log_line()
    assert dict(ring.details)["event"].startswith("ring gfx_0.0.0 timeout on 0000:86:00.0 at ")
    clock.tick(2)
    w.step()
    stall = next(t for t in transitions if t.alert == A.REPLICA_STALLED and t.replica == "r1")
    assert dict(stall.details)["kernel_cause"].startswith(
        "ring gfx_0.0.0 timeout on 0000:86:00.0 at ")
    clock.tick(HOLD_S + 1)
    w.step()
    resolved = {(t.replica, t.alert) for t in transitions if t.state == "resolved"}
    assert ("r1", A.GPU_RING_TIMEOUT) in resolved
    w.kernel.close()
    w.close()


def test_a_fifo_source_and_a_lost_gpu_held_until_a_good_reset(tmp_path):
    fifo = tmp_path / "kmsg"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    clock, transitions = FakeClock(), []
    w = Watcher([Target("r1", "http://y/metrics", gpus=R1)],
                WatchConfig(state_dir=tmp_path, down_after=99), fetch=lambda u, t: "up 1\n",
                clock=clock, on_transition=transitions.append)
    w.kernel = KernelFollower(fifo)
    try:
        assert w.kernel.start() is None
        os.write(writer, (FAILED + "\n").encode())
        w.step()
        assert [(t.alert, t.state) for t in transitions] == [(A.GPU_LOST, "firing")]
        clock.tick(HOLD_S * 3)
        w.step()
        assert len(transitions) == 1  # a lost GPU is not a one-shot: it stays
        os.write(writer, (RECOVERED + "\n").encode())
        w.step()
        assert [(t.alert, t.state) for t in transitions][-1] == (A.GPU_LOST, "resolved")
    finally:
        os.close(writer)
        w.kernel.close()
        w.close()


def test_an_unreadable_source_is_said_not_followed(tmp_path):
    follower = KernelFollower(tmp_path / "missing")
    assert follower.start() is not None and follower.poll() == []
    assert KernelFollower(Path(tmp_path)).start() is not None  # a directory


def test_remediation_never_restarts_a_replica_whose_gpu_is_lost(tmp_path):
    """The remediation world of tests/watch/test_remediate.py (a launched seat, a real Watcher
    and Remediator): its r0 holds 0000:10:00.0 + 0000:11:00.0. A "device lost from bus!" line
    on r0's GPU, then the drafter collapses: refused, journalled, never restarted."""
    from tests.watch.test_remediate import World, collapse

    world = World(tmp_path)
    world.watcher.set_targets([Target(t.name, t.url, t.cache_dir, ("0000:10:00.0",
                                                                    "0000:11:00.0"))
                               for t in world.watcher.targets])
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    world.watcher.kernel = KernelFollower(kmsg)
    assert world.watcher.kernel.start() is None
    world.step(3)
    # corpus/vkd3d-2963.log, re-addressed to r0's GPU
    kmsg.write_text("3,7,9000000,-;amdgpu 0000:10:00.0: amdgpu: device lost from bus!\n")
    collapse(world)
    world.step(2)
    assert A.GPU_LOST in world.status().alerts
    assert world.restarts == []
    outcome = world.journal()[0]["outcome"]
    assert outcome.startswith("refused: r0 is held: gpu_lost: device lost from the bus on "
                              "0000:10:00.0 at "), outcome
    world.watcher.kernel.close()


def test_remediation_stays_held_when_the_other_gpu_resets(tmp_path):
    """A TP2 replica: "device lost from bus!" on 0000:10:00.0, then "GPU reset succeeded" on
    0000:11:00.0, then the drafter collapses. Before: the reset resolved `gpu_lost` and
    remediation restarted a replica whose GPU is gone. The hold is said when it begins (trigger
    or not) and when it ends."""
    from tests.watch.test_remediate import World, collapse

    world = World(tmp_path)
    world.watcher.set_targets([Target(t.name, t.url, t.cache_dir, ("0000:10:00.0",
                                                                    "0000:11:00.0"))
                               for t in world.watcher.targets])
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    world.watcher.kernel = KernelFollower(kmsg)
    assert world.watcher.kernel.start() is None
    world.step(3)
    with kmsg.open("a") as f:
        f.write("3,7,9000000,-;amdgpu 0000:10:00.0: amdgpu: device lost from bus!\n")
    world.step(1)
    held = [line for line in world.lines if " held why=" in line]
    assert held and held[0].startswith("rocmseat-remediate replica=r0 held why=gpu_lost:")
    with kmsg.open("a") as f:
        f.write("6,8,9100000,-;amdgpu 0000:11:00.0: amdgpu: GPU reset succeeded, trying to "
                "resume\n")
    collapse(world)
    world.step(4)
    assert A.GPU_LOST in world.status().alerts
    assert world.restarts == []
    assert [r["outcome"][:27] for r in world.journal()] == ["refused: r0 is held: gpu_lo"]
    assert not [line for line in world.lines if "hold-lifted" in line]
    with kmsg.open("a") as f:
        f.write("6,9,9200000,-;amdgpu 0000:10:00.0: amdgpu: GPU reset succeeded, trying to "
                "resume\n")
    world.step(1)
    assert A.GPU_LOST not in world.status().alerts
    assert "rocmseat-remediate replica=r0 hold-lifted" in world.lines
    world.watcher.kernel.close()


def test_a_held_gpu_stops_the_next_step_of_one_being_verified(tmp_path):
    """Step 1 runs (caches moved aside, restarted); the GPU is lost before its verdict; the
    verdict "not the cache" would start step 2 at once (a continuation): it is refused instead,
    and the replica is restarted no more."""
    from rocmseat.watch.remediate import policy as P
    from tests.watch.test_remediate import World, collapse

    world = World(tmp_path, after_restart={
        "drafter": {"alpha": 0.02, "tokens": 110.0},  # the drafter's weights are wrong
        "no-drafter": {"alpha": 0.0, "tokens": 200.0, "spec": False}})
    world.watcher.set_targets([Target(t.name, t.url, t.cache_dir, ("0000:10:00.0",
                                                                    "0000:11:00.0"))
                               for t in world.watcher.targets])
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    world.watcher.kernel = KernelFollower(kmsg)
    assert world.watcher.kernel.start() is None
    world.step(3)
    collapse(world)
    world.step(1)
    assert world.outcomes()[:1] == [("r0", 1, P.MOVE_CACHE_RESTART, "started")]
    with kmsg.open("a") as f:
        f.write("3,7,9000000,-;amdgpu 0000:11:00.0: amdgpu: device lost from bus!\n")
    world.step(4)
    assert world.restarts == [("r0", "drafter")]
    outcomes = world.outcomes()
    assert outcomes[1][3] == "still collapsed after a fresh compile", outcomes
    assert [o for o in outcomes if o[2] == P.RESTART_NO_DRAFTER] == []
    refused = [o for o in outcomes[2:] if o[3].startswith("refused: r0 is held: gpu_lost")]
    assert refused, outcomes
    world.watcher.kernel.close()


def test_the_service_follows_the_log_with_each_gpus_bridges(tmp_path):
    """`rocmseat watch SEAT --sysfs-root ROOT` hands the node's root to the follower
    (rocmseat.cli.watch -> Parts.sysfs_root -> _start_kernel_events)."""
    from rocmseat.watch.service import _start_kernel_events

    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    lines: list[str] = []
    w = Watcher([Target("r0", "http://x/metrics", gpus=R0)], WatchConfig(state_dir=tmp_path),
                fetch=lambda u, t: "up 1\n")
    follower = _start_kernel_events(w.targets, w, lines.append, kmsg, X99)
    try:
        assert follower is not None and w.kernel is follower
        assert follower.alerts.upstream["0000:05:00.0"][-1] == "0000:00:02.0"
        assert lines == [f"rocmseat-watch kernel-events following path={kmsg} gpus=2 bridges=6"]
    finally:
        if follower is not None:
            follower.close()
        w.close()
