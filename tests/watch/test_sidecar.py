"""The Kubernetes sidecar's scenario through the real `rocmseat watch` on loopback (issue 35,
item 2): one watcher, one target, a dead drafter.

The target is a real HTTP server playing the recorded vLLM /metrics sequence of tests/fixtures
(a healthy page, then the drafter's position-0 acceptance collapsed to 0.02 over 600 drafts).
The watcher is the `rocmseat watch --target ...` child a sidecar runs, with the manifest's
`--min-ready 0`: the first /metrics page of its own listener on which spec_drafter_dead is
active already says the replica is not ready (the verdict of the same evaluation: within one
interval), and /ready/r0 answers 503. With the default floor (1) the same replica, the last of
its seat, stays 200 with the alert firing: what the sidecar did before.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.watch.conftest import Answer, page
from tests.watch.hostile import env, reaped

COLLAPSE = ("01-healthy.txt", "02-collapse.txt", "03-collapse.txt")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _value(text: str, series: str) -> float | None:
    m = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def _run(page_server, tmp_path, *extra: str):
    """(the first /metrics page with the alert active, /ready/r0 right after) of a real
    `rocmseat watch` child over the collapse sequence."""
    page_server.play(*(Answer(page(name)) for name in COLLAPSE))
    port = _free_port()
    argv = [sys.executable, "-c", "from rocmseat.cli.main import main; main()", "watch",
            "--target", f"r0={page_server.url}", "--interval", "0.5",
            "--exporter-listen", f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "s"),
            "--baseline-al", "2.9", *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env())
    base = f"http://127.0.0.1:{port}"
    with reaped(proc), httpx.Client(timeout=5) as client:
        for _ in range(600):  # bounded: 600 polls of the listener, 0.05 s apart
            try:
                metrics = client.get(f"{base}/metrics").text
            except httpx.TransportError:
                metrics = ""
            alert = 'rocmseat_alert_active{alert="spec_drafter_dead",replica="r0"}'
            if _value(metrics, alert) == 1:
                ready = client.get(f"{base}/ready/r0")
                proc.terminate()
                assert proc.wait(30) == 0
                return metrics, ready
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
    pytest.fail("spec_drafter_dead never fired")


def test_sidecar_with_min_ready_0_takes_the_pod_out_at_the_evaluation_that_fires(
        page_server, tmp_path):
    metrics, ready = _run(page_server, tmp_path, "--min-ready", "0")
    # the same evaluation's verdict: not ready on the page where the alert first shows
    assert _value(metrics, 'rocmseat_replica_ready{replica="r0"}') == 0
    assert ready.status_code == 503
    assert ready.text.startswith("r0: spec_drafter_dead: ")


def test_sidecar_with_the_default_floor_stays_ready_and_alerts(page_server, tmp_path):
    metrics, ready = _run(page_server, tmp_path)
    assert _value(metrics, 'rocmseat_replica_ready{replica="r0"}') == 1
    assert ready.status_code == 200
    assert ready.text.startswith(
        "r0: ready, kept in rotation by the seat's floor (0 of 1 ready without it, min_ready 1)")
    assert "alert spec_drafter_dead" in ready.text
