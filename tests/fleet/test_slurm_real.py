"""`rocmseat slurm health` against a real single-node Slurm started by the test (tier `fleet`).

The Must show of issue 13: the degraded fixture drains the node with rocmseat's reason, the
healthy fixture resumes it, a drain set by hand with another reason stays; and slurmd itself runs
the command as its HealthCheckProgram (at start-up, before it registers).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.fleet.slurm_cluster import missing_reason, running_cluster
from tests.sysfs.conftest import SYSFS_FIXTURES

pytestmark = pytest.mark.fleet

DEGRADED = SYSFS_FIXTURES / "x99-r9700-degraded"
HEALTHY = SYSFS_FIXTURES / "x99-r9700"


@pytest.fixture(scope="module")
def cluster_root():
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    # not pytest's tmp_path: munged wants every directory above its socket searchable
    root = Path(tempfile.mkdtemp(prefix="rocmseat-slurm-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _state_reason(line: str) -> tuple[str, str | None]:
    state = re.search(r"\bState=(\S+)", line)
    reason = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?$", line)
    return (state.group(1) if state else "?", reason.group(1) if reason else None)


def test_drain_resume_and_an_admins_drain(cluster_root, rocmseat_cli, monkeypatch, tmp_path):
    with running_cluster(cluster_root / "direct") as cluster:
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        monkeypatch.delenv("SLURMD_NODENAME", raising=False)
        state_dir = tmp_path / "state"

        def health(root):
            # no --node and no SLURMD_NODENAME: the name comes from scontrol's node list
            return rocmseat_cli("slurm", "health", "--sysfs-root", str(root),
                                "--state-dir", str(state_dir / root.name))

        # 1. the degraded node drains, with rocmseat's reason
        result = health(DEGRADED)
        assert result.exit_code == 1, result.stderr
        state, reason = _state_reason(cluster.node_line())
        assert "DRAIN" in state
        # the first failing finding by check id, and how many more (pcie.link.degraded)
        assert reason == "rocmseat: aer.badtlp 0000:80:02.0 +1 more", cluster.node_line()
        assert result.stdout.startswith(f"{cluster.node}: FAIL ")
        assert f"drained ({reason})" in result.stdout

        # 2. the healthy fixture resumes it (rocmseat drained it)
        result = health(HEALTHY)
        assert result.exit_code == 0, result.stderr
        cluster.wait_for(lambda line: "DRAIN" not in _state_reason(line)[0], "the node to resume")
        assert result.stdout.startswith(f"{cluster.node}: OK: 4 GPUs, ")
        assert "resumed (it was drained: rocmseat: aer.badtlp 0000:80:02.0 +1 more)" in (
            result.stdout
        )

        # 3. an administrator's drain stays, whatever rocmseat finds
        cluster.scontrol("update", f"NodeName={cluster.node}", "State=DRAIN",
                         "Reason=disk replacement ticket 4711")
        result = health(HEALTHY)
        assert result.exit_code == 0
        assert "left drained: not rocmseat's reason (disk replacement ticket 4711)" in (
            result.stdout
        )
        result = health(DEGRADED)
        assert result.exit_code == 1
        assert "already drained by someone else" in result.stdout
        state, reason = _state_reason(cluster.node_line())
        assert "DRAIN" in state and reason == "disk replacement ticket 4711"


def test_slurmd_runs_it_as_health_check_program(cluster_root, tmp_path):
    # slurm.conf: HealthCheckProgram runs when slurmd starts, before it registers, as root, with
    # SLURMD_NODENAME set; the wrapper is the one docs/fleet.md shows
    root = cluster_root / "hcp"
    root.mkdir()
    program = root / "rocmseat-health-check"
    log = root / "log" / "healthcheck.log"
    program.write_text(
        "#!/bin/sh\n"
        # slurmd gives the program a bare environment; a node's scontrol finds
        # /etc/slurm/slurm.conf by itself, this test's config lives in the temp dir
        f"export SLURM_CONF={root / 'slurm.conf'}\n"
        f"export PYTHONPATH={REPO}\n"
        f"exec {sys.executable} -m rocmseat slurm health --sysfs-root {DEGRADED} "
        f"--state-dir {root / 'state-rocmseat'} >>{log} 2>&1\n"
    )
    program.chmod(0o755)
    with running_cluster(root, health_check=program) as cluster:
        line = cluster.wait_for(lambda line: "DRAIN" in _state_reason(line)[0],
                                "slurmd's health check to drain the node")
        _state, reason = _state_reason(line)
        assert reason == "rocmseat: aer.badtlp 0000:80:02.0 +1 more", line
        text = log.read_text()
        assert text.startswith(f"{cluster.node}: FAIL "), text  # named via SLURMD_NODENAME
        assert os.path.exists(root / "state-rocmseat" / "preflight" / "verdict.json")
