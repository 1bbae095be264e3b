"""Remediation on the real vLLM (CPU build), issue 20: the drafter's weights are swapped behind
the same config key (as test_ready_engine does), traffic flows, and `rocmseat watch --remediate`
climbs the ladder on its own: step 1 (caches moved aside, a fresh compile, acceptance still
dead: "not the cache"), step 2 (serving without the drafter, its tokens/s against the collapsed
rate); then the good weights are back and `rocmseat remediate reset r0` brings the drafter
back: `/ready/r0` says ready. Seconds per phase are printed in the scenario summary.

The replica runs under a `[remediate] restart_command`: a small program that hands each restart
to this test (a request file) and returns once it is done; the test is the supervisor: it stops
`rocmseat launch` and starts it again, with `--no-drafter` when ROCMSEAT_REMEDIATE_MODE says so.
Engine starts: the first (cold), the restart on the swapped weights, step 1's fresh compile,
step 2 without the drafter, the reset: five, one at a time.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.harness import Traffic, cli, gauge, note, wait_for
from tests.e2e.test_ready_engine import (  # ready_world: the fixture, shared
    ready,
    ready_world,  # noqa: F401
    use_drafter,
)
from tests.e2e.world import REPLICA, SERVED, World, dump_toml

pytestmark = pytest.mark.engine

SCENARIO = "remediate_ladder"
SUPERVISOR = r"""
import json, os, sys, time
control = sys.argv[1]
n = len([f for f in os.listdir(control) if f.startswith("request-")])
request = os.path.join(control, f"request-{n}.json")
with open(request + ".tmp", "w") as f:
    json.dump({"replica": os.environ["ROCMSEAT_REPLICA"],
               "mode": os.environ["ROCMSEAT_REMEDIATE_MODE"]}, f)
os.replace(request + ".tmp", request)
done = os.path.join(control, f"done-{n}")
deadline = time.monotonic() + 900
while not os.path.exists(done):
    if time.monotonic() > deadline:
        sys.exit("the supervisor did not restart the replica")
    time.sleep(0.2)
sys.exit(int(open(done).read() or 0))
"""


class Supervisor:
    """Serves the restart requests of the restart_command while the test waits."""

    def __init__(self, world: World, seat: Path) -> None:
        self.world, self.seat = world, seat
        self.control = world.root / "control"
        self.control.mkdir()
        self.served: list[tuple[str, float, float]] = []  # mode, asked at, ready after s

    def command(self) -> list[str]:
        script = self.world.root / "supervisor.py"
        script.write_text(SUPERVISOR)
        return [sys.executable, str(script), str(self.control)]

    def serve_pending(self) -> None:
        n = len(self.served)
        request = self.control / f"request-{n}.json"
        if not request.exists():
            return
        mode = json.loads(request.read_text())["mode"]
        asked = time.monotonic()
        self.world.stop_replica()
        self.world.launch(self.seat, *(["--no-drafter"] if mode == "no-drafter" else []))
        self.served.append((mode, asked, time.monotonic() - asked))
        (self.control / f"done-{n}").write_text("0")


def journal(world: World) -> list[dict]:
    folder = world.state_dir / "remediation" / "e2e-cpu" / "journal"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] \
        if folder.is_dir() else []


def ready_line(world: World, min_al: float | None = None) -> str | None:
    """/ready/r0's line when it answers 200 (and, with `min_al`, the judged acceptance length
    is at least that: drafts of the drafter were judged), else None."""
    code, body = ready(world)
    if code != 200:
        return None
    if min_al is not None:
        al = gauge(world.exporter(), "rocmseat_spec_acceptance_length", replica=REPLICA)
        if al is None or al < min_al:
            return None
    return body


def until(world: World, supervisor: Supervisor, what: str, check, timeout_s: float):
    """Serve restarts, traffic flowing, until `check()` returns something."""
    def step():
        supervisor.serve_pending()
        return check()

    with Traffic(world.engine_port, SERVED):
        return wait_for(what, step, timeout_s,
                        lambda: f"journal: {[r['outcome'] for r in journal(world)]}\n"
                        f"{world.seen()}")


def outcome(world: World, step: int, text: str):
    def check():
        return next((r for r in journal(world) if r["step"] == step and r["outcome"] == text),
                    None)
    return check


def test_remediate_ladder(ready_world: World) -> None:  # noqa: F811 (the fixture)
    """The ready test's world (its own copy of the models, good and bad drafter weights)."""
    world = ready_world
    use_drafter(world, "good.safetensors")
    seat = world.root / "seat.toml"
    supervisor = Supervisor(world, seat)
    doc = world.seat_doc()
    doc["remediate"] = {"mode": "on", "restart_command": supervisor.command(),
                        "verify_drafts": 100, "verify_s": 20.0, "ready_timeout_s": 900.0,
                        "verify_timeout_s": 600.0}
    seat.write_text(dump_toml(doc))
    world.launch(seat)
    cold_s = world.last_ready_s
    world.start_watch(seat)

    # the swap: other weights behind the same header, the key unchanged; a restart on the
    # cache (the field's incident)
    use_drafter(world, "bad.safetensors")
    world.stop_replica()
    world.launch(seat)
    t_swap = time.time()  # the swapped engine is READY: traffic starts
    restart_s = world.last_ready_s
    started = until(world, supervisor, "step 1 starts", outcome(world, 1, "started"), 300)
    assert started["why"]["alert"] in ("spec_drafter_dead", "spec_acceptance_drop")
    assert list((world.cache_root).glob("r0.stale-*")), "the cache was moved aside"
    not_cache = until(world, supervisor, "step 1: still collapsed after a fresh compile",
                      outcome(world, 1, "still collapsed after a fresh compile"), 900)
    assert not_cache["diagnosis"] == "not the cache"
    assert not_cache["figures"]["p0"] < 0.2
    step2 = until(world, supervisor, "step 2: serving without the drafter",
                  outcome(world, 2, "serving without the drafter"), 900)
    tps, collapsed = step2["figures"]["tokens_per_s"], step2["figures"]["collapsed_tokens_per_s"]
    assert tps >= collapsed, step2
    assert "r0 runs without its drafter since" in step2["diagnosis"]
    no_drafter_ready = until(world, supervisor, "/ready/r0 200 without the drafter",
                             lambda: ready_line(world), 60)
    # the alert is raised after the evaluation that verified step 2: on the exporter from the
    # next one
    until(world, supervisor, "replica_no_drafter on the exporter",
          lambda: gauge(world.exporter(), "rocmseat_alert_active", replica=REPLICA,
                        alert="replica_no_drafter") == 1.0, 30)

    # the good weights back; the operator resets: the drafter returns
    use_drafter(world, "good.safetensors")
    t_reset = time.time()
    result: list = []
    resetter = threading.Thread(target=lambda: result.append(cli(
        "remediate", "reset", REPLICA, "--seat", seat, "--state-dir", world.state_dir,
        timeout_s=900)), daemon=True)
    resetter.start()
    until(world, supervisor, "the reset's restart", lambda: result or None, 900)
    assert result[0].returncode == 0, result[0].stderr
    back = until(world, supervisor, "/ready/r0 200 with the drafter back",
                 lambda: ready_line(world, min_al=3.0), 300)
    t_back = time.time()
    modes = [m for m, _, _ in supervisor.served]
    assert modes == ["drafter", "no-drafter", "drafter"], supervisor.served
    when = {(r["step"], r["outcome"]): at(r["when"]) for r in journal(world)}
    t1 = when[(1, "started")]
    t1_done = when[(1, "still collapsed after a fresh compile")]
    t2_done = when[(2, "serving without the drafter")]
    note(SCENARIO, f"first start (cold) READY after {cold_s:.0f} s; swapped weights, restart on "
         f"the cache READY after {restart_s:.0f} s")
    note(SCENARIO, f"swap (traffic on the swapped engine) -> step 1 started (dead drafter seen, "
         f"cache moved aside): {t1 - t_swap:.1f} s")
    note(SCENARIO, f"step 1 -> verdict 'not the cache' (p0 {not_cache['figures']['p0']} over "
         f"{not_cache['figures']['drafts']:.0f} drafts of the fresh compile, READY after "
         f"{supervisor.served[0][2]:.0f} s): {t1_done - t1:.1f} s")
    note(SCENARIO, f"step 2 -> serving without the drafter: {t2_done - t1_done:.1f} s (restart "
         f"READY after {supervisor.served[1][2]:.0f} s; {tps} tok/s against {collapsed} "
         f"collapsed); /ready '{no_drafter_ready}'")
    note(SCENARIO, f"reset with the good weights back -> /ready '{back}' with judged drafts: "
         f"{t_back - t_reset:.1f} s (restart READY after {supervisor.served[2][2]:.0f} s)")


def at(iso: str) -> float:
    """Unix time of a journal record's `when` (UTC, ...Z)."""
    import datetime as dt

    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
