"""The kernel log, live, on the real vLLM CPU engine (tier `engine`, issue 25): a line written to
a test kmsg source while the replica serves -> the alert within one interval, naming the GPU and
the replica.

A CPU replica holds no PCI GPU, so the watchdog watches the R9700 seat (launchers/
r9700-mxfp4-dflash.toml) placed on the x99-r9700 fixture sysfs tree (as a monitoring host does
for records it cannot read itself), with its port base moved to the port the real CPU engine
serves on: the placement (rocmseat.placement, from the fixture's topology) gives r0 the pair
0000:05:00.0 + 0000:09:00.0, and r0's /metrics is the real engine's. r1 has no engine (down).
The kernel log is a regular file named by ROCMSEAT_KMSG; the lines appended are real corpus
lines (tests/fixtures/kernel-log/corpus/cosmic-epoch-3764.log) re-addressed to r0's GPU, in the
/dev/kmsg record format.
"""

from __future__ import annotations

import time
import tomllib
from typing import Any

import pytest

from tests.conftest import FIXTURES, REPO
from tests.e2e.harness import Proc, Traffic, free_port, gauge, note, scrape, tail, wait_for
from tests.e2e.world import INTERVAL_S, SERVED, World, dump_toml

pytestmark = pytest.mark.engine

X99 = FIXTURES / "sysfs" / "x99-r9700"
GPU = "0000:05:00.0"
LINES = (
    f"3,90001,8123000000,-;amdgpu {GPU}: ring gfx_0.0.0 timeout, signaled seq=57638, "
    "emitted seq=57641",
    f"3,90002,8123000010,-;amdgpu {GPU}:  Process cosmic-comp pid 2288 thread cosmic-com:cs0 "
    "pid 2316",
    f"3,90003,8123000020,-;amdgpu {GPU}: GPU reset begin!. Source:  1",
)


def _watch_seat(world: World) -> Any:
    doc = tomllib.loads((REPO / "launchers" / "r9700-mxfp4-dflash.toml").read_text())
    doc["name"] = "r9700-on-fixture"
    doc["state_dir"] = str(world.root / "watch-state")
    doc["cache_root"] = str(world.root / "watch-cache")
    doc["serve"]["port_base"] = world.engine_port  # r0 = the real CPU engine
    path = world.root / "r9700-watch.toml"
    text = dump_toml(doc).replace('"../checks/x99-r9700.toml"',
                                  f'"{REPO / "checks" / "x99-r9700.toml"}"')
    path.write_text(text)
    return path


def _evaluations(port: int) -> float:
    return gauge(scrape(port), "rocmseat_watch_evaluations_total") or 0.0


def _ring_alert(world: World) -> dict[str, Any] | None:
    for alert in world.webhook.alerts():
        labels = alert.get("labels", {})
        if labels.get("alertname") == "gpu_ring_timeout" and not alert.get("endsAt"):
            return alert
    return None


def test_a_kernel_line_alerts_the_serving_replica_within_one_interval(world: World):
    seat = world.write_seat()
    world.launch(seat)
    kmsg = world.root / "kmsg"
    kmsg.write_text("6,90000,8000000000,-;amdgpu 0000:05:00.0: amdgpu: SMU is resumed "
                    "successfully!\n")
    exporter = free_port()
    watch = Proc(["watch", _watch_seat(world), "--sysfs-root", X99, "--interval",
                  str(INTERVAL_S), "--exporter-listen", f"127.0.0.1:{exporter}",
                  "--webhook", world.webhook.url],
                 world.root / "watch-kernel.log", world.env(ROCMSEAT_KMSG=str(kmsg)))
    try:
        wait_for("the watchdog's kernel follower",
                 lambda: "kernel-events following" in watch.log.read_text(), 90,
                 lambda: tail(watch.log))
        with Traffic(world.engine_port, SERVED) as traffic:
            wait_for("the replica to serve", lambda: traffic.done >= 1, 120,
                     lambda: f"{traffic.errors[-3:]}\n{tail(watch.log)}")
            wait_for("an evaluation", lambda: _evaluations(exporter) >= 2, 30,
                     lambda: tail(watch.log))
            before = _evaluations(exporter)
            written = time.monotonic()
            with kmsg.open("a") as f:
                f.write("\n".join(LINES) + "\n")
            wait_for("the gpu_ring_timeout alert", lambda: _ring_alert(world) is not None,
                     6 * INTERVAL_S, lambda: f"{world.webhook.alerts()[-4:]}\n{tail(watch.log)}")
            latency_s = time.monotonic() - written
            seen_at = _evaluations(exporter)
            served = traffic.done
        alert = _ring_alert(world)
        assert alert is not None
        labels, notes = alert["labels"], alert["annotations"]
        assert labels["replica"] == "r0" and labels["severity"] == "critical", alert
        assert notes["device"] == GPU, alert
        assert notes["event"].startswith(f"ring gfx_0.0.0 timeout on {GPU} at "), alert
        # within one interval: the evaluation in flight when the line was written, or the next
        assert seen_at - before <= 2, (before, seen_at)
        resets = [a for a in world.webhook.alerts()
                  if a["labels"].get("alertname") == "gpu_reset"]
        assert resets and resets[0]["labels"]["replica"] == "r0"
        active = gauge(scrape(exporter), "rocmseat_alert_active", replica="r0",
                       alert="gpu_ring_timeout")
        assert active == 1.0
        note("a_kernel_line_alerts_the_serving_replica_within_one_interval",
             f"gpu_ring_timeout on r0 ({GPU}) {latency_s:.2f} s after the line "
             f"was written (interval {INTERVAL_S:g} s; evaluations {before:.0f} -> "
             f"{seen_at:.0f}); {served} completions served meanwhile")
    finally:
        watch.stop(grace_s=30)
        world.stop_replica()
