"""The real monitoring stack (tier `fleet`): Debian's Prometheus scrapes `rocmseat watch`'s
exporter with prometheus/rocmseat-rules.yml loaded, and the watch webhook posts to Debian's
Alertmanager running prometheus/alertmanager.yml. Both are started by the test (own configs,
temporary storage, free ports) and every check reads their own APIs: the drafter-dead alert
firing with its labels, inhibited while the replica is down, then resolved (Alertmanager's
resolved notification), and Prometheus's RocmseatWatchAlert the same way."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.conftest import REPO
from tests.watch.conftest import Answer, page

AM_CONFIG = REPO / "prometheus" / "alertmanager.yml"
RULES = REPO / "prometheus" / "rocmseat-rules.yml"
LABELS = {"alertname": "spec_drafter_dead", "replica": "r0", "severity": "critical",
          "source": "rocmseat-watch"}


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (Debian packages prometheus, "
                    "prometheus-alertmanager)")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], Any], timeout_s: float,
             seen: Callable[[], str]) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s; seen:\n{seen()}")
        time.sleep(0.3)


class Capture:
    """Alertmanager's receivers point here: every notification it sends is recorded."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.bodies.append({"path": self.path, **json.loads(raw)})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Daemon:
    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=REPO)

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def am_config(capture: Capture, tmp: Path) -> Path:
    """The shipped routes and inhibitions; receivers pointed at the capture, timers short."""
    doc = yaml.safe_load(AM_CONFIG.read_text())
    for receiver in doc["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = f"{capture.url}/{receiver['name']}"
    doc["route"].update(group_wait="1s", group_interval="1s", repeat_interval="1m")
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def stack(tmp_path: Path, page_server: Any) -> Iterator[dict[str, Any]]:
    prometheus, alertmanager = _binary("prometheus"), _binary("prometheus-alertmanager")
    capture = Capture()
    daemons: list[Daemon] = []
    am_port, prom_port = _free_port(), _free_port()
    try:
        am = Daemon([alertmanager, f"--config.file={am_config(capture, tmp_path)}",
                     f"--storage.path={tmp_path / 'am'}",
                     f"--web.listen-address=127.0.0.1:{am_port}", "--cluster.listen-address="],
                    tmp_path / "alertmanager.log")
        daemons.append(am)
        wait_for("Alertmanager ready", lambda: _ok(f"http://127.0.0.1:{am_port}/-/ready"), 60,
                 am.tail)
        page_server.play(Answer(page("00-healthy.txt")))
        env = {**os.environ, "PYTHONPATH": str(REPO), "ROCMSEAT_ERROR_LOG": "/dev/null"}
        watch = Daemon([sys.executable, "-c", "from rocmseat.cli.main import main; main()",
                        "watch", "--target", f"r0={page_server.url}", "--interval", "0.5",
                        "--timeout", "0.5", "--down-after", "2", "--stall-after", "3600",
                        "--exporter-listen", "127.0.0.1:0", "--state-dir",
                        str(tmp_path / "state"),
                        "--webhook", f"http://127.0.0.1:{am_port}/api/v2/alerts"],
                       tmp_path / "watch.log", env)
        daemons.append(watch)
        start = wait_for("rocmseat watch start line", lambda: next(
            (ln for ln in watch.log.read_text().splitlines() if "exporter=" in ln), None), 30,
            watch.tail)
        exporter = start.rsplit("exporter=", 1)[1].strip()
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
            f"rule_files: ['{RULES}']\n"
            "alerting:\n  alertmanagers:\n"
            f"    - static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]\n"
            "scrape_configs:\n  - job_name: rocmseat\n    honor_labels: true\n"
            f"    static_configs: [{{targets: ['{exporter}']}}]\n")
        prom = Daemon([prometheus, f"--config.file={config}",
                       f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                       f"--web.listen-address=127.0.0.1:{prom_port}"], tmp_path / "prom.log")
        daemons.append(prom)
        wait_for("Prometheus ready", lambda: _ok(f"http://127.0.0.1:{prom_port}/-/ready"), 60,
                 prom.tail)
        yield {"am": f"http://127.0.0.1:{am_port}", "prom": f"http://127.0.0.1:{prom_port}",
               "capture": capture, "watch": watch, "am_daemon": am, "prom_daemon": prom,
               "pages": page_server}
    finally:
        for daemon in reversed(daemons):
            daemon.stop()
        capture.close()


def _ok(url: str) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(url, timeout=2).status_code == 200
    return False


def am_alerts(base: str) -> list[dict[str, Any]]:
    return list(httpx.get(f"{base}/api/v2/alerts", timeout=5).json())


def find(alerts: list[dict[str, Any]], **labels: str) -> dict[str, Any] | None:
    return next((a for a in alerts if all(a["labels"].get(k) == v for k, v in labels.items())),
                None)


def prom_alerts(base: str) -> list[dict[str, Any]]:
    return list(httpx.get(f"{base}/api/v1/alerts", timeout=5).json()["data"]["alerts"])


@pytest.mark.fleet
def test_alert_fires_is_inhibited_and_resolves_through_prometheus_and_alertmanager(stack):
    am, prom, capture, watch = stack["am"], stack["prom"], stack["capture"], stack["watch"]

    def seen() -> str:
        return (f"alertmanager: {json.dumps(am_alerts(am))[:1500]}\n"
                f"prometheus alerts: {json.dumps(prom_alerts(prom))[:800]}\n"
                f"notifications: {json.dumps(capture.bodies)[-800:]}\nwatch log:\n"
                f"{watch.tail()}")

    # 1. The drafter dies: the watch posts spec_drafter_dead; Alertmanager holds it, firing.
    stack["pages"].play(*(Answer(page(n)) for n in ("00-healthy.txt", "01-healthy.txt",
                                                    "02-collapse.txt", "03-collapse.txt")))
    fired = wait_for("spec_drafter_dead active in Alertmanager", lambda: find(
        [a for a in am_alerts(am) if a["status"]["state"] == "active"], **LABELS), 60, seen)
    assert fired["labels"] == LABELS, fired["labels"]
    assert "endsAt" in fired and fired["annotations"]["summary"].startswith("the drafter's")
    assert [r["name"] for r in fired["receivers"]] == ["rocmseat-page"]
    # ... Prometheus scraped the exporter, and its RocmseatWatchAlert reached Alertmanager too.
    wait_for("RocmseatWatchAlert firing in Prometheus", lambda: any(
        a["labels"].get("alertname") == "RocmseatWatchAlert"
        and a["labels"].get("alert") == "spec_drafter_dead" and a["state"] == "firing"
        for a in prom_alerts(prom)), 60, seen)
    wait_for("RocmseatWatchAlert in Alertmanager", lambda: find(
        am_alerts(am), alertname="RocmseatWatchAlert", alert="spec_drafter_dead",
        replica="r0"), 60, seen)
    wait_for("the page notification", lambda: any(
        b["path"] == "/rocmseat-page" and b["status"] == "firing" for b in capture.bodies),
        30, seen)

    # 2. The replica goes down: replica_down inhibits the drafter alert of the same replica.
    stack["pages"].play(Answer("<html>502</html>", content_type="text/html"))
    down = wait_for("replica_down active", lambda: find(
        am_alerts(am), alertname="replica_down", replica="r0"), 60, seen)
    assert down["labels"]["severity"] == "critical"

    def inhibited() -> dict[str, Any] | None:
        alert = find(am_alerts(am), **LABELS)
        if alert and alert["status"]["state"] == "suppressed" and alert["status"]["inhibitedBy"]:
            return alert
        return None

    muted = wait_for("spec_drafter_dead suppressed by replica_down", inhibited, 60, seen)
    assert muted["status"]["inhibitedBy"] == [down["fingerprint"]]
    wait_for("RocmseatWatchAlert{alert=spec_drafter_dead} suppressed", lambda: (
        (a := find(am_alerts(am), alertname="RocmseatWatchAlert", alert="spec_drafter_dead"))
        is not None and a["status"]["state"] == "suppressed"), 60, seen)

    # 3. It comes back with a healthy drafter: both resolve; Alertmanager says so.
    started = len(capture.bodies)
    stack["pages"].play(*(Answer(page(n)) for n in ("04-restarted.txt",
                                                    "05-after-restart.txt")))
    wait_for("spec_drafter_dead gone from Alertmanager's active alerts",
             lambda: find(am_alerts(am), **LABELS) is None, 60, seen)

    def resolved_notice() -> dict[str, Any] | None:
        for body in capture.bodies[started:]:
            for alert in body["alerts"]:
                if alert["labels"] == LABELS and alert["status"] == "resolved":
                    return dict(alert)
        return None

    notice = wait_for("a resolved notification for spec_drafter_dead", resolved_notice, 60,
                      seen)
    assert notice["endsAt"] >= notice["startsAt"]
    assert notice["startsAt"].startswith(fired["startsAt"][:19])
    wait_for("replica_down gone", lambda: find(am_alerts(am), alertname="replica_down") is None,
             60, seen)
    wait_for("Prometheus's RocmseatWatchAlert resolved", lambda: not any(
        a["labels"].get("alert") == "spec_drafter_dead" for a in prom_alerts(prom)), 60, seen)
    log = watch.log.read_text()
    assert "delivery-failing" not in log, log


@pytest.mark.tools
def test_amtool_accepts_the_shipped_routes():
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool not installed (Debian package prometheus-alertmanager)")
    done = subprocess.run([amtool, "check-config", str(AM_CONFIG)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert " - 3 inhibit rules" in done.stdout and " - 2 receivers" in done.stdout


@pytest.mark.fleet
def test_targets_files_read_as_prometheus_reads_them(tmp_path: Path) -> None:
    """The same file_sd files through Debian's Prometheus (its /api/v1/targets discovered
    labels) and through rocmseat.watch.filesd: the same labels for every target (issue 13,
    review 2: `rack: 12` in YAML is the label "12", a null or empty value is no label)."""
    from rocmseat.watch.filesd import parse_targets_file
    from tests.watch.test_filesd_rules import SCALARS_YAML

    prometheus = _binary("prometheus")
    files = {"scalars.yml": SCALARS_YAML,
             "nulls.json": json.dumps([{"targets": ["127.0.0.1:2"], "labels": {
                 "instance": "", "replica": None, "zone": "z", "node": "gpu-07"}}])}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1h}\nscrape_configs:\n  - job_name: sd\n"
        f"    file_sd_configs: [{{files: ['{tmp_path}/*.yml', '{tmp_path}/*.json']}}]\n")
    prom = Daemon([prometheus, f"--config.file={config}",
                   f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                   f"--web.listen-address=127.0.0.1:{port}"], tmp_path / "prom.log")
    try:
        def discovered() -> list[dict[str, str]] | None:
            with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                data = httpx.get(f"http://127.0.0.1:{port}/api/v1/targets?state=any",
                                 timeout=2).json()["data"]
                found = [t["discoveredLabels"] for t in data["activeTargets"]]
                return found if len(found) == len(files) else None
            return None

        seen = wait_for("Prometheus discovers both files", discovered, 60, prom.tail)
    finally:
        prom.stop()
    for labels in seen:
        path = Path(labels["__meta_filepath"])
        (target,) = parse_targets_file(path.read_text(), path)
        theirs = {k: v for k, v in labels.items() if not k.startswith("__") and k != "job"}
        theirs.setdefault("instance", labels["__address__"])  # Prometheus sets it after relabel
        ours = dict(target.labels)
        if "replica" in theirs:
            ours["replica"] = target.name
        assert ours == theirs, (path.name, ours, theirs)
