"""Issue 10, the r1-on-r0's-GPUs bug: the plan of every replica of the shipped R9700 seat on the
X99 fixture tree, launched for real (key, HIP numbering, preflight gate with the HIP probe, cache
prepare, engine start) with the fake libamdhip64 standing in for the runtime. The engine is a
tiny program that writes the environment it was started with and exits; the test reads
HIP_VISIBLE_DEVICES from there, i.e. what the engine really got.

Before the fix, the probe ran under the replica's own mask (HIP_VISIBLE_DEVICES=2,3 for r1), HIP
numbered the visible GPUs 0 and 1, and launch took those local indices for global ones: r1's
engine got HIP_VISIBLE_DEVICES=0,1, r0's GPUs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rocmseat.launch import flow
from rocmseat.seat.load import load_seat
from tests.conftest import FIXTURES, REPO
from tests.hip.conftest import A, B, C, D, x99_bench_env

pytestmark = pytest.mark.hip

SEAT = REPO / "launchers" / "r9700-mxfp4-dflash.toml"
X99 = FIXTURES / "sysfs" / "x99-r9700"
ENGINE = """\
import json, os, sys
with open(os.environ["ROCMSEAT_TEST_ENV_DUMP"], "w") as out:
    json.dump(dict(os.environ), out)
sys.exit(0)
"""


def shipped_seat_here(tmp_path: Path, python: Path) -> Path:
    """The shipped seat, with only what this machine lacks replaced: model and drafter dirs,
    the engine (the env-dumping program), its Python (the version probe), the cache root."""
    models = tmp_path / "models"
    for name in ("target", "drafter"):
        (models / name).mkdir(parents=True, exist_ok=True)
        (models / name / "config.json").write_text('{"architectures": ["X"]}')
    engine = tmp_path / "engine.py"
    engine.write_text(ENGINE)
    text = (SEAT.read_text()
            .replace('"/opt/vllm/bin/python"', f'"{python}"')
            .replace('"/models/qwen3.8-27b-mxfp4"', f'"{models / "target"}"')
            .replace('"/models/qwen3.8-27b-dflash-fp8"', f'"{models / "drafter"}"')
            .replace('"/var/cache/rocmseat/r9700-mxfp4-dflash"', f'"{tmp_path / "cache"}"')
            .replace('command = ["/opt/vllm/bin/vllm", "serve"]',
                     f'command = ["{sys.executable}", "{engine}"]')
            .replace('profile = "../checks/x99-r9700.toml"',
                     f'profile = "{REPO / "checks" / "x99-r9700.toml"}"'))
    path = tmp_path / "launchers" / "r9700-mxfp4-dflash.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def launch_and_read_engine_env(seat_path: Path, replica: str, tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch,
                               said: list[str]) -> dict[str, str]:
    dump = tmp_path / f"engine-env-{replica}.json"
    monkeypatch.setenv("ROCMSEAT_TEST_ENV_DUMP", str(dump))
    engine_said: list[str] = []
    flow.launch_replica(load_seat(seat_path), replica, flow.LaunchRun(sysfs_root=X99,
                        state_dir=tmp_path / "state", echo=engine_said.append, say=said.append,
                        probe_interval_s=0.05, stop_grace_s=2.0))
    assert dump.exists(), (said, engine_said)
    env: dict[str, str] = json.loads(dump.read_text())
    return env


@pytest.mark.parametrize(
    ("kfd_order", "rocr", "expected"),
    [
        # HIP order = PCI bus order: r0 on GPUs 0,1, r1 on 2,3
        ((A, B, C, D), None, {"r0": "0,1", "r1": "2,3"}),
        # the runtime enumerates socket 1 first: HIP's 0,1 are 86/89, so r0 is 2,3, r1 0,1
        ((C, D, A, B), None, {"r0": "2,3", "r1": "0,1"}),
        # ...and ROCR_VISIBLE_DEVICES reorders that again (HIP_VISIBLE_DEVICES applies on top of
        # ROCr's selection): ROCr surfaces D, C, B, A, so r0 = (A, B) is 3,2 and r1 = (C, D) 1,0
        ((C, D, A, B), "1,0,3,2", {"r0": "3,2", "r1": "1,0"}),
    ],
    ids=["bus-order", "hip-order-differs", "rocr-visible-devices"],
)
def test_every_replica_of_the_shipped_seat_gets_its_own_gpus(
        tmp_path, monkeypatch, fake_hip, shm_prefix, fake_engine_python, kfd_order, rocr,
        expected):
    fake = x99_bench_env(shm_prefix) | {"FAKEHIP_DEVICES": ",".join(kfd_order),
                                        "ROCMSEAT_HIP_LIBRARY": str(fake_hip)}
    for name, value in fake.items():
        monkeypatch.setenv(name, value)
    if rocr is not None:
        monkeypatch.setenv("ROCR_VISIBLE_DEVICES", rocr)
    monkeypatch.delenv("HIP_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    seat_path = shipped_seat_here(tmp_path, fake_engine_python)
    # The fixture node's NUMA node 1 is not this machine's: a stand-in numactl drops the
    # binding (its two options) and runs the engine; the argv still names the node.
    numactl = tmp_path / "numactl"
    numactl.write_text('#!/bin/sh\nshift 2\nexec "$@"\n')
    numactl.chmod(0o755)
    monkeypatch.setattr(flow, "find_numactl", lambda: str(numactl))

    # the plan of every replica, from the fixture tree: both replicas, socket-local pairs
    seat = load_seat(seat_path)
    plans = flow.dry_run(seat, X99, state_dir=tmp_path / "state")
    assert [(p.replica, p.pci_pair) for p in plans] == [("r0", (A, B)), ("r1", (C, D))]

    for plan in plans:
        said: list[str] = []
        env = launch_and_read_engine_env(seat_path, plan.replica, tmp_path, monkeypatch, said)
        assert env["HIP_VISIBLE_DEVICES"] == expected[plan.replica], said
        assert "CUDA_VISIBLE_DEVICES" not in env
        assert env.get("ROCR_VISIBLE_DEVICES") == rocr
        record = json.loads((tmp_path / "state" / "seats" / seat.name / plan.replica /
                             "placement.json").read_text())
        assert ",".join(map(str, record["hip_indices"])) == expected[plan.replica]
        assert record["hip_index_source"] == "hip-probe"
        assert record["pci_pair"] == list(plan.pci_pair)
        # the probe under the replica's own mask saw exactly its pair, and launch checked it
        report = json.loads((tmp_path / "state" / "seats" / seat.name / plan.replica /
                             "startup.json").read_text())
        visible = [f for f in report["findings"] if f["check_id"] == "launch.hip.visible"]
        assert [f["severity"] for f in visible] == ["ok"], said
        assert visible[0]["data"]["devices"] == list(plan.pci_pair)
        if expected[plan.replica] != ",".join(map(str, plan.hip_indices or ())):
            assert any(line.startswith(f"HIP numbers {', '.join(plan.pci_pair)} as "
                                       f"{expected[plan.replica]}, not ") for line in said), said


def test_a_mask_that_selects_other_gpus_refuses_the_start(tmp_path, monkeypatch, fake_hip,
                                                         shm_prefix, fake_engine_python):
    """Defence in depth: if HIP under the replica's mask shows other GPUs than its pair (here:
    the order probe is made to fail, so the PCI-bus-order assumption stays, and the runtime's
    order differs), the start is refused before the cache is touched, whatever
    refuse_on_fail says."""
    fake = x99_bench_env(shm_prefix) | {"FAKEHIP_DEVICES": ",".join((C, D, A, B)),
                                        "ROCMSEAT_HIP_LIBRARY": str(fake_hip)}
    for name, value in fake.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ROCMSEAT_TEST_ENV_DUMP", str(tmp_path / "never.json"))
    monkeypatch.setattr(flow, "hip_numbering", lambda plan, environ, **kw: None)
    seat_path = shipped_seat_here(tmp_path, fake_engine_python)
    seat_path.write_text(seat_path.read_text().replace("refuse_on_fail = true",
                                                       "refuse_on_fail = false"))
    from rocmseat.errors import RocmseatError

    with pytest.raises(RocmseatError) as info:
        flow.launch_replica(load_seat(seat_path), "r1", flow.LaunchRun(sysfs_root=X99,
                            state_dir=tmp_path / "state", echo=lambda _: None,
                            say=lambda _: None))
    assert info.value.message == (
        f"replica r1: start refused: HIP_VISIBLE_DEVICES=2,3 shows HIP {A}, {B}, not the "
        f"replica's pair {C}, {D}: the engine would run on other GPUs")
    assert not (tmp_path / "never.json").exists()
    assert not (tmp_path / "cache" / "r1").exists()
