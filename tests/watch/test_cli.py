"""`rocmseat watch` end to end: --once against a real local server, seats, the running loop."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading

import pytest

from rocmseat.watch.alerts import AlertBook
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.render import render_table
from rocmseat.watch.scrape import Target
from rocmseat.watch.status import report_json
from tests.conftest import REPO
from tests.watch.conftest import Answer, FakeClock, page


def once(cli, server, tmp_path, *extra):
    return cli("watch", "--target", f"r0={server.url}", "--once", "--interval", "0.05",
               "--state-dir", str(tmp_path / "state"), *extra)


def test_once_healthy_exits_0_with_a_table(rocmseat_cli, page_server, tmp_path):
    page_server.play(Answer(page("00-healthy.txt")), Answer(page("01-healthy.txt")))
    result = once(rocmseat_cli, page_server, tmp_path, "--baseline-al", "2.9")
    assert result.exit_code == 0, result.stderr
    header, row = result.stdout.splitlines()[:2]
    assert header.split()[:4] == ["replica", "up", "AL", "base"]
    assert row.split()[:4] == ["r0", "yes", "2.95", "2.90"]
    assert "r0: baseline 2.90 pinned, per-position 0.800 0.640 0.512 over 600 drafts" in (
        result.stdout.splitlines())
    # issue 35: the table was 91 columns; every line fits a terminal of 80
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_once_collapse_exits_1_with_json(rocmseat_cli, page_server, tmp_path):
    page_server.play(Answer(page("01-healthy.txt")), Answer(page("02-collapse.txt")))
    result = once(rocmseat_cli, page_server, tmp_path, "--json")
    assert result.exit_code == 1, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "rocmseat.watch/v1"
    (replica,) = data["replicas"]
    assert replica["alerts"] == ["spec_drafter_dead"]
    assert replica["window"]["drafts"] == 600 and replica["learning"] is True
    assert replica["window"]["position_acceptance"] == [0.02, 0.0, 0.0]


def test_once_table_says_what_fired_and_that_the_baseline_is_learning(rocmseat_cli, page_server,
                                                                     tmp_path):
    page_server.play(Answer(page("01-healthy.txt")), Answer(page("02-collapse.txt")))
    result = once(rocmseat_cli, page_server, tmp_path)
    assert result.exit_code == 1, result.stderr
    notes = result.stdout.splitlines()[2:]
    assert "r0: no baseline yet (learning; pin one with --baseline-al" in notes[0]
    assert notes[1] == ("r0: spec_drafter_dead: the drafter's first token is almost never "
                        "accepted (stale cache, wrong drafter weights?)")


@pytest.mark.parametrize("answers", [
    [Answer("<html>proxy error</html>", content_type="text/html")] * 2,
    [Answer(page("06-blind.txt"))] * 2,
], ids=["html", "blind"])
def test_once_unscrapable_or_blind_exits_2(rocmseat_cli, page_server, tmp_path, answers):
    page_server.play(*answers)
    result = once(rocmseat_cli, page_server, tmp_path, "--down-after", "1")
    assert result.exit_code == 2, result.stdout + result.stderr


def test_needs_a_seat_or_targets(rocmseat_cli, tmp_path):
    result = rocmseat_cli("watch", "--state-dir", str(tmp_path))
    assert result.exit_code == 2 and "either a SEAT file or one or more --target" in result.stderr


@pytest.mark.parametrize(("spec", "why"), [("r0=ftp://x", "not an http(s) URL"),
                                           ("bad name=http://x", "must match"),
                                           (":::bad", "the port is not a number"),
                                           ("r0=127.0.0.1:99999", "the port is not a number"),
                                           ("r0=h:0", "the port is not a number"),
                                           ("r0=http://:8000", "no host name"),
                                           ("r0=http://", "not an http(s) URL")])
def test_bad_target_is_a_config_error(rocmseat_cli, tmp_path, spec, why):
    result = rocmseat_cli("watch", "--target", spec, "--once", "--state-dir", str(tmp_path))
    assert result.exit_code == 2 and why in result.stderr


def write_seat(tmp_path, port, key):
    cache = tmp_path / "cache"
    (cache / "r0").mkdir(parents=True)
    (cache / "r0" / "rocmseat-manifest.json").write_text(json.dumps({"key": key, "factors": {}}))
    seat = tmp_path / "seat.toml"
    seat.write_text(f'''name = "w6-test"
backend = "cpu"
tp = 1
cache_root = "{cache}"
state_dir = "{tmp_path / 'state'}"
[engine]
command = ["python", "-m", "vllm.entrypoints.openai.api_server"]
model_flag = "--model"
python = "{sys.executable}"
host = "127.0.0.1"
[model]
path = "{tmp_path}"
[drafter]
method = "draft_model"
path = "{tmp_path}"
num_speculative_tokens = 3
[serve]
port_base = {port}
max_model_len = 256
max_num_seqs = 4
[watch]
expected_acceptance_length = 2.9
interval_s = 0.05
exporter_listen = "off"
''')
    return seat


def test_seat_mode_reads_replicas_ports_key_and_pinned_baseline(rocmseat_cli, page_server,
                                                                 tmp_path):
    port = int(page_server.url.split(":")[2].split("/")[0])
    seat = write_seat(tmp_path, port, "a" * 64)
    page_server.play(Answer(page("01-healthy.txt")), Answer(page("02-collapse.txt")))
    result = rocmseat_cli("watch", str(seat), "--once", "--json")
    assert result.exit_code == 1, result.stderr
    (replica,) = json.loads(result.stdout)["replicas"]
    assert replica["replica"] == "r0" and replica["key"] == "a" * 64
    assert replica["baseline"]["source"] == "pinned"
    assert replica["baseline"]["acceptance_length"] == 2.9
    assert replica["url"] == f"http://127.0.0.1:{port}/metrics"
    assert sorted(replica["alerts"]) == ["spec_acceptance_drop", "spec_drafter_dead"]


def test_learned_baseline_persists_and_resets_on_a_key_change(tmp_path):
    from rocmseat.watch.detector import DetectorParams

    cache = tmp_path / "cache" / "r0"
    cache.mkdir(parents=True)
    manifest = cache / "rocmseat-manifest.json"
    manifest.write_text(json.dumps({"key": "key-one", "factors": {}}))
    pages = [page("00-healthy.txt"), page("01-healthy.txt")]
    clock = FakeClock()
    config = WatchConfig(state_dir=tmp_path / "state", key_prefix="seat",
                         params=DetectorParams(learn_min_drafts=500, learn_min_s=5))
    w = Watcher([Target("r0", "http://r0/metrics", cache)], config,
                fetch=lambda url, t: pages.pop(0), clock=clock)
    w.step()
    clock.tick(10)
    (status,) = w.step()
    w.close()
    stored = tmp_path / "state" / "watch" / "seat.r0.json"
    data = json.loads(stored.read_text())
    assert data["key"] == "key-one" and data["source"] == "learned"
    assert status.baseline is not None and status.baseline.source == "learned"
    # Same key: the stored baseline is used at once. Another key: relearn.
    w2 = Watcher([Target("r0", "http://r0/metrics", cache)], config,
                 fetch=lambda url, t: page("00-healthy.txt"), clock=clock)
    assert w2.step()[0].baseline is not None
    manifest.write_text(json.dumps({"key": "key-two", "factors": {}}))
    (mid_run,) = w2.step()  # a relaunch under another key while the watch runs: forget it
    assert mid_run.baseline is None and mid_run.learning and mid_run.key == "key-two"
    assert [p.name for p in stored.parent.iterdir()] == ["seat.r0.json"]  # no temp file left
    w3 = Watcher([Target("r0", "http://r0/metrics", cache)], config,
                 fetch=lambda url, t: page("00-healthy.txt"), clock=clock)
    (fresh,) = w3.step()
    w2.close()
    w3.close()
    assert fresh.baseline is None and fresh.learning and fresh.key == "key-two"


def test_once_report_and_table_golden(golden, tmp_path):
    pages = iter([page("00-healthy.txt"), page("01-healthy.txt")])
    clock = FakeClock()
    w = Watcher([Target("r0", "http://127.0.0.1:8100/metrics"),
                 Target("r1", "http://127.0.0.1:8101/metrics")],
                WatchConfig(pinned_al=2.9, state_dir=tmp_path),
                fetch=lambda url, t: next(pages) if "8100" in url else page("06-blind.txt"),
                clock=clock)
    w.step()
    clock.tick(10)
    statuses = w.step()
    w.close()
    golden("watch-once.json", json.dumps(report_json(statuses), indent=2, sort_keys=True) + "\n")
    golden("watch-once.txt", render_table(statuses))


def test_log_lines_and_alertmanager_payload_golden(golden):
    book = AlertBook()
    fired = book.set("r0", "spec_acceptance_drop", True, 1_790_000_000.0,
                     {"al": "1.08", "baseline": "3.30", "drafts": "412", "cusum": "16.00"})
    resolved = book.set("r0", "spec_acceptance_drop", False, 1_790_000_600.0,
                        {"al": "3.21", "baseline": "3.30", "drafts": "388", "cusum": "0.00"})
    lines = "\n".join(t.log_line() for t in (fired, resolved)) + "\n"
    golden("watch-log-lines.txt", lines)
    payload = [t.to_alertmanager(seat="r9700-mxfp4-dflash") for t in (fired, resolved)]
    golden("watch-alertmanager.json", json.dumps(payload, indent=2, sort_keys=True) + "\n")


def test_running_loop_logs_serves_and_stops_cleanly_on_sigterm(page_server, tmp_path):
    page_server.play(Answer(page("01-healthy.txt")), Answer(page("02-collapse.txt")),
                     Answer(page("03-collapse.txt")))
    hook_out = tmp_path / "hook.jsonl"
    hook = f"{sys.executable} -c \"import sys; open('{hook_out}','a').write(sys.stdin.read())\""
    env = {**os.environ, "PYTHONPATH": str(REPO), "ROCMSEAT_STATE_DIR": str(tmp_path / "s")}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from rocmseat.cli.main import main; main()", "watch",
         "--target", f"r0={page_server.url}", "--interval", "0.2",
         "--exporter-listen", "127.0.0.1:0", "--command-hook", hook],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    lines: list[str] = []
    fired = threading.Event()

    def read():
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if "alert=spec_drafter_dead state=firing" in line:
                fired.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert fired.wait(60), lines
        for _ in range(200):  # the hook runs in the background: wait for its file, bounded
            if hook_out.exists() and hook_out.read_text():
                break
            threading.Event().wait(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(10)
    # not under journald: each line carries its time first (logfmt)
    assert all(re.match(r"ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ", line) for line in lines)
    assert lines[0].split(" ", 1)[1].startswith("rocmseat-watch start replicas=r0 interval_s=0.2")
    assert lines[-1].split(" ", 1)[1] == "rocmseat-watch stop"
    assert json.loads(hook_out.read_text().splitlines()[0])["alert"] == "spec_drafter_dead"


def test_busy_exporter_port_is_a_clear_error(rocmseat_cli, page_server, tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = rocmseat_cli("watch", "--target", page_server.url, "--state-dir", str(tmp_path),
                              "--exporter-listen", f"127.0.0.1:{port}")
    assert result.exit_code == 2
    assert f"--exporter-listen 127.0.0.1:{port}: Address already in use" in result.stderr
    assert "rocmseat-watch stop" in result.stderr


@pytest.mark.parametrize(("extra", "why"), [
    (("--webhook", "notaurl"), "--webhook 'notaurl': not an http(s) URL"),
    (("--webhook", "http://am:0/api/v2/alerts"), "the port is not a number"),
    (("--command-hook", 'page "oncall'), "--command-hook 'page \"oncall': No closing quotation"),
    (("--command-hook", " "), "no program to run"),
])
def test_bad_sink_options_are_one_line_errors(rocmseat_cli, page_server, tmp_path, extra, why):
    result = rocmseat_cli("watch", "--target", page_server.url, "--state-dir", str(tmp_path),
                          "--exporter-listen", "off", *extra)
    assert result.exit_code == 2, result.stderr
    assert why in result.stderr and "Traceback" not in result.stderr
    assert "rocmseat-watch start" not in result.stderr  # refused before the loop starts


def test_unwritable_state_dir_is_refused_before_the_loop(rocmseat_cli, page_server, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = rocmseat_cli("watch", "--target", page_server.url, "--exporter-listen", "off",
                          "--state-dir", str(blocker / "state"))
    assert result.exit_code == 2
    assert f"{blocker / 'state' / 'watch'}: the state dir is not writable" in result.stderr
    assert "rocmseat-watch start" not in result.stderr


def test_seat_with_a_bad_webhook_url_is_refused(rocmseat_cli, page_server, tmp_path):
    port = int(page_server.url.split(":")[2].split("/")[0])
    seat = write_seat(tmp_path, port, "b" * 64)
    seat.write_text(seat.read_text() + 'webhook_url = "alertmanager:9093"\n')
    result = rocmseat_cli("watch", str(seat))
    assert result.exit_code == 2
    # the error names where the URL came from: the seat file and its key
    assert f"{seat}: key 'watch.webhook_url' 'alertmanager:9093': not an http(s) URL" in (
        result.stderr)


def test_seat_without_a_drafter_is_not_blind(rocmseat_cli, page_server, tmp_path):
    port = int(page_server.url.split(":")[2].split("/")[0])
    seat = write_seat(tmp_path, port, "c" * 64)
    text = seat.read_text()
    drafter = text[text.index("[drafter]"):text.index("[serve]")]
    seat.write_text(text.replace(drafter, "").replace("expected_acceptance_length = 2.9\n", ""))
    page_server.play(Answer(page("vllm-nospec.txt")))
    result = rocmseat_cli("watch", str(seat), "--once", "--json")
    assert result.exit_code == 0, result.stdout + result.stderr
    (replica,) = json.loads(result.stdout)["replicas"]
    assert replica["alerts"] == [] and replica["blind"] is False and replica["up"] is True
    # the same page from a seat that drafts is blind: could not check (exit 2)
    with_drafter = write_seat(tmp_path / "with", port, "c" * 64)
    assert rocmseat_cli("watch", str(with_drafter), "--once").exit_code == 2


def _undrafted_pair():
    """Two real pages where requests ran and tokens were generated but no draft was made: the
    second page is 01-healthy with the spec-decode counters of 00-healthy (what a schedule
    that turns drafting off at this batch size, K = 0, produces)."""
    first, second = page("00-healthy.txt"), page("01-healthy.txt")
    spec = {line.split(" ")[0]: line for line in first.splitlines()
            if line.startswith("vllm:spec_decode_") and "_created" not in line}
    lines = [spec.get(line.split(" ")[0], line) if line.startswith("vllm:spec_decode_") else line
             for line in second.splitlines()]
    return first, "\n".join(lines) + "\n"


def test_once_with_no_drafts_while_requests_ran_says_so_and_exits_2(rocmseat_cli, page_server,
                                                                    tmp_path):
    """Issue 19: a window with 0 drafts while requests run printed `AL -` and exited 0 without
    a word."""
    first, second = _undrafted_pair()
    page_server.play(Answer(first), Answer(second))
    result = once(rocmseat_cli, page_server, tmp_path, "--baseline-al", "2.9")
    assert result.exit_code == 2, result.stdout + result.stderr
    row = result.stdout.splitlines()[1].split()
    assert row[:3] == ["r0", "yes", "-"]
    assert any(line.startswith("r0: no drafts in this window while it generated ")
               and line.endswith("acceptance not judged (the schedule turned drafting off at "
                                 "this batch size, or the drafter stopped drafting)")
               for line in result.stdout.splitlines()), result.stdout
    # a replica that does not speculate is judged on what it does: nothing to say
    page_server.play(Answer(first), Answer(second))
    quiet = once(rocmseat_cli, page_server, tmp_path, "--no-spec")
    assert quiet.exit_code == 0, quiet.stdout
    assert "no drafts" not in quiet.stdout


def test_no_spec_never_asks_for_a_baseline(rocmseat_cli, page_server, tmp_path):
    """Issue 19: `watch --no-spec` still said "no baseline yet (learning; pin one with
    --baseline-al)"."""
    page_server.play(Answer(page("00-healthy.txt")), Answer(page("01-healthy.txt")))
    result = once(rocmseat_cli, page_server, tmp_path, "--no-spec")
    assert result.exit_code == 0, result.stderr
    assert "no baseline yet" not in result.stdout
    page_server.play(Answer(page("00-healthy.txt")), Answer(page("01-healthy.txt")))
    assert "r0: no baseline yet (learning" in once(rocmseat_cli, page_server, tmp_path).stdout


def test_service_log_lines_carry_a_timestamp_unless_under_journald(tmp_path):
    from rocmseat.watch.service import stamped, under_journald

    assert stamped("rocmseat-watch stop", 1_790_000_000.25) == (
        "ts=2026-09-21T14:13:20.250Z rocmseat-watch stop")
    stream = tmp_path / "journal"
    stream.write_text("")
    with open(stream) as handle:
        info = os.fstat(handle.fileno())
        mine = {"JOURNAL_STREAM": f"{info.st_dev}:{info.st_ino}"}
        assert under_journald(mine, handle.fileno())
        # another stream's numbers, garbage, or none: not the journal
        for env in ({"JOURNAL_STREAM": f"{info.st_dev}:{info.st_ino + 1}"},
                    {"JOURNAL_STREAM": "x:y"}, {"JOURNAL_STREAM": ""}, {}):
            assert not under_journald(env, handle.fileno())


def test_once_on_a_terminal_shows_the_wait(page_server, tmp_path):
    """Issue 19: `watch --once` was silent for its whole interval (10 s by default). On a
    terminal (a real pty here) it counts down on stderr; in a pipe it stays quiet."""
    import pty

    page_server.play(Answer(page("00-healthy.txt")), Answer(page("01-healthy.txt")))
    env = {**os.environ, "PYTHONPATH": str(REPO), "ROCMSEAT_ERROR_LOG": "/dev/null"}
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rocmseat", "watch", "--target", f"r0={page_server.url}",
             "--once", "--interval", "1.5", "--baseline-al", "2.9", "--state-dir",
             str(tmp_path / "s")],
            stdout=subprocess.PIPE, stderr=terminal, text=True, env=env, cwd=REPO)
        os.close(terminal)
        out, _ = proc.communicate(timeout=60)
        said = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:
                break
            if not chunk:
                break
            said += chunk
    finally:
        os.close(controller)
    assert proc.returncode == 0, out
    assert b"rocmseat: scraped 1 target; the second scrape in " in said, said


def test_under_journald_the_lines_are_not_stamped_twice(tmp_path):
    """The real command with stderr on a stream named by JOURNAL_STREAM (as systemd sets it
    for a unit whose output goes to the journal): journald stamps each line, rocmseat adds
    no `ts=`; the same command on another stream stamps every line."""
    def first_and_last(journal: bool) -> list[str]:
        read_end, write_end = os.pipe()
        info = os.fstat(write_end)
        env = {**os.environ, "PYTHONPATH": str(REPO), "ROCMSEAT_ERROR_LOG": "/dev/null"}
        env.pop("JOURNAL_STREAM", None)
        if journal:
            env["JOURNAL_STREAM"] = f"{info.st_dev}:{info.st_ino}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "rocmseat", "watch", "--target", "r0=http://127.0.0.1:1/",
             "--interval", "0.2", "--exporter-listen", "off", "--state-dir", str(tmp_path)],
            stdout=subprocess.DEVNULL, stderr=write_end, env=env, cwd=REPO)
        os.close(write_end)
        with os.fdopen(read_end) as stream:
            lines = [stream.readline().rstrip("\n")]
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(30) == 0
            lines += [line.rstrip("\n") for line in stream]
        return [lines[0], lines[-1]]

    assert [line.split(" ", 1)[0] for line in first_and_last(True)] == ["rocmseat-watch"] * 2
    stamped_lines = first_and_last(False)
    assert all(re.match(r"ts=\S+Z rocmseat-watch ", line) for line in stamped_lines)
    assert stamped_lines[-1].endswith(" rocmseat-watch stop")
