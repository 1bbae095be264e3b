"""Scrapes are bounded: a dripping page fails at the deadline, SIGTERM and Ctrl-C stop a scrape,
the body cap and gzip (bombs, several members, data after the body), hung and big targets
never cost a healthy one its verdict, the exporter's threads are bounded.

Each test failed before its fix (issue 11 and the watch room's second review).
"""

from __future__ import annotations

import gzip
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from rocmseat.watch import alerts as A
from rocmseat.watch.exporter import ExportState, start_exporter
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.scrape import Target
from tests.conftest import REPO
from tests.watch.conftest import Answer
from tests.watch.hostile import (
    CLI,
    GOOD_0,
    GOOD_1,
    Reply,
    env,
    http,
    hung_listeners,
    once_at,
    serve,
)


def _drip(body: bytes, every_s: float = 0.25) -> Reply:
    # a byte more often than the timeout: no single read ever waits long enough to time out
    head = b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    return Reply([("drip", head + body, every_s)])


def test_a_dripping_page_fails_at_the_deadline(tmp_path):
    server = serve(_drip(GOOD_0.encode()))
    started = time.monotonic()
    try:
        done = subprocess.run(
            [*CLI, "watch", "--target", f"r0={server.url}", "--once", "--timeout", "1",
             "--interval", "0.05", "--state-dir", str(tmp_path)],
            capture_output=True, text=True, timeout=30, env=env(), cwd=REPO)
    finally:
        server.close()
    elapsed = time.monotonic() - started
    print(f"--once --timeout 1 against a 4 byte/s drip: exit {done.returncode} in "
          f"{elapsed:.1f} s")
    assert done.returncode == 2, done.stderr
    assert "timed out after 1 s" in done.stdout


def test_sigterm_stops_the_loop_while_a_scrape_drips(tmp_path):
    server = serve(_drip(GOOD_0.encode()))
    proc = subprocess.Popen(
        [*CLI, "watch", "--target", f"r0={server.url}", "--interval", "0.2", "--timeout", "60",
         "--exporter-listen", "127.0.0.1:0", "--state-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=REPO)
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.split(" ", 1)[1].startswith("rocmseat-watch start"), first
        time.sleep(1.0)  # the scrape is dripping now
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(15)  # a bound for a broken build; the figure is printed
        print(f"SIGTERM during a dripping scrape: exit {code} after "
              f"{time.monotonic() - sent:.2f} s")
        assert code == 0
        assert proc.stderr.read().rstrip().endswith("rocmseat-watch stop")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        server.close()


def test_a_page_over_the_body_cap_is_refused(rocmseat_cli, tmp_path):
    body = ("# " + "x" * 1022 + "\n") * (17 * 1024) + GOOD_1  # 17 MiB, no Content-Length
    server = serve(GOOD_0, http(body.encode(), length=False))
    try:
        result = once_at(rocmseat_cli, server.url, tmp_path)
    finally:
        server.close()
    assert result.exit_code == 2
    assert "larger than the limit of 16,777,216 bytes" in result.stdout


@pytest.mark.parametrize(("plain", "why"), [
    (b"#\n" * (32 << 20), "larger than the limit of 16,777,216 bytes (decompressed)"),
    # one 64 MiB line: the reader refuses it once it is longer than a line can be
    (b"#" * (64 << 20) + b"\n", "line 1 is longer than 65,536 characters"),
], ids=["short-lines", "one-line"])
def test_a_gzip_bomb_is_inflated_only_up_to_the_cap(rocmseat_cli, tmp_path, plain, why):
    bomb = gzip.compress(plain)  # 64 MiB in ~64 KiB
    server = serve(GOOD_0, http(bomb, headers=((b"Content-Encoding", b"gzip"),)))
    try:
        # a deadline far past the inflation's time: the cap is what must refuse the page, not
        # the clock (the default 5 s ran out first on a machine running the engine tier beside)
        result = once_at(rocmseat_cli, server.url, tmp_path, "--timeout", "60")
    finally:
        server.close()
    assert result.exit_code == 2
    assert why in result.stdout


def _timed_second_step(targets, tmp_path, *, timeout_s):
    """Two evaluations of `targets`: the statuses of the second, and how long it took."""
    w = Watcher(targets, WatchConfig(interval_s=1.0, timeout_s=timeout_s, pinned_al=2.9,
                                     state_dir=tmp_path, down_after=1))
    try:
        w.step()
        started = time.monotonic()
        statuses = w.step()
        return statuses, time.monotonic() - started
    finally:
        w.close()


def test_hung_targets_never_starve_a_healthy_one(page_server, tmp_path):
    page_server.play(Answer(GOOD_0), Answer(GOOD_1))
    hung = hung_listeners(80)  # more than the 64 scrape slots there used to be
    targets = [Target(f"h{i}", f"http://127.0.0.1:{s.getsockname()[1]}/metrics")
               for i, s in enumerate(hung)] + [Target("good", page_server.url)]
    try:
        statuses, wall = _timed_second_step(targets, tmp_path, timeout_s=1.0)
    finally:
        for s in hung:
            s.close()
    good = statuses[-1]
    print(f"80 hung targets + 1 healthy, --timeout 1: healthy up={good.up} "
          f"window={good.window is not None}, evaluation {wall:.2f} s")
    assert good.up and good.window is not None, good.error
    assert A.REPLICA_DOWN not in good.alerts
    assert all(not s.up and "timed out after 1 s" in (s.error or "") for s in statuses[:-1])
    assert wall < 1.0 + 1.5  # the deadline, plus slack for a loaded machine: never a hang


def big_page(base: str, series: int) -> str:
    """A valid vLLM page made big the way the reviewer's was: many more series of one gauge the
    watcher reads (each is parsed, not skipped)."""
    extra = "".join(f'vllm:num_requests_waiting{{engine="0",model_name="tiny",slot="{i}"}} 0.0\n'
                    for i in range(series))
    return base + extra


def test_big_pages_never_cost_a_healthy_target_its_verdict(page_server, tmp_path):
    page_server.play(Answer(GOOD_0), Answer(GOOD_1))
    big = [serve(big_page(GOOD_0, 170_000)), serve(big_page(GOOD_0, 170_000))]  # ~12 MiB each
    targets = [Target("b1", big[0].url), Target("b2", big[1].url),
               Target("good", page_server.url)]
    try:
        # 2 s, not 0.5: the healthy target must be judged on a machine that also runs the
        # engine tier (CI runs both at once on 2 cores); 0.5 s missed there once
        statuses, wall = _timed_second_step(targets, tmp_path, timeout_s=2.0)
    finally:
        for server in big:
            server.close()
    by = {s.replica: s for s in statuses}
    print(f"two 12 MiB pages + a healthy one, --timeout 2: evaluation {wall:.2f} s; "
          f"b1: {by['b1'].error}; good up={by['good'].up}")
    assert by["good"].up and by["good"].window is not None, by["good"].error
    # a bound on a hang, not a speed target: a loaded CI host (the engine tier beside on 2
    # cores) once took 4.5 s for this 2 s deadline; bench/bench_watch_fleet.py measures speed
    assert wall < 2.0 * 10


def test_a_big_valid_page_under_the_cap_is_read(tmp_path):
    big0, big1 = big_page(GOOD_0, 40_000), big_page(GOOD_1, 40_000)  # ~2.8 MiB
    status = _second_scrape(http(big1.encode()), tmp_path, first=big0, timeout_s=30.0)
    assert status.up and status.window is not None, status.error
    assert status.window.waiting == 0.0


def _gz(body: bytes) -> tuple[tuple[bytes, bytes], ...]:
    return ((b"Content-Encoding", b"gzip"),)


def _second_scrape(reply: Reply, tmp_path: Path, *, first: str = GOOD_0,
                   timeout_s: float = 5.0):
    """The status after a scrape of `first`, then of `reply`."""
    server = serve(first, reply)
    w = Watcher([Target("r0", server.url)], WatchConfig(timeout_s=timeout_s, pinned_al=2.9,
                                                         state_dir=tmp_path, down_after=1))
    try:
        w.step()
        (status,) = w.step()
    finally:
        w.close()
        server.close()
    return status


def test_a_multi_member_gzip_body_is_read_whole(tmp_path):
    body = GOOD_1.encode()
    cut = body.index(b"# HELP vllm:spec_decode_num_drafts_total")  # the spec block: member 2
    two = gzip.compress(body[:cut]) + gzip.compress(body[cut:])
    status = _second_scrape(http(two, headers=_gz(two)), tmp_path)
    assert status.up and status.window is not None, status.error
    assert status.window.drafts == 600.0  # 01-healthy.txt minus 00-healthy.txt


@pytest.mark.parametrize(("tail", "why"), [
    (b"junk", "after the end of the compressed body"),
    (b"\0" * (17 << 20), "after the end of the compressed body"),
    (gzip.compress(b"") * 900_000, "more than 1,024 gzip members"),  # 18 MB of empty members
], ids=["junk", "17-MiB-of-zeros", "900k-empty-members"])
def test_data_after_a_gzip_body_is_an_error(tmp_path, tail, why):
    body = gzip.compress(GOOD_1.encode()) + tail
    started = time.monotonic()
    # no Content-Length (a length over the cap is refused before the body): read to the end
    status = _second_scrape(http(body, headers=_gz(body), length=False), tmp_path)
    print(f"gzip page + {len(tail):,} bytes after it: {status.error} "
          f"({time.monotonic() - started:.2f} s)")
    assert not status.up and status.window is None
    assert why in (status.error or "")


def test_ctrl_c_during_once_is_one_line(tmp_path):
    hung = hung_listeners(2)
    args = [*CLI, "watch", "--once", "--timeout", "30", "--state-dir", str(tmp_path)]
    for i, s in enumerate(hung):
        args += ["--target", f"r{i}=http://127.0.0.1:{s.getsockname()[1]}/metrics"]
    proc = subprocess.Popen(args, cwd=REPO, env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        time.sleep(2.0)  # the scrapes are waiting on the silent ports now
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        for s in hung:
            s.close()
    assert proc.returncode == 130, err
    assert [ln for ln in err.splitlines() if ln.strip()] == ["rocmseat: interrupted"], err


def test_the_exporter_holds_a_bounded_number_of_threads():
    server, _ = start_exporter("127.0.0.1:0", lambda: ExportState())
    port = server.server_address[1]
    idle = []
    try:
        before = threading.active_count()
        for _ in range(120):  # clients that connect and never send a request
            s = socket.create_connection(("127.0.0.1", port))
            idle.append(s)
        time.sleep(0.5)
        grown = threading.active_count() - before
        r = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
    finally:
        for s in idle:
            s.close()
        server.shutdown()
        server.server_close()
    print(f"120 idle connections: {grown} more threads; /healthz {r.status_code}")
    assert grown <= 40, grown
    assert r.status_code in (200, 503)


