"""Every shipped seat file (launchers/*.toml, cpu and rocm): `rocmseat key`, `launch --dry-run`
and `cache-audit` after a start agree on each replica's config key (issue 16: `key
launchers/demo-cpu.toml` printed 6367..., `launch --dry-run` 2a09..., and cache-audit called the
fresh cache stale, `gpu_arch:  -> cpu-x86_64`, because placement recorded `gfx_targets=()` for
a cpu replica and only None became `cpu-x86_64`).

Each seat is the shipped file with its paths moved into tmp_path: real checkpoints built by
tests/cache/builders.py where the model and drafter were, the fake engine Python that answers
the version probe, its own cache root and state dir. A cpu seat is really launched (the test
engine, tests/launch/testengine.py, answers /health and the canary, then exits); a rocm seat
runs against the x99-r9700 fixture tree and gets its cache the way launch prepares it (its
start key, rocmseat.launch.flow.launch_key, then the cache store), since the test host has no
GPU to start an engine on.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest

import rocmseat.launch.flow
from rocmseat.cache.store import prepare
from rocmseat.seat.load import load_seat
from tests.cache.builders import write_model
from tests.conftest import FIXTURES, REPO

SEATS = sorted((REPO / "launchers").glob("*.toml"))
X99 = FIXTURES / "sysfs" / "x99-r9700"
HIVE = FIXTURES / "sysfs" / "mi300x-hive"  # the node the MI300X seats are written for


def node_of(seat) -> Path:
    """The fixture tree a rocm seat serves on: its profile's node (checks/mi300x-hive.toml for
    the MI300X seats), else the X99 bench."""
    profile = seat.preflight.profile
    return HIVE if profile is not None and profile.name == "mi300x-hive.toml" else X99
TEST_ENGINE = REPO / "tests" / "launch" / "testengine.py"


def test_every_backend_is_shipped():
    backends = {tomllib.loads(p.read_text())["backend"] for p in SEATS}
    assert backends == {"cpu", "rocm"} and len(SEATS) >= 4


def moved_seat(shipped: Path, tmp_path: Path, python: Path, port: int) -> Path:
    """The shipped seat with every path it names moved into tmp_path (and, for a cpu seat, the
    test engine as its command)."""
    text = shipped.read_text()
    data = tomllib.loads(text)
    if data["backend"] == "cpu" and data["engine"].get("kind") == "llamacpp":
        # a llama-server stand-in (the seat refuses a command that does not look like
        # llama.cpp's: rocmseat.engines.llamacpp.looks_like) answering the key's `--version`
        # probe the way llama-server does, then the test engine
        stand_in = tmp_path / "engine-bin" / "llama-server"
        stand_in.parent.mkdir(parents=True, exist_ok=True)
        stand_in.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then echo "version: 1 (test)"; '
                            f'exit 0; fi\nexec "{sys.executable}" "{TEST_ENGINE}" "$@"\n')
        stand_in.chmod(0o755)
        text = text.replace(json.dumps(data["engine"]["command"])[1:-1], f'"{stand_in}"')
    elif data["backend"] == "cpu":  # first: the command names the engine Python too
        text = text.replace(json.dumps(data["engine"]["command"])[1:-1],
                            f'"{sys.executable}", "{TEST_ENGINE}"')
    else:  # the engine's script, moved too: launch and its dry run refuse one that is not there
        engine = tmp_path / "engine-bin" / Path(data["engine"]["command"][0]).name
        engine.parent.mkdir(parents=True, exist_ok=True)
        engine.write_text("#!/bin/sh\nexit 0\n")
        engine.chmod(0o755)
        text = text.replace(json.dumps(data["engine"]["command"][0]), json.dumps(str(engine)), 1)
    values: dict[str, str] = {
        data["engine"]["python"]: str(python),
        data["cache_root"]: str(tmp_path / "cache"),
        data["state_dir"]: str(tmp_path / "state"),
    }
    for table, hidden in (("model", 64), ("drafter", 32)):
        path = data.get(table, {}).get("path")
        if path is not None:
            values[path] = str(write_model(tmp_path / "models" / table, hidden=hidden))
    profile = data.get("preflight", {}).get("profile")
    if profile is not None:
        values[profile] = str((shipped.parent / profile).resolve())
    for old, new in values.items():
        text = text.replace(json.dumps(old), json.dumps(new))
    if data["backend"] == "cpu":
        assert "extra_args" not in data["serve"]
        text = text.replace("[serve]\n", '[serve]\nextra_args = ["--exit-after-canary", "0"]\n')
        text = re.sub(r"(?m)^port_base = \d+", f"port_base = {port}", text)
    path = tmp_path / shipped.name
    path.write_text(text)
    return path


@pytest.mark.parametrize("shipped", SEATS, ids=[p.stem for p in SEATS])
def test_key_dry_run_and_cache_audit_agree(shipped, tmp_path, rocmseat_cli, fake_engine_python,
                                           free_tcp_port, monkeypatch):
    monkeypatch.setattr(rocmseat.launch.flow, "find_numactl", lambda: None)
    for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    seat_file = moved_seat(shipped, tmp_path, fake_engine_python, free_tcp_port)
    seat = load_seat(seat_file)
    node = ("--sysfs-root", str(node_of(seat))) if seat.backend == "rocm" else ()

    dry = rocmseat_cli("launch", str(seat_file), "--dry-run", "--json", *node)
    assert dry.exit_code == 0, dry.stderr
    planned = {r["replica"]: r["key"]["digest"] for r in json.loads(dry.stdout)["replicas"]}
    assert planned and None not in planned.values(), dry.stdout
    for replica, digest in planned.items():
        key = rocmseat_cli("key", str(seat_file), "--replica", replica, *node)
        assert key.exit_code == 0, key.stderr
        assert key.stdout.strip() == digest, (replica, key.stdout, digest)

    if seat.engine.kind == "llamacpp":
        # llama.cpp compiles nothing to cache: the audit says so instead of a table
        # (rocmseat/cache/audit.py); its launch -> READY runs on the real llama-server in
        # tests/e2e/test_llamacpp_engine.py
        audit = rocmseat_cli("cache-audit", str(seat_file), "--json", *node)
        assert audit.exit_code == 0, audit.stdout + audit.stderr
        [doc] = json.loads(audit.stdout)["seats"]
        assert "no compile cache" in (doc.get("no_compile_cache") or ""), doc
        return
    if seat.backend == "cpu":
        said: list[str] = []
        result = rocmseat.launch.flow.launch_replica(
            seat, "r0", rocmseat.launch.flow.LaunchRun(
                sysfs_root=None, state_dir=tmp_path / "state", echo=lambda _: None,
                say=said.append, environ=dict(os.environ), probe_interval_s=0.05,
                stop_grace_s=2.0))
        assert result.exit_code == 0, said
        startup = json.loads(result.report_path.read_text())
        assert startup["config_key"]["digest"] == planned["r0"]
    else:
        placed = rocmseat.launch.flow.place_for_launch(seat, node_of(seat),
                                                       state_dir=tmp_path / "state")
        for record in placed.records:
            key = rocmseat.launch.flow.launch_key(seat, placed, record.replica)
            assert key.digest == planned[record.replica]
            prepare(record.cache_dir, key, seat_name=seat.name)

    audit = rocmseat_cli("cache-audit", str(seat_file), "--json", *node)
    assert audit.exit_code == 0, audit.stdout + audit.stderr
    [doc] = json.loads(audit.stdout)["seats"]
    states = {r["replica"]: (r["cache"]["state"], r["cache"]["manifest_key"])
              for r in doc["replicas"]}
    assert states == {r: ("current", d) for r, d in planned.items()}, states
