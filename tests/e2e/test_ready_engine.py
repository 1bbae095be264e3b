"""`/ready/<replica>` as a load balancer reads it, and `ready_world`: a seat of its own whose
drafter's weights a test swaps behind the same config key (good: the target's own weights,
bad: drafter-other's). Shared by the engine scenarios that follow readiness.

The readiness scenario itself (200 with a good drafter, 503 stopped, 503 when the drafter dies,
200 after a restart with good weights) rides the whole loop's engine starts
(test_whole_loop.py::test_ready_follows_the_drafter, issue 16: one engine per model and
scenario); test_remediate_engine.py climbs its ladder in `ready_world`. No test of its own.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import gauge
from tests.e2e.world import REPLICA, WarmCache, World, fresh_models


@pytest.fixture(scope="module")
def ready_world(engine_python: Path, demo_models: Path, engine_models_path: Path,
                warm_cache: WarmCache,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("ready")
    # the session's models at the one path every engine world uses (fresh_models)
    models = fresh_models(demo_models, engine_models_path)
    # the target's own weights as the drafter: every drafted token is accepted (AL 1 + K)
    shutil.rmtree(models / "drafter")
    shutil.copytree(demo_models / "target", models / "drafter")
    shutil.copyfile(demo_models / "target" / "model.safetensors", root / "good.safetensors")
    shutil.copyfile(demo_models / "drafter-other" / "model.safetensors", root / "bad.safetensors")
    sock_dir = Path(tempfile.mkdtemp(prefix="rocmseat-ready-"))
    world = World(root=root, engine_python=engine_python, models=models,
                  notify_path=sock_dir / "notify")
    # the first start rides the whole loop's compile when the session has it (WarmCache): the
    # scenarios here test remediation and spawn figures, not a cold compile
    world.warm_from = warm_cache.seed(world)
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


def healthz(world: World) -> int:
    try:
        return httpx.get(f"http://127.0.0.1:{world.exporter_port}/healthz",
                         timeout=5).status_code
    except httpx.HTTPError:
        return 0


def use_drafter(world: World, weights: str) -> None:
    """`good.safetensors` or `bad.safetensors` (of `ready_world`) as the drafter's weights."""
    shutil.copyfile(world.root / weights, world.models / "drafter" / "model.safetensors")


def judged_al(world: World) -> float | None:
    """The acceptance length of the watchdog's last judged window (its exporter)."""
    return gauge(world.exporter(), "rocmseat_spec_acceptance_length", replica=REPLICA)
