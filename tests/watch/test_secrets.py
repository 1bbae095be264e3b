"""Credentials in --target, --webhook and targets-file URLs are sent and never shown, whatever
characters the password holds; failing sinks are said while running and counted.

Each test failed before its fix (issue 11 and the watch room's second review).
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from rocmseat.errors import ConfigError
from rocmseat.watch.filesd import parse_targets_file
from tests.conftest import REPO
from tests.watch.hostile import (
    CLI,
    GOOD_0,
    GOOD_1,
    env,
    once_at,
    reaped,
    serve,
    strict_json,
)


class AuthPages:
    """Serves the scripted pages only with the right Basic credentials (401 otherwise)."""

    def __init__(self, user, password, *pages, fail=False):
        self.token = base64.b64encode(f"{user}:{password}".encode()).decode()
        self.pages, self.fail, self.served = list(pages), fail, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                ok = self.headers.get("Authorization") == f"Basic {outer.token}"
                code = 500 if outer.fail else (200 if ok else 401)
                body = outer.pages[min(outer.served, len(outer.pages) - 1)].encode() if ok else b""
                outer.served += ok
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.port = self.httpd.server_address[1]

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_target_credentials_are_sent_and_never_shown(rocmseat_cli, tmp_path):
    server = AuthPages("admin", "s3cret-pw", GOOD_0, GOOD_1)
    try:
        url = f"http://admin:s3cret-pw@127.0.0.1:{server.port}/metrics"
        ok = once_at(rocmseat_cli, url, tmp_path, "--json", "--baseline-al", "2.9")
        table = once_at(rocmseat_cli, url, tmp_path, "--baseline-al", "2.9")
        server.fail = True
        failed = once_at(rocmseat_cli, url, tmp_path, "--json")
        bad = rocmseat_cli("watch", "--target", "bad name=http://admin:s3cret-pw@h:1/",
                           "--once", "--state-dir", str(tmp_path))
    finally:
        server.close()
    assert ok.exit_code == 0, ok.stdout  # the credentials went out as Basic auth
    assert failed.exit_code == 2 and "HTTP 500" in failed.stdout
    assert bad.exit_code == 2
    for result in (ok, table, failed, bad):
        assert "s3cret-pw" not in result.stdout + result.stderr
    assert strict_json(ok.stdout)["replicas"][0]["url"].startswith("http://<redacted>@127.0.0.1")


def _metric(port, name):

    for line in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def test_failing_webhook_and_hook_are_said_while_running_and_counted(tmp_path):
    receiver = AuthPages("am", "hunter2-pw", "", fail=True)  # answers 500 to everything

    class Post(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    am = ThreadingHTTPServer(("127.0.0.1", 0), Post)
    am.daemon_threads = True
    threading.Thread(target=am.serve_forever, daemon=True).start()
    webhook = f"http://am:hunter2-pw@127.0.0.1:{am.server_address[1]}/api/v2/alerts"
    target = f"r0=http://u:s3cret-pw@127.0.0.1:{receiver.port}/metrics"
    proc = subprocess.Popen(
        [*CLI, "watch", "--target", target, "--interval", "0.2", "--down-after", "1",
         "--exporter-listen", "127.0.0.1:0", "--webhook", webhook, "--command-hook", "false",
         "--state-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=REPO)
    lines: list[str] = []
    try:
        with reaped(proc):
            assert proc.stderr is not None
            deadline = time.monotonic() + 30  # a bound for a broken build
            while time.monotonic() < deadline:
                line = proc.stderr.readline()
                if not line:
                    break
                lines.append(line.rstrip("\n"))
                said = {s for s in ("sink=webhook delivery-failing", "sink=command-hook "
                                    "delivery-failing") if any(s in x for x in lines)}
                if len(said) == 2:
                    break
            port = int(lines[0].rsplit(":", 1)[1])
            webhook_failures = _metric(port, "rocmseat_webhook_failures_total")
            hook_failures = _metric(port, "rocmseat_command_hook_failures_total")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(15) == 0
    finally:
        receiver.close()
        am.shutdown()
        am.server_close()
    text = "\n".join(lines)
    assert "rocmseat-watch sink=webhook delivery-failing error=POST_http://<redacted>@" in text
    assert "HTTP_503" in text
    assert "rocmseat-watch sink=command-hook delivery-failing" in text
    assert webhook_failures is not None and webhook_failures >= 1
    assert hook_failures is not None and hook_failures >= 1
    assert "s3cret-pw" not in text and "hunter2-pw" not in text
SECRET = "pa55-Wd"


@pytest.mark.parametrize("password", [f"{SECRET} x", f"12/{SECRET}", f"{SECRET}?x", f"{SECRET}#x",
                                      f"{SECRET}@x"],
                         ids=["space", "slash", "question", "hash", "at"])
def test_credentials_with_reserved_characters_are_never_shown(rocmseat_cli, tmp_path, password):
    server = serve(GOOD_0, GOOD_1)
    port = server.port
    try:
        target = rocmseat_cli("watch", "--target", f"r0=http://user:{password}@127.0.0.1:{port}/"
                              "metrics", "--once", "--json", "--interval", "0.05",
                              "--state-dir", str(tmp_path))
        webhook = rocmseat_cli("watch", "--target", f"r0=127.0.0.1:{port}", "--webhook",
                               f"http://am:{password}@127.0.0.1:9/api/v2/alerts", "--once",
                               "--interval", "0.05", "--state-dir", str(tmp_path))
    finally:
        server.close()
    for result in (target, webhook):
        shown = result.stdout + result.stderr
        assert SECRET not in shown, shown
        assert result.exit_code == 2, shown
        errors = [ln for ln in result.stderr.splitlines() if ln.startswith("rocmseat: error")]
        assert len(errors) == 1, result.stderr  # refused at start, before any scrape or post
        assert "percent-encode" in errors[0] or "spaces" in errors[0], errors[0]


@pytest.mark.parametrize("address", [f"user:{SECRET}@h:1", f"http://user:{SECRET}@h:1",
                                     f"user:{SECRET} x@h:1"])
def test_a_targets_file_address_with_credentials_is_refused_without_showing_them(tmp_path,
                                                                                address):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"targets": [address]}]))
    with pytest.raises(ConfigError) as info:
        parse_targets_file(path.read_text(), path)
    assert SECRET not in info.value.message and "<redacted>" in info.value.message




def test_targets_file_params_of_the_usual_secret_names_never_reach_output(rocmseat_cli,
                                                                          tmp_path):
    """Issue 18, item 5, the command: targets-file `__param_pass`, `__param_apitoken` and
    `__param_jwt` were printed in clear (`...?pass=...&apitoken=...&jwt=...&token=<redacted>`).
    They are sent (the server sees them) and never shown, in the table or the JSON."""
    server = serve(GOOD_0, GOOD_1)
    host_port = server.url.split("/")[2]
    params = {"pass": "pw-1x", "apitoken": "tok-2y", "jwt": "jwt-3z", "token": "t-4w"}
    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"targets": [host_port], "labels": {
        "replica": "r0", **{f"__param_{k}": v for k, v in params.items()}}}]))
    try:
        outputs = [rocmseat_cli("watch", "--targets-file", str(path), "--once", "--interval",
                                "0.05", "--state-dir", str(tmp_path / "s"), *extra)
                   for extra in ((), ("--json",))]
    finally:
        server.close()
    for result in outputs:
        assert result.exit_code in (0, 2), result.stdout + result.stderr
        for value in params.values():
            assert value not in result.stdout + result.stderr
    (replica,) = strict_json(outputs[1].stdout)["replicas"]
    assert replica["url"] == (f"http://{host_port}/metrics?pass=<redacted>&apitoken=<redacted>"
                              "&jwt=<redacted>&token=<redacted>")
