"""The gate's children: a process group a child opened is stopped with it; READY=1 over the
notify socket; the real `rocmseat watch` seeing a replica go down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from rocmseat.speculation.gate.procs import (
    Child,
    ChildError,
    NotifyListener,
    WatchChild,
    port_in_use,
    wait_ready,
)
from tests.conftest import REPO
from tests.e2e.harness import free_port

# A parent that starts a child in a session of its own (as `rocmseat launch` starts the engine)
# and both sleep: killing the parent's group alone would leave the child running.
PARENT = textwrap.dedent("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                             start_new_session=True)
    print(child.pid, flush=True)
    time.sleep(600)
""")


def test_stop_kills_the_groups_of_descendants(tmp_path):
    log = tmp_path / "parent.log"
    child = Child([sys.executable, "-c", PARENT], log)
    deadline = time.monotonic() + 30
    while not log.read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.1)
    grandchild = int(log.read_text().split()[0])
    assert os.getpgid(grandchild) != os.getpgid(child.pid)
    child.note_groups()
    child.stop(1.0)
    assert not child.alive()
    deadline = time.monotonic() + 10
    while psutil.pid_exists(grandchild) and psutil.Process(grandchild).status() != "zombie":
        assert time.monotonic() < deadline, "the child's own session survived"
        time.sleep(0.1)


def test_a_program_that_cannot_start(tmp_path):
    with pytest.raises(ChildError, match="cannot start"):
        Child([str(tmp_path / "missing")], tmp_path / "log")


SENDER = textwrap.dedent("""
    import os, socket, time
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.connect(os.environ["NOTIFY_SOCKET"])
    s.send(b"STATUS=compiling (backbone)")
    time.sleep(0.3)
    s.send(b"READY=1\\nSTATUS=ready in 1 s")
    time.sleep(600)
""")


def test_ready_over_the_notify_socket(tmp_path):
    notify = NotifyListener()
    statuses: list[str] = []
    child = Child([sys.executable, "-c", SENDER], tmp_path / "log",
                  env={**os.environ, "NOTIFY_SOCKET": str(notify.path)})
    try:
        after = wait_ready(child, notify, 30.0, statuses.append)
    finally:
        child.stop(1.0)
        notify.close()
    assert after < 30 and statuses[0] == "compiling (backbone)"
    assert not notify.path.exists()


def test_a_child_that_exits_before_ready_says_why(tmp_path):
    notify = NotifyListener()
    child = Child([sys.executable, "-c", "import sys; print('not ready within 3 s; engine "
                   "stopped', file=sys.stderr); sys.exit(1)"], tmp_path / "log")
    try:
        with pytest.raises(ChildError, match="launch exited 1 before the replica was ready: "
                                             "not ready within 3 s"):
            wait_ready(child, notify, 30.0, lambda s: None)
    finally:
        child.stop(1.0)
        notify.close()


def test_the_watchdog_sees_a_replica_go_down(tmp_path):
    port = free_port()
    assert not port_in_use("127.0.0.1", port)
    seat = tmp_path / "seat.toml"
    seat.write_text((REPO / "launchers" / "demo-cpu.toml").read_text()
                    .replace("port_base = 8100", f"port_base = {port}"))
    watch = WatchChild(seat, tmp_path / "state", tmp_path / "watch.log", interval_s=0.2,
                       stall_after_s=5.0)
    try:
        deadline = time.monotonic() + 60
        while not watch.hangs() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        watch.stop()
    (event,) = [e for e in watch.hangs()][:1]
    assert (event.replica, event.alert, event.state) == ("r0", "replica_down", "firing")
    assert not watch.child.alive()
    assert Path(tmp_path / "watch.log").read_text().count("alert=replica_down") >= 1
    # the gate read the watchdog's structured alert (its --command-hook), not its log line
    first = json.loads(watch.alerts_file.read_text().splitlines()[0])
    assert first["schema"] == "rocmseat.watch-alert/v1" and first["alert"] == "replica_down"
    assert event.line.startswith("rocmseat-watch replica=r0 alert=replica_down state=firing")
    assert watch.bad_alerts == []


@pytest.mark.parametrize(("line", "why"), [
    ("rocmseat-watch replica=r0 alert=replica_stalled state=firing", "not JSON"),
    ('{"schema": "rocmseat.watch-alert/v2", "replica": "r0", "alert": "a", "state": "firing"}',
     "not a rocmseat.watch-alert/v1 document"),
    ('{"schema": "rocmseat.watch-alert/v1", "replica": "r0", "alert": "a", "state": "maybe"}',
     "key 'state': "),
    ('{"schema": "rocmseat.watch-alert/v1", "replica": 7, "alert": "a", "state": "firing"}',
     "key 'replica': expected a string"),
    ("[1, 2]", "expected a JSON object"),
    ('{"a": ' + "1" * 400 + "}", "an integer of 400 digits"),
])
def test_an_alerts_line_that_is_no_alert_document(tmp_path, line, why):
    from rocmseat.speculation.gate.procs import WatchChild

    watch = WatchChild.__new__(WatchChild)  # the parser alone: no watchdog started
    watch.events, watch.bad_alerts = [], []
    watch.alerts_file = tmp_path / "watch.log.alerts.ndjson"
    watch._lock = threading.Lock()
    watch._alert(line)
    assert watch.events == [] and len(watch.bad_alerts) == 1
    assert why in watch.bad_alerts[0], watch.bad_alerts[0]


def test_an_alert_with_control_characters_is_one_printable_line(tmp_path):
    from rocmseat.speculation.gate.procs import WatchChild

    watch = WatchChild.__new__(WatchChild)
    watch.events, watch.bad_alerts = [], []
    watch.alerts_file = tmp_path / "a.ndjson"
    watch._lock = threading.Lock()
    watch._alert(json.dumps({"schema": "rocmseat.watch-alert/v1", "replica": "r0\n\x1b[2J",
                             "alert": "replica_stalled", "state": "firing",
                             "details": {"url": "http://u:hunter2@h/metrics\u009b"}}))
    (event,) = watch.events
    assert event.alert == "replica_stalled" and "hunter2" not in event.line
    assert event.line.isprintable()


def test_the_alert_sink_appends_one_line_per_alert(tmp_path):
    from rocmseat.speculation.gate.procs import ALERT_SINK

    sink = tmp_path / "alerts.ndjson"
    for state in ("firing", "resolved"):
        doc = {"schema": "rocmseat.watch-alert/v1", "replica": "r0", "alert": "x",
               "state": state}
        done = subprocess.run([sys.executable, "-I", str(ALERT_SINK), str(sink)],
                              input=json.dumps(doc, indent=2), capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, done.stderr
    assert [json.loads(x)["state"] for x in sink.read_text().splitlines()] == ["firing",
                                                                               "resolved"]
    link = tmp_path / "link.ndjson"
    link.symlink_to(tmp_path / "elsewhere")
    done = subprocess.run([sys.executable, "-I", str(ALERT_SINK), str(link)], input="{}",
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and not (tmp_path / "elsewhere").exists()
    done = subprocess.run([sys.executable, "-I", str(ALERT_SINK), str(sink)],
                          input="x" * (70 << 10), capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "over 65536 bytes" in done.stderr


def _stand_in(tmp_path: Path, body: str) -> Path:
    """A program in the place of the engine's Python: it speaks vllm_bench.py's line protocol
    (this tests the protocol's handling; the real client runs in the engine tier)."""
    program = tmp_path / "python"
    program.write_text(f"#!{sys.executable}\nimport json, sys, time\n"
                       "MARK = '@@rocmseat-bench '\n" + textwrap.dedent(body))
    program.chmod(0o755)
    return program


def test_bench_client_protocol(tmp_path):
    from rocmseat.speculation.gate.procs import BenchClient

    program = _stand_in(tmp_path, """
        print(MARK + json.dumps({"id": None, "ok": True, "ready": True}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            if request["argv"] == ["--hang"]:
                time.sleep(600)
            ok = request["argv"] != ["--fail"]
            print(MARK + json.dumps({"id": request["id"], "ok": ok,
                                     "error": None if ok else "ValueError: bad"}), flush=True)
    """)
    client = BenchClient(program, tmp_path / "bench.log", api_key="sk-secret")
    try:
        client.wait_ready(30)
        assert client.run(["--x"], 30, lambda: None, "decode-c1-r0") == {
            "id": 1, "ok": True, "error": None}
        assert client.run(["--fail"], 30, lambda: None, "decode-c1-r1")["error"] == (
            "ValueError: bad")
        with pytest.raises(ChildError, match="decode-c4-r0 aborted: replica_stalled"):
            client.run(["--hang"], 30, lambda: "replica_stalled", "decode-c4-r0")
    finally:
        client.stop()
    assert "sk-secret" not in (tmp_path / "bench.log").read_text()


def test_bench_client_that_dies_mid_run(tmp_path):
    from rocmseat.speculation.gate.procs import BenchClient

    program = _stand_in(tmp_path, """
        print(MARK + json.dumps({"id": None, "ok": True, "ready": True}), flush=True)
        sys.stdin.readline()
        sys.stderr.write("Traceback ...\\nRuntimeError: engine went away\\n")
        sys.exit(1)
    """)
    client = BenchClient(program, tmp_path / "bench.log")
    try:
        client.wait_ready(30)
        with pytest.raises(ChildError, match=r"the benchmark client exited 1 during "
                                             r"decode-c1-r0: .*RuntimeError: engine went away"):
            client.run(["--x"], 30, lambda: None, "decode-c1-r0")
    finally:
        client.stop()


def test_bench_client_that_cannot_load_vllm(tmp_path):
    from rocmseat.speculation.gate.procs import BenchClient

    program = _stand_in(tmp_path, """
        print(MARK + json.dumps({"id": None, "ok": False,
                                 "error": "ModuleNotFoundError: No module named 'vllm'"}),
              flush=True)
    """)
    client = BenchClient(program, tmp_path / "bench.log")
    try:
        with pytest.raises(ChildError, match=r"not usable with .*No module named 'vllm'"):
            client.wait_ready(30)
        deadline = time.monotonic() + 10
        while client.gone() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.gone() is not None and "exited 0" in client.gone()
    finally:
        client.stop()


def test_watch_scrapes_from_the_watchdogs_own_page():
    from rocmseat.speculation.gate.procs import watch_scrapes
    from rocmseat.watch.exporter import ExportState, render

    assert watch_scrapes(render(ExportState)) is None  # no evaluation yet
    page = render(lambda: ExportState(evaluated_at_s=1.0, evaluations=7))
    assert watch_scrapes(page) == 7
    page += 'rocmseat_scrape_errors_total{replica="r0"} 3.0\n'
    assert watch_scrapes(page) == 4
    assert watch_scrapes("rocmseat_watch_evaluations_total nan\n") is None
    assert watch_scrapes("<html>not a metrics page</html>") is None


def test_the_gate_reads_the_watchdogs_names_from_the_exporter():
    """The counters and the start line the gate reads are the exporter's own constants: a
    rename on either side moves both (and a start line without a listener names none)."""
    from rocmseat.speculation.gate.procs import watch_scrapes
    from rocmseat.watch.exporter import (
        EVALUATIONS,
        SCRAPE_ERRORS,
        START_LINE,
        ExportState,
        exporter_url,
        listen_address,
        make_exporter,
        render,
    )

    page = render(lambda: ExportState(evaluated_at_s=1.0, evaluations=5))
    assert f"\n{EVALUATIONS}_total 5.0\n" in page
    assert watch_scrapes(page + f'{SCRAPE_ERRORS}_total{{replica="r0"}} 2.0\n') == 3
    server = make_exporter("127.0.0.1:0", ExportState)
    try:
        where = listen_address(server)
        line = f"2026-12-02T07:00:00Z {START_LINE} replicas=r0 interval_s=2 exporter={where}"
        assert exporter_url(line) == f"http://{where}"
    finally:
        server.server_close()
    assert exporter_url(f"{START_LINE} replicas=r0 exporter=off") is None
    assert exporter_url("rocmseat-watch reload exporter=127.0.0.1:9") is None
    assert exporter_url(f"{START_LINE} exporter=[::1]:9464") == "http://[::1]:9464"


def _metrics_server(page: str):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_gate_sees_whether_the_watchdog_scrapes(tmp_path):
    """The real `rocmseat watch` beside a replica that answers: its successful scrapes grow;
    once it is gone the gate says so (a dead watchdog sees no hang: the hang gate is UNKNOWN)."""
    from rocmseat.speculation.gate.arms import watch_gap

    server = _metrics_server((REPO / "tests" / "fixtures" / "metrics" / "vllm-llama-k3.txt")
                             .read_text())
    port = server.server_address[1]
    seat = tmp_path / "seat.toml"
    seat.write_text((REPO / "launchers" / "demo-cpu.toml").read_text()
                    .replace("port_base = 8100", f"port_base = {port}"))
    watch = WatchChild(seat, tmp_path / "state", tmp_path / "watch.log", interval_s=0.3,
                       stall_after_s=5.0)
    try:
        assert watch.wait_started(60.0) is None
        assert watch.exporter is not None and watch.exporter.startswith("http://127.0.0.1:")
        # the exporter answers before its first evaluation ends; on a loaded host (load 10 in
        # a CI run) one /metrics read can miss its 5 s budget: poll, bounded
        deadline = time.monotonic() + 60.0
        before = watch.scrapes()
        while before is None and time.monotonic() < deadline:
            time.sleep(0.3)
            before = watch.scrapes()
        assert before is not None
        assert watch_gap(watch, before) is None  # it scraped again after `before`
        assert watch.gone() is None
        watch.child.stop(5.0)
        gap = watch_gap(watch, watch.scrapes())
        assert gap is not None and gap.startswith("the watchdog exited ")
    finally:
        watch.stop()
        server.shutdown()
        server.server_close()
    assert not watch.hangs()


def test_a_childs_log_is_read_capped_and_never_through_a_fifo(tmp_path):
    from rocmseat.speculation.gate.procs import read_log

    log = tmp_path / "launch.log"
    log.write_bytes(b"a" * 100 + b"\nlast line\n")
    assert read_log(log, tail_bytes=10) == "last line\n"
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        read_log(fifo)  # blocked forever before (Path.read_text on a FIFO without a writer)
    link = tmp_path / "link.log"
    link.symlink_to(log)
    with pytest.raises(OSError):
        read_log(link)
