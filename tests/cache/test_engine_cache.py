"""Tier 4: the real vLLM CPU engine compiles into the replica's store, cache-audit sees the
running server use it, and a changed draft length moves its compiled graphs aside intact."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from rocmseat.cache.audit import audit_seat
from rocmseat.cache.current import CurrentKey
from rocmseat.cache.key import replica_key
from rocmseat.cache.store import prepare
from rocmseat.cache.usage import Use, scan_processes
from rocmseat.seat.load import load_seat
from tests.conftest import REPO

pytestmark = pytest.mark.engine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in directory.rglob("*") if p.is_file() and not p.is_symlink()
    }


def wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the engine exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(2)
    pytest.fail(f"no /health 200 within {timeout_s} s")


def test_engine_compiles_into_the_store(tmp_path: Path, real_engine_python: Path) -> None:
    from rocmseat.demo import build_models

    build_models(tmp_path / "models", real_engine_python)
    text = (REPO / "launchers" / "demo-cpu.toml").read_text()
    text = text.replace("/var/tmp/rocmseat-demo/models", str(tmp_path / "models"))
    text = text.replace("/var/tmp/rocmseat-demo/", f"{tmp_path}/")
    seat_file = tmp_path / "demo.toml"
    seat_file.write_text(text)
    seat = load_seat(seat_file)
    key = replica_key(seat, "r0", None)
    prepared = prepare(seat.cache_root / "r0", key, seat_name=seat.name)
    assert seat.drafter is not None and seat.drafter.path is not None
    port = free_port()
    argv = [*seat.engine.command, seat.engine.model_flag, str(seat.model.path),
            "--max-model-len", str(seat.serve.max_model_len),
            "--max-num-seqs", str(seat.serve.max_num_seqs), "--dtype", seat.serve.dtype,
            "--port", str(port), "--speculative-config",
            json.dumps({"method": "draft_model", "model": str(seat.drafter.path),
                        "num_speculative_tokens": 3})]
    env = {**os.environ, **seat.env, **prepared.env}
    with open(tmp_path / "engine.log", "wb") as log:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            wait_healthy(port, proc, 420)
            audit = audit_seat(
                seat.name, str(seat_file), seat.cache_root,
                {"r0": CurrentKey(seat.name, "r0", key.factors, {})},
                now=dt.datetime.now(dt.UTC), processes=list(scan_processes()),
            )
            [live] = audit.entries
            assert live.state == "current"
            assert live.in_use.use is Use.YES and proc.pid in live.in_use.pids
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
    compiled = tree(prepared.replica_dir)
    assert any("torch_compile_cache" in name for name in compiled), sorted(compiled)
    seat_file.write_text(text.replace("num_speculative_tokens = 3", "num_speculative_tokens = 2"))
    seat = load_seat(seat_file)
    moved = prepare(seat.cache_root / "r0", replica_key(seat, "r0", None), seat_name=seat.name)
    assert moved.moved_aside is not None
    assert [c.describe() for c in moved.changed] == ["speculative.num_speculative_tokens: 3 -> 2"]
    assert tree(moved.moved_aside) == compiled
