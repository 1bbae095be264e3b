"""Issue 17 against a real single-node Slurm started by the test (tier `fleet`): the error window
is fixed in time, so a person's look by hand between two health checks never resumes a node the
timer's run drained for AER errors.

Before: the window was "since the last full run"; the hand run advanced it, found no new
BadTLP, cached an OK verdict, and the next `slurm health` resumed the node ("resumed (it was
drained: rocmseat: aer.badtlp ...)"), and `--format npd --cached --only aer` said OK.
"""

from __future__ import annotations

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
