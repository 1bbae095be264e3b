"""The kernel log, live in the watchdog: lines written to a test kmsg source -> alerts on the
replica whose GPUs they name (rocmseat/watch/kernel.py), the stall's kernel cause, and the
remediation refusal for a lost GPU.

The lines are real corpus lines (tests/fixtures/kernel-log/corpus/) re-addressed to the x99
fixture's GPUs, in the /dev/kmsg record format of Documentation/ABI/testing/dev-kmsg.
"""

from __future__ import annotations

import os
from pathlib import Path

from rocmseat.sysfs.kernlog import KernelEvent, KernelLogParser
from rocmseat.watch import alerts as A
from rocmseat.watch.kernel import HOLD_S, KernelFollower, kernel_node_events
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.scrape import Target
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
    (timeout,) = parsed(TIMEOUT, PROCESS)
    changes = kernel_node_events(timeout, gpus, 0.0)
    assert [(c.replica, c.alert, c.on, c.hold_s) for c in changes] == [
        ("r1", A.GPU_RING_TIMEOUT, True, HOLD_S)]
    assert changes[0].detail.startswith("ring gfx_0.0.0 timeout on 0000:86:00.0 at ")
    (failed,) = parsed(FAILED)
    assert [(c.replica, c.alert, c.on, c.hold_s) for c in kernel_node_events(failed, gpus, 0)] \
        == [("r1", A.GPU_LOST, True, None)]
    (ok,) = parsed(RECOVERED)
    assert [(c.alert, c.on) for c in kernel_node_events(ok, gpus, 0)] == [(A.GPU_LOST, False)]
    (fault,) = parsed(FAULT)
    assert [(c.replica, c.alert) for c in kernel_node_events(fault, gpus, 0)] == [
        ("r0", A.GPU_PAGE_FAULT)]
    assert kernel_node_events(fault, {"r1": R1}, 0) == []  # a GPU no replica holds


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
    assert "failed its reset or fell off the bus" in world.journal()[0]["outcome"]
    world.watcher.kernel.close()
