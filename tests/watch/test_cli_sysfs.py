"""`rocmseat watch SEAT --sysfs-root`: an auto seat's replicas come from the node, and a state
file that is hostile never blocks or crashes the watcher (issues 10, 11)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from rocmseat.watch.baseline import baseline_path, load_baseline
from tests.conftest import FIXTURES, REPO

R9700 = str(REPO / "launchers" / "r9700-mxfp4-dflash.toml")


def test_auto_seat_on_the_node_watches_every_replica_with_its_gpus(rocmseat_cli, tmp_path):
    result = rocmseat_cli("watch", R9700, "--once", "--json", "--interval", "0.05",
                          "--timeout", "0.5", "--exporter-listen", "off",
                          "--state-dir", str(tmp_path / "state"),
                          "--sysfs-root", str(FIXTURES / "sysfs" / "x99-r9700"))
    assert result.exit_code in (1, 2), result.stderr  # nothing listens: down, never ok
    doc = json.loads(result.stdout)
    urls = {r["replica"]: r["url"] for r in doc["replicas"]}
    assert urls == {"r0": "http://127.0.0.1:8000/metrics", "r1": "http://127.0.0.1:8001/metrics"}
    assert all(not r["up"] for r in doc["replicas"])
    gpus = {r["replica"]: r["gpus"] for r in doc["replicas"]}
    assert gpus == {"r0": ["0000:05:00.0", "0000:09:00.0"], "r1": ["0000:86:00.0", "0000:89:00.0"]}


def test_a_fifo_baseline_is_ignored_without_blocking(tmp_path: Path):
    fifo = baseline_path(tmp_path, "r0")
    fifo.parent.mkdir(mode=0o755)
    os.mkfifo(fifo)
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(load_baseline(tmp_path, "r0")[0]),
                              daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():  # release the reader so the suite goes on, then fail
        with open(fifo, "w"):
            pass
        raise AssertionError("load_baseline blocked on a FIFO")
    assert result == [None]


def test_a_deeply_nested_baseline_is_ignored(tmp_path: Path):
    path = baseline_path(tmp_path, "r0")
    path.parent.mkdir(mode=0o755)
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert load_baseline(tmp_path, "r0") == (
        None, f"{path}: not JSON: nested too deeply: not used, re-learned")
