"""The slow-spawn lottery on the real vLLM (CPU build), issue 27 item 6: the watchdog learns the
seat's decode rate at matched load from a normal start with traffic; one start is throttled
WITHOUT changing the config key (the key covers env and args: the throttle is the CPU affinity
the launch inherits, one CPU, shared with busy loops pinned there); `replica_slow_spawn` fires
naming the measured factor; a normal restart raises nothing, and the slow start never joined
the history. Three engine starts (one earlier start is history: rocmseat/watch/spawn.py).

Why it holds on a loaded host (CI runs the unit tier beside this one, a busy process on the two
CPUs; a normal start here measured 1.39x slower than the start before it while other work ran):
- the history start runs beside a busy neighbour of its own (an unpinned busy loop, what the
  unit tier is to this tier), so a normal restart beside at most that much measures no slower;
- vLLM's CPU worker binds its OpenMP threads to the CPUs it is allowed
  (vllm/utils/cpu_resource_utils.py get_allowed_cpu_list reads os.sched_getaffinity;
  vllm/utils/ompmultiprocessing.py OMPProcessManager._get_autobind_cpu_ids leaves the last CPU
  of a 2-CPU box to the other processes): a normal start computes on one CPU with the API server
  and scheduler beside it; the throttled start has all of them and three busy loops on one CPU
  (a quarter of it), and background load is scheduled on the other CPU, away from it;
- long completions (192 tokens) keep a window's rate a decode rate, not the client's overhead.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Traffic, note, wait_for
from tests.e2e.test_ready_engine import ready_world, use_drafter  # noqa: F401 (fixture)
from tests.e2e.world import SERVED, World

pytestmark = pytest.mark.engine

SCENARIO = "a_throttled_start_against_the_seats_history"  # the test, as the summary keys it
FIGURE = re.compile(r"spawn-figure running=(\d+) rate=([\d.]+) history=(\S+) starts=(\d+) "
                    r"factor=(\S+)")
FIGURE_S = 240.0  # traffic until the start's figure (5 windows at 2 s; a throttled start is slow)
MAX_TOKENS = 192  # per completion: the seat's max_model_len is 256


@contextlib.contextmanager
def pinned(cpus: set[int]) -> Iterator[None]:
    """This thread on `cpus` while the block runs: a process it starts (the launch, and through
    it the engine) inherits the mask (sched_setaffinity(2): a child created by fork inherits its
    parent's CPU affinity mask, kept across execve)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextlib.contextmanager
def busy(cpus: set[int] | None, loops: int = 1) -> Iterator[None]:
    """Busy loops on `cpus` (None: wherever the scheduler puts them), stopped by pid after.
    Each in a session of its own: with autogroups on (sched(7), "The autogroup feature"; this
    host has them) the CPU is shared between sessions, so loops in one session would take one
    share between them, whatever their number."""
    procs = []
    with pinned(cpus) if cpus else contextlib.nullcontext():
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                  start_new_session=True) for _ in range(loops)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)


def log_lines(world: World) -> list[str]:
    assert world.watch is not None
    return world.watch.log.read_text(errors="replace").splitlines()


def figures_after(world: World, mark: int) -> list[re.Match[str]]:
    return [m for line in log_lines(world)[mark:] if (m := FIGURE.search(line))]


def start(world: World, seat: Path) -> int:
    """Launch (the caller's CPU affinity inherited); returns the watch log's length at launch."""
    mark = len(log_lines(world)) if world.watch is not None else 0
    world.launch(seat)
    if world.watch is None:
        world.start_watch(seat)
    return mark


def figure(world: World, mark: int, what: str) -> re.Match[str]:
    """Traffic until the watchdog logs the start's figure (its first windows at load)."""
    with Traffic(world.engine_port, SERVED, max_tokens=MAX_TOKENS) as traffic:
        found: list[re.Match[str]] = wait_for(f"the {what} start's spawn-figure",
                                              lambda: figures_after(world, mark), FIGURE_S,
                                              world.seen)
    assert not traffic.errors[:1], traffic.errors[:3]
    return found[0]


def slow_spawn_lines(world: World, mark: int, state: str) -> list[str]:
    return [line for line in log_lines(world)[mark:]
            if f"alert=replica_slow_spawn state={state}" in line]


def history(world: World) -> dict[str, dict[str, list[float]]]:
    files = list((world.state_dir / "watch").glob("spawn-*.json"))
    assert len(files) == 1, files
    return dict(json.loads(files[0].read_text())["keys"])


def test_a_throttled_start_against_the_seats_history(ready_world: World) -> None:  # noqa: F811
    world = ready_world
    use_drafter(world, "good.safetensors")  # the target's own weights: acceptance steady
    seat = world.write_seat("spawn-seat.toml")
    one_cpu = {min(os.sched_getaffinity(0))}

    # 1. a normal start with traffic: the seat's history (nothing to judge it against)
    mark = start(world, seat)
    with busy(None):
        first = figure(world, mark, "normal")
    assert first.group(3) == "-" and not slow_spawn_lines(world, mark, "firing")
    if world.warm_from:
        note(SCENARIO, f"first start on the cache of {world.warm_from} (WarmCache)")
    note(SCENARIO, f"normal start beside a busy neighbour: {float(first.group(2)):.2f} decode "
                   f"steps/s per running request at running={first.group(1)} (the history)")
    world.stop_replica()

    # 2. the same seat, the same config key, throttled from its spawn: the engine's CPUs are
    #    set when it starts (inherited), and three busy loops share the one it got (after
    #    READY: the throttle is the serving's, and the start stays within launch's timeout)
    with pinned(one_cpu):
        mark = start(world, seat)
    with busy(one_cpu, loops=3):
        slow = figure(world, mark, "throttled")
        fired = wait_for("replica_slow_spawn firing on the throttled start",
                         lambda: slow_spawn_lines(world, mark, "firing"), 30, world.seen)
    world.stop_replica()
    factor = float(slow.group(5))
    note(SCENARIO, f"throttled start (CPU {sorted(one_cpu)} only, three busy loops there): "
                   f"{float(slow.group(2)):.2f} steps/s at running={slow.group(1)}: "
                   f"factor {factor:.2f}: {fired[0].split('rocmseat-watch ')[-1]}")
    assert f"factor={slow.group(5)}" in fired[0] and "starts=1" in fired[0]
    assert factor >= 1.2

    # 3. a normal restart: the slow start's alert resolves, nothing fires, and the slow start
    #    never joined the history
    mark = start(world, seat)
    normal = figure(world, mark, "normal restart")
    again = float(normal.group(5))
    note(SCENARIO, f"normal restart: {float(normal.group(2)):.2f} steps/s at "
                   f"running={normal.group(1)}: factor {again:.2f}, no alert")
    assert slow_spawn_lines(world, mark, "resolved") and not slow_spawn_lines(world, mark,
                                                                               "firing")
    assert normal.group(4) == "1", "the throttled start joined the history"
    assert again < 1.2
    (buckets,) = history(world).values()
    assert buckets[first.group(1)] == pytest.approx([float(first.group(2))], rel=1e-3)
