"""`/ready/r0` on the real vLLM (CPU build): 200 with a good drafter, 503 when the drafter
dies, 200 again after it recovers (issue 13): the engine relaunched with good weights is ready
at once (a restart clears the dead-drafter verdict, docs/watch.md) and stays ready on its
drafts. Only rocmseat's CLI (launch, watch) and the engine's HTTP API drive it; the watchdog's
listener is read like a load balancer would.

The drafter "dies" the way it did in the field: same shapes, same config, same safetensors
header, other weights (tests/fixtures/recorded/README.md), so the config key does not change
and only the counters can tell. Three engine starts (~40-60 s each on this machine): healthy,
dead drafter, recovered. This module keeps its own copy of the models: test_whole_loop swaps
the weights of the session's `drafter` in place.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import Traffic, gauge, note, wait_for
from tests.e2e.world import REPLICA, SERVED, World

pytestmark = pytest.mark.engine

SCENARIO = "ready_follows_the_drafter"
VERDICT_BOUND_S = 60.0  # traffic flows in the meantime; the watch interval is 2 s


@pytest.fixture(scope="module")
def ready_world(engine_python: Path, demo_models: Path,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("ready")
    models = root / "models"
    models.mkdir()
    shutil.copytree(demo_models / "target", models / "target")
    # the target's own weights as the drafter: every drafted token is accepted (AL 1 + K)
    shutil.copytree(demo_models / "target", models / "drafter")
    shutil.copyfile(demo_models / "target" / "model.safetensors", root / "good.safetensors")
    shutil.copyfile(demo_models / "drafter-other" / "model.safetensors", root / "bad.safetensors")
    sock_dir = Path(tempfile.mkdtemp(prefix="rocmseat-ready-"))
    world = World(root=root, engine_python=engine_python, models=models,
                  notify_path=sock_dir / "notify")
    try:
        yield world
    finally:
        world.close()
        sock_dir.rmdir()


def ready(world: World) -> tuple[int, str]:
    try:
        r = httpx.get(f"http://127.0.0.1:{world.exporter_port}/ready/{REPLICA}", timeout=5)
    except httpx.HTTPError as exc:
        return 0, f"(no answer: {exc})"
    return r.status_code, r.text.strip()


def answers(world: World, status: int, needle: str) -> Callable[[], str | None]:
    def check() -> str | None:
        code, body = ready(world)
        return body if code == status and needle in body else None

    return check


def healthz(world: World) -> int:
    try:
        return httpx.get(f"http://127.0.0.1:{world.exporter_port}/healthz",
                         timeout=5).status_code
    except httpx.HTTPError:
        return 0


def use_drafter(world: World, weights: str) -> None:
    shutil.copyfile(world.root / weights, world.models / "drafter" / "model.safetensors")


def judged_al(world: World) -> float | None:
    """The acceptance length of the watchdog's last judged window (its exporter)."""
    return gauge(world.exporter(), "rocmseat_spec_acceptance_length", replica=REPLICA)


def until(world: World, status: int, needle: str, what: str,
          evidence: Callable[[], bool] = lambda: True) -> tuple[str, float]:
    """Wait, traffic flowing, until /ready/r0 answers `status` with `needle` in its line (and
    `evidence` holds: a verdict from judged drafts, not from an idle replica)."""
    started = time.monotonic()
    seen: list[tuple[int, str]] = []

    def check() -> str | None:
        code, body = ready(world)
        if not seen or seen[-1] != (code, body):
            seen.append((code, body))
        return body if code == status and needle in body and evidence() else None

    with Traffic(world.engine_port, SERVED) as traffic:
        body = wait_for(what, check, VERDICT_BOUND_S,
                        lambda: f"/ready answers: {seen[-6:]}\n{world.seen()}")
    assert not traffic.errors, traffic.errors[:3]
    return body, time.monotonic() - started


def test_ready_follows_the_drafter(ready_world: World) -> None:
    world = ready_world
    use_drafter(world, "good.safetensors")
    seat = world.write_seat()
    world.launch(seat)
    first_ready_s = world.last_ready_s
    world.start_watch(seat)
    assert healthz(world) == 200

    healthy, healthy_s = until(world, 200, "ready", "/ready/r0 200 with a good drafter",
                               lambda: (judged_al(world) or 0.0) >= 3.5)
    assert healthy == f"{REPLICA}: ready"
    healthy_al = judged_al(world)

    # The drafter dies: other weights behind the same header; relaunch (the key is unchanged).
    use_drafter(world, "bad.safetensors")
    world.stop_replica()
    down = wait_for("/ready/r0 503 while the replica is stopped",
                    answers(world, 503, "replica_down"), 30, world.seen)
    world.launch(seat)
    dead, dead_s = until(world, 503, "spec_drafter_dead", "/ready/r0 503: spec_drafter_dead")
    assert dead.startswith(f"{REPLICA}: spec_drafter_dead: the drafter's first token")
    assert healthz(world) == 200  # the watcher itself is fine

    # It recovers: the good weights back, relaunch. The restart clears the verdict (a replica
    # out of rotation drafts nothing, so only a restart can): ready before any traffic ...
    use_drafter(world, "good.safetensors")
    world.stop_replica()
    world.launch(seat)
    restarted = wait_for("/ready/r0 200 on the relaunched engine, before any traffic",
                         answers(world, 200, "ready"), 30, world.seen)
    # ... and it stays ready while its own drafts are judged (a good drafter again)
    recovered, recovered_s = until(world, 200, "ready", "/ready/r0 200 with new drafts judged",
                                   lambda: (judged_al(world) or 0.0) >= 3.5)
    assert recovered.startswith(f"{REPLICA}: ready"), recovered
    recovered_al = judged_al(world)
    note(SCENARIO, f"good drafter: 200 '{healthy}' with a judged acceptance length of "
         f"{healthy_al} after {healthy_s:.1f} s of traffic (READY after {first_ready_s:.0f} s); "
         f"engine stopped: 503 '{down}'")
    note(SCENARIO, f"other weights, same key, relaunched: 503 '{dead}' after {dead_s:.1f} s "
         "of traffic")
    note(SCENARIO, f"good weights, relaunched: 200 '{restarted}' before any traffic (the "
         f"restart cleared the verdict), still 200 '{recovered}' with a judged acceptance "
         f"length of {recovered_al} after {recovered_s:.1f} s of traffic; /healthz 200 "
         "throughout")
