"""Issue 17 against a real single-node Slurm started by the test (tier `fleet`): the error window
is fixed in time, so a person's look by hand between two health checks never resumes a node the
timer's run drained for AER errors.

Before: the window was "since the last full run"; the hand run advanced it, found no new
BadTLP, cached an OK verdict, and the next `slurm health` resumed the node ("resumed (it was
drained: rocmseat: aer.badtlp ...)"), and `--format npd --cached --only aer` said OK.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest

from tests.fleet.slurm_cluster import running_cluster

# the harness's cluster directory (skips when Slurm or munge is missing)
from tests.fleet.test_slurm_real import cluster_root  # noqa: F401

pytestmark = pytest.mark.fleet

ROOT_PORT = "devices/pci0000:80/0000:80:02.0"  # GPU 86:00.0's root port


def _badtlp_only(copy_tree):
    """The healthy X99 tree with the incident's 6,655 BadTLP on one root port: AER is the only
    failing family, so nothing but the window can keep the node drained."""
    root = copy_tree("x99-r9700")
    for name, pattern, value in (
        ("aer_dev_correctable", r"(?m)^BadTLP \d+$", "BadTLP 6655"),
        ("aer_dev_correctable", r"(?m)^TOTAL_ERR_COR \d+$", "TOTAL_ERR_COR 6655"),
        ("aer_rootport_total_err_cor", r"(?m)^\d+$", "6655"),
    ):
        path = root / ROOT_PORT / name
        path.write_text(re.sub(pattern, value, path.read_text()))
    return root


def _state(line: str) -> str:
    match = re.search(r"\bState=(\S+)", line)
    return match.group(1) if match else "?"


def test_a_hand_run_keeps_the_node_drained(
    cluster_root, rocmseat_cli, copy_tree, monkeypatch, tmp_path  # noqa: F811
):
    root = _badtlp_only(copy_tree)
    state_dir = tmp_path / "state"

    def preflight(*args):
        return rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir",
                            str(state_dir), *args)

    with running_cluster(cluster_root / "window") as cluster:
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        monkeypatch.delenv("SLURMD_NODENAME", raising=False)

        def health():
            return rocmseat_cli("slurm", "health", "--sysfs-root", str(root),
                                "--state-dir", str(state_dir))

        # the timer's full run, then the health check: drained for aer.badtlp
        timer = preflight("--format", "npd")
        assert (timer.exit_code, timer.stdout) == (1, "FAIL aer.badtlp 0000:80:02.0\n")
        result = health()
        assert result.exit_code == 1, result.stderr
        assert "DRAIN" in _state(cluster.node_line())
        assert "rocmseat: aer.badtlp 0000:80:02.0" in cluster.node_line()

        # a person runs preflight once by hand: the same window, the same failure
        by_hand = preflight()
        assert by_hand.exit_code == 1
        assert ("+6,655 BadTLP since boot (no reading of this boot is 24 h old yet)"
                in by_hand.stdout)
        cached = preflight("--format", "npd", "--cached", "--only", "aer")
        assert (cached.exit_code, cached.stdout) == (1, "FAIL aer.badtlp 0000:80:02.0\n")

        # the next health check keeps the node drained
        result = health()
        assert result.exit_code == 1, result.stderr
        assert "resumed" not in result.stdout
        assert result.stdout.startswith(f"{cluster.node}: FAIL ")
        assert "DRAIN" in _state(cluster.node_line()), cluster.node_line()


def test_a_month_slow_clock_stepped_in_one_boot_keeps_the_node_drained(
    cluster_root, rocmseat_cli, copy_tree, monkeypatch, tmp_path  # noqa: F811
):
    """Issue 24: the node-preflight timer fires 1 min after boot with the clock a month slow
    (a CMOS reset), then NTP steps it. Before: the boot's 6,655 BadTLP reading, stamped a month
    ago, became the base of the 24 h window: `slurm health` said OK and resumed the node. The
    window runs on the boot clock now (<proc>/uptime): the node stays drained."""
    from rocmseat.findings import Severity
    from rocmseat.preflight.run import PreflightOptions, preflight_report
    from tests.preflight.test_boot_clock import proc_root

    root = _badtlp_only(copy_tree)
    state_dir = tmp_path / "state"
    month_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    # the timer's run, one minute after boot, before time sync
    first = preflight_report(root, state_dir, PreflightOptions(now=lambda: month_ago,
                             proc_root=proc_root(tmp_path, 60.0)))
    assert [f.check_id for f in first.findings if f.severity == Severity.FAIL] == ["aer.badtlp"]
    # NTP has stepped the clock; ten minutes of uptime later Slurm's health checks run
    monkeypatch.setenv("ROCMSEAT_PROC_ROOT", str(proc_root(tmp_path, 660.0)))
    with running_cluster(cluster_root / "clock") as cluster:
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
        monkeypatch.delenv("SLURMD_NODENAME", raising=False)

        def health():
            return rocmseat_cli("slurm", "health", "--sysfs-root", str(root),
                                "--state-dir", str(state_dir))

        result = health()
        assert result.exit_code == 1, result.stdout + result.stderr
        assert "DRAIN" in _state(cluster.node_line()), cluster.node_line()
        assert "rocmseat: aer.badtlp 0000:80:02.0" in cluster.node_line()
        (proc_root(tmp_path, 1260.0))  # ten more minutes
        result = health()
        assert result.exit_code == 1, result.stderr
        assert "resumed" not in result.stdout
        assert "DRAIN" in _state(cluster.node_line()), cluster.node_line()
