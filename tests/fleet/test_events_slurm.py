"""`rocmseat slurm health` drains on a kernel event, against a real single-node Slurm started by
the test (tier `fleet`, as tests/fleet/test_slurm_real.py): the fixture host plus a saved kernel
log with a GPU reset on one GPU (tests/fixtures/kernel-log/README.md), given the way every root
is given (ROCMSEAT_KMSG, rocmseat.sysfs.fs.default_kmsg_path)."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.fleet.slurm_cluster import missing_reason, running_cluster
from tests.sysfs.conftest import SYSFS_FIXTURES

pytestmark = pytest.mark.fleet

DEGRADED = SYSFS_FIXTURES / "x99-r9700-degraded"
HEALTHY = SYSFS_FIXTURES / "x99-r9700"
RESET_LOG = Path(__file__).resolve().parent.parent / "fixtures/kernel-log/x99-r9700-reset-86.log"


@pytest.fixture(scope="module")
def cluster_root():
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    root = Path(tempfile.mkdtemp(prefix="rocmseat-slurm-events-"))
    root.chmod(0o755)  # munged wants every directory above its socket searchable
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _reason(line: str) -> str | None:
    found = re.search(r"\bReason=(.*?)(?: \[[^\]]*\])?$", line)
    return found.group(1) if found else None


def test_a_gpu_reset_drains_with_its_class_and_a_clean_log_resumes(cluster_root, rocmseat_cli,
                                                                   monkeypatch, tmp_path):
    with running_cluster(cluster_root / "events") as cluster:
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        monkeypatch.delenv("SLURMD_NODENAME", raising=False)

        def health(root: Path, log: Path, state: str):
            monkeypatch.setenv("ROCMSEAT_KMSG", str(log))
            return rocmseat_cli("slurm", "health", "--sysfs-root", str(root),
                                "--state-dir", str(tmp_path / state))

        # 1. the healthy host whose GPU 86:00.0 reset this boot: drained, the class named
        result = health(HEALTHY, RESET_LOG, "a")
        assert result.exit_code == 1, result.output
        line = cluster.node_line()
        assert "DRAIN" in line
        assert _reason(line) == ("rocmseat: events.gpu_reset 0000:86:00.0 +1 more: "
                                 "events.ring_timeout [events]"), line

        # 2. the same host with a log of boot lines only: resumed (rocmseat drained it)
        clean = tmp_path / "boot.log"
        clean.write_text("".join(x for x in RESET_LOG.read_text().splitlines(keepends=True)
                                 if "0000:86:00.0" not in x or "ring gfx_0.0.0 uses" in x))
        result = health(HEALTHY, clean, "b")
        assert result.exit_code == 0, result.output
        cluster.wait_for(lambda text: "DRAIN" not in text, "the node to resume")

        # 3. the degraded fixture with the reset log: drained, the events family in the tag
        result = health(DEGRADED, RESET_LOG, "c")
        assert result.exit_code == 1
        reason = _reason(cluster.node_line())
        # the worst first (a degraded link), and the kernel's classes named behind it
        assert reason == ("rocmseat: pcie.link.degraded 0000:89:00.0 +3 more: aer.badtlp,"
                          "events.gpu_reset,events.ring_timeout [aer,events,pcie]"), reason
