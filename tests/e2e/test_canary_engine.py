"""The drafter canary on the real vLLM (CPU build), issue 27 item 4: a seat with `[canary]` on is
launched (launch adds `--per-request-spec-decode-metrics summary`), `rocmseat watch` sends the
fixed prompts at temperature 0 while no request flows and learns each prompt's acceptance for the
config key (the drafter has the target's weights: every draft accepted); then the drafter's
weights are swapped behind the same key (another seed, same shapes: acceptance ~0) and the replica
restarted, and still no request flows: `drafter_canary_failed` fires. The seconds from READY to
the alert are printed in the scenario summary (the goal: within two canary intervals).
"""

from __future__ import annotations

import time

import pytest

from tests.e2e.harness import PROMPTS, Proc, note, tail, wait_for
from tests.e2e.test_ready_engine import ready_world, use_drafter  # noqa: F401 (fixture)
from tests.e2e.world import REPLICA, World, dump_toml

pytestmark = pytest.mark.engine

SCENARIO = "a_drafter_swapped_behind_the_key_with_no_traffic"  # the test, as the summary keys it
CANARY_INTERVAL_S = 10.0
READY_S = 1200.0


def launch(world: World, seat) -> None:
    """World.launch with a readiness wait for a loaded host: a cold compile here has taken more
    than World's 300 s while other engines compiled beside it (the seat's own timeout is raised
    to match)."""
    assert world.running() is None and world.notify is not None
    world.notify.drain()
    world.notify.messages.clear()
    log = world.root / f"launch-{len(world.launches)}.log"
    proc = Proc(["launch", seat, "--replica", REPLICA], log,
                world.env(NOTIFY_SOCKET=str(world.notify_path)))
    world.launches.append(proc)
    notify = world.notify

    def ready() -> bool:
        if not proc.alive():
            raise AssertionError(f"rocmseat launch exited before READY=1:\n{tail(log)}")
        return notify.saw("READY=1")

    wait_for("READY=1 on the notify socket", ready, READY_S + 60,
             lambda: f"notify: {notify.messages[-5:]}\nlaunch log:\n{tail(log)}")


def log_has(world: World, text: str) -> bool:
    return world.watch is not None and text in world.watch.log.read_text(errors="replace")


def test_a_drafter_swapped_behind_the_key_with_no_traffic(ready_world: World):  # noqa: F811
    world = ready_world
    doc = world.seat_doc()
    doc["readiness"]["timeout_s"] = READY_S
    doc["canary"] = {"enabled": True, "interval_s": CANARY_INTERVAL_S, "prompts": list(PROMPTS),
                     "max_tokens": 24}
    seat = world.root / "canary-seat.toml"
    seat.write_text(dump_toml(doc))
    use_drafter(world, "good.safetensors")
    launch(world, seat)
    world.start_watch(seat)
    wait_for("the canary's baseline for the key", lambda: log_has(world, "canary-baseline-learned"),
             300, world.seen)
    learned = next(line for line in world.watch.log.read_text().splitlines()
                   if "canary-baseline-learned" in line)
    note(SCENARIO, f"baseline (good drafter, no traffic): {learned.split('rocmseat-watch ')[-1]}")
    assert not log_has(world, "alert=drafter_canary_failed state=firing")

    world.stop_replica()
    use_drafter(world, "bad.safetensors")  # the same config key: weights are not a factor
    launch(world, seat)
    ready_at = time.monotonic()
    wait_for("drafter_canary_failed with no traffic",
             lambda: log_has(world, "alert=drafter_canary_failed state=firing"),
             600, world.seen)
    seconds = time.monotonic() - ready_at
    line = next(li for li in world.watch.log.read_text().splitlines()
                if "alert=drafter_canary_failed state=firing" in li)
    note(SCENARIO, f"drafter swapped behind the key, no traffic: drafter_canary_failed "
                   f"{seconds:.0f} s after READY (canary interval {CANARY_INTERVAL_S:g} s, "
                   f"watch interval 2 s): {line.split('rocmseat-watch ')[-1]}")
    assert "collapsed=" in line and "rates=0.000" in line
    # launch passed the flag: vLLM logs its non-default args at startup
    # (vllm/entrypoints/serve/utils/api_utils.py: "non-default args: ...")
    startup = world.launches[-1].log.read_text(errors="replace")
    assert "'per_request_spec_decode_metrics': 'summary'" in startup
