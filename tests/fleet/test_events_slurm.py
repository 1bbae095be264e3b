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


def _said(result) -> str:
    return result.stdout + result.stderr


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


def test_a_node_drained_for_a_gpu_reset_stays_drained_when_the_ring_wraps(
        cluster_root, rocmseat_cli, monkeypatch, tmp_path):
    """Issue 34, item 5, on the real Slurm: drained for events.gpu_reset, then the printk ring
    wraps (the node's kmsg now starts past the reset's sequence number), same boot, the GPU
    untouched. The timer's full preflight runs and `slurm health` judges its verdict each
    time: the node stays drained, for the reset (kept this boot, rocmseat.preflight
    .boot_events), and, with the kept events gone, because the verdict could not see the whole
    boot. On main the second health check resumed the node."""
    from tests.preflight.kmsg_records import filler, make_proc, records, reset_lines

    boot = "3f1c2f6e-5d1a-4c59-9a53-0b7d4f3e8a11"
    monkeypatch.setenv("ROCMSEAT_PROC_ROOT", str(make_proc(tmp_path / "proc", boot)))
    state = tmp_path / "state"
    kmsg = tmp_path / "kmsg"
    with running_cluster(cluster_root / "wrap") as cluster:
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        monkeypatch.delenv("SLURMD_NODENAME", raising=False)

        def timer_then_health(ring: str):
            kmsg.write_text(ring)
            monkeypatch.setenv("ROCMSEAT_KMSG", str(kmsg))
            timer = rocmseat_cli("preflight", "--sysfs-root", str(HEALTHY), "--state-dir",
                                 str(state), "--format", "npd")
            return timer, rocmseat_cli("slurm", "health", "--sysfs-root", str(HEALTHY),
                                       "--state-dir", str(state))

        # 1. the reset in the ring (kmsg records 0..39, the reset at 32): drained, the class named
        _, health = timer_then_health(records(reset_lines(), 0))
        assert health.exit_code == 1, _said(health)
        drained = _reason(cluster.wait_for(lambda text: "DRAIN" in text, "the drain"))
        assert drained == ("rocmseat: events.gpu_reset 0000:86:00.0 +1 more: "
                           "events.ring_timeout [events]"), drained

        # 2. the ring wrapped: it starts at 40, past the reset; nothing was lost unread
        timer, health = timer_then_health(records(filler(300), 40))
        assert timer.exit_code == 1, _said(timer)  # the reset is kept: still a failure
        assert health.exit_code == 1, _said(health)
        line = cluster.node_line()
        assert "DRAIN" in line and _reason(line) == drained, line
        assert "already drained" in _said(health)

        # 3. wrapped again, records 340..4999 never read by any run: still drained, same reason
        timer, health = timer_then_health(records(filler(300), 5000))
        assert timer.exit_code == 1 and health.exit_code == 1, _said(health)
        assert _reason(cluster.node_line()) == drained

        # 4. the kept events lost (a wiped state dir keeps only the verdict's absence): the
        # ring alone has no reset, and this verdict cannot see the whole boot: never resumed
        for name in ("boot-events.json", "verdict.json", "error-readings.json"):
            (state / "preflight" / name).unlink(missing_ok=True)
        timer, health = timer_then_health(records(filler(300), 5300))
        assert timer.exit_code == 0, _said(timer)  # events.lost is a warning for the node
        assert health.exit_code == 2, _said(health)
        assert "could not see the whole boot's kernel log" in _said(health)
        assert "events, which drained the node, cannot be re-judged" in _said(health)
        line = cluster.node_line()
        assert "DRAIN" in line and _reason(line) == drained, line
