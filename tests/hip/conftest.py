"""Tier-3 fixtures: the fake libamdhip64.so compiled from C by this test run, and its settings."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

FAKE_SOURCE = Path(__file__).parent / "fakehip" / "fake_amdhip64.c"

A, B, C, D = "0000:05:00.0", "0000:09:00.0", "0000:86:00.0", "0000:89:00.0"

# The fake's hardware, configured after the X99 bench of docs/architecture.md
# (tests/fixtures/sysfs/x99-r9700):
# GPUs 05/09 on socket 0, 86/89 on socket 1; 09:00.0 sits in the x8 slot bifurcated with a NIC.
# The rates are THE FAKE'S CONFIGURATION (its modelled device clock), not a measurement: the test
# checks that the probe's event timing and judgement expose them.
X99_HOST_GBPS = {A: 27.2, B: 20.5, C: 27.2, D: 27.2}
X99_D2D_GBPS = {A: 24.0, B: 24.0, C: 24.0, D: 24.0}

# What the probe tests move per direction (hip_findings' size_bytes): the fake copies, fills and
# verifies real bytes, so the production 32 MiB (PROBE_BYTES) costs seconds per pair and shows
# nothing more; the CLI tests (test_cli_hip.py) keep the production size.
PROBE_SIZE = 1 << 20


def _cross_socket_fail() -> str:
    socket0, socket1 = (A, B), (C, D)
    pairs = [f"{x}>{y}" for x in socket0 for y in socket1]
    pairs += [f"{y}>{x}" for x in socket0 for y in socket1]
    return ",".join(pairs)


def x99_bench_env(shm_prefix: str) -> dict[str, str]:
    """FAKEHIP_* settings: the X99 bench, where cross-socket HIP IPC open fails with 17."""
    return {
        "FAKEHIP_DEVICES": ",".join((A, B, C, D)),
        "FAKEHIP_IPC_OPEN_FAIL": _cross_socket_fail(),
        "FAKEHIP_HOST_GBPS": ",".join(f"{k}={v}" for k, v in X99_HOST_GBPS.items()),
        "FAKEHIP_D2D_GBPS": ",".join(f"{k}={v}" for k, v in X99_D2D_GBPS.items()),
        "FAKEHIP_SHM_PREFIX": shm_prefix,
    }


@pytest.fixture(scope="session")
def fake_hip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake library, compiled with gcc once per test session."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc is not installed: cannot build the fake libamdhip64.so")
    out = tmp_path_factory.mktemp("fakehip") / "libamdhip64.so"
    proc = subprocess.run(
        [gcc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(out),
         str(FAKE_SOURCE), "-lrt"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture
def shm_prefix(request: pytest.FixtureRequest) -> Iterator[str]:
    """A shared-memory name prefix of this test; objects a killed child left are removed after."""
    prefix = f"fakehip-t{os.getpid()}-{abs(hash(request.node.nodeid)) % 10**8}"
    yield prefix
    shm = Path("/dev/shm")
    if shm.is_dir():
        for leftover in shm.glob(f"{prefix}-*"):
            leftover.unlink(missing_ok=True)


@pytest.fixture
def x99(shm_prefix: str) -> dict[str, str]:
    return x99_bench_env(shm_prefix)
