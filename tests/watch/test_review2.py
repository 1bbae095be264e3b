"""The watch room's second review (issues 11 and 13): each test here failed before its fix.

1 hung targets starve a healthy one; 2 parsing on the loop and a timeout that discards every
result; 3 bytes after a gzip body, multi-member gzip; 4 /ready latched on a dead drafter across
an engine restart; 5 a label value that is not UTF-8 (a lone surrogate); 6 `--once` with no
targets; 7 an empty re-read of the targets file; 8 Prometheus's file_sd rules for YAML scalars;
9 credentials in URLs whose password holds a space, `/`, `?` or `#`; and the lesser items
(Ctrl-C during `--once`, an empty label, baseline file names, the exporter's threads, targets
that do not speculate, Alertmanager grouping).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from rocmseat.errors import ConfigError
from rocmseat.watch import alerts as A
from rocmseat.watch.baseline import baseline_path
from rocmseat.watch.exporter import ExportState, render, start_exporter
from rocmseat.watch.filesd import TargetsFile, parse_targets_file
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.metrics import PageError, read_page
from rocmseat.watch.readiness import replica_readiness
from rocmseat.watch.scrape import Target
from tests.conftest import REPO
from tests.watch.conftest import Answer, FakeClock, page
from tests.watch.hostile import HostileServer, Reply, http

CLI = [sys.executable, "-c", "from rocmseat.cli.main import main; main()"]
GOOD_0, GOOD_1 = page("00-healthy.txt"), page("01-healthy.txt")


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "ROCMSEAT_ERROR_LOG": "/dev/null"}


def serve(*replies: str | Reply) -> HostileServer:
    plays = [r if isinstance(r, Reply) else http(r.encode()) for r in replies]
    return HostileServer(lambda n: plays[min(n, len(plays) - 1)])


def hung_listeners(count: int) -> list[socket.socket]:
    """Ports that accept a connection (the kernel completes the handshake) and never answer."""
    out = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(128)
        out.append(s)
    return out


# ----- 1. hung targets never starve a healthy one -----------------------------------------
def test_hung_targets_never_starve_a_healthy_one(page_server, tmp_path):
    page_server.play(Answer(GOOD_0), Answer(GOOD_1))
    hung = hung_listeners(80)  # more than the 64 scrape slots there used to be
    targets = [Target(f"h{i}", f"http://127.0.0.1:{s.getsockname()[1]}/metrics")
               for i, s in enumerate(hung)] + [Target("good", page_server.url)]
    w = Watcher(targets, WatchConfig(interval_s=1.0, timeout_s=1.0, pinned_al=2.9,
                                     state_dir=tmp_path, down_after=1))
    try:
        w.step()
        started = time.monotonic()
        statuses = w.step()
        wall = time.monotonic() - started
    finally:
        w.close()
        for s in hung:
            s.close()
    good = statuses[-1]
    print(f"80 hung targets + 1 healthy, --timeout 1: healthy up={good.up} "
          f"window={good.window is not None}, evaluation {wall:.2f} s")
    assert good.up and good.window is not None, good.error
    assert A.REPLICA_DOWN not in good.alerts
    assert all(not s.up and "timed out after 1 s" in (s.error or "") for s in statuses[:-1])
    assert wall < 1.0 + 1.5  # the deadline, plus slack for a loaded machine: never a hang


# ----- 2. big pages: parsing never holds the loop, finished results are kept ---------------
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
    w = Watcher(targets, WatchConfig(interval_s=1.0, timeout_s=0.5, pinned_al=2.9,
                                     state_dir=tmp_path, down_after=1))
    try:
        w.step()
        started = time.monotonic()
        statuses = w.step()
        wall = time.monotonic() - started
    finally:
        w.close()
        for server in big:
            server.close()
    by = {s.replica: s for s in statuses}
    print(f"two 12 MiB pages + a healthy one, --timeout 0.5: evaluation {wall:.2f} s; "
          f"b1: {by['b1'].error}; good up={by['good'].up}")
    assert by["good"].up and by["good"].window is not None, by["good"].error
    assert wall < 0.5 + 1.0  # never past the deadline (slack for a loaded machine)


def test_a_big_valid_page_under_the_cap_is_read(tmp_path):
    big0, big1 = big_page(GOOD_0, 40_000), big_page(GOOD_1, 40_000)  # ~2.8 MiB
    server = serve(big0, big1)
    w = Watcher([Target("big", server.url)], WatchConfig(timeout_s=30.0, pinned_al=2.9,
                                                          state_dir=tmp_path))
    try:
        w.step()
        (status,) = w.step()
    finally:
        w.close()
        server.close()
    assert status.up and status.window is not None, status.error
    assert status.window.waiting == 0.0


# ----- 3. gzip: data after the body, several members ---------------------------------------
def _gz(body: bytes) -> tuple[tuple[bytes, bytes], ...]:
    return ((b"Content-Encoding", b"gzip"),)


def _second_scrape(reply: Reply, tmp_path: Path):
    server = serve(GOOD_0, reply)
    w = Watcher([Target("r0", server.url)], WatchConfig(timeout_s=5.0, pinned_al=2.9,
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


# ----- 4. /ready after an engine restart -----------------------------------------------------
def _restarted(text: str) -> str:
    """The same page from a new engine process: its `_created` stamps moved by an hour."""
    return text.replace("1.795962710590016e+09", "1.795966310590016e+09")


def _ready_sequence(pages: list[str], tmp_path: Path):
    clock, transitions = FakeClock(), []
    queue = list(pages)
    w = Watcher([Target("r0", "http://r0/metrics")],
                WatchConfig(pinned_al=2.9, state_dir=tmp_path, stall_after_s=3600),
                fetch=lambda url, t: queue.pop(0), clock=clock,
                on_transition=transitions.append)
    out = []
    for _ in pages:
        (status,) = w.step()
        verdict = replica_readiness(status, evaluated_at_s=w.evaluated_at_s, now_s=clock.now,
                                    max_age_s=w.config.max_age_s)
        out.append((verdict.http_status, status.restarted))
        clock.tick(10)
    w.close()
    return out, transitions


def test_an_engine_restart_clears_a_dead_drafter_and_readiness(tmp_path):
    collapse = page("03-collapse.txt")
    # dead under traffic; 503 takes it out of rotation: the counters stay flat; the engine is
    # restarted (its cache fixed): new _created, counters from zero, still no traffic
    pages = [GOOD_1, page("02-collapse.txt"), collapse, collapse, collapse,
             page("04-restarted.txt"), page("04-restarted.txt"), page("05-after-restart.txt")]
    seen, transitions = _ready_sequence(pages, tmp_path)
    assert [code for code, _ in seen] == [200, 503, 503, 503, 503, 200, 200, 200], seen
    assert seen[5][1] is True  # the restart is what cleared it
    resolved = [t for t in transitions if t.alert == A.SPEC_DRAFTER_DEAD and t.state == "resolved"]
    assert [dict(t.details).get("reason") for t in resolved] == ["engine-restarted"]


def test_a_restart_into_a_still_dead_drafter_goes_503_again_on_its_drafts(tmp_path):
    pages = [GOOD_1, page("02-collapse.txt"), page("03-collapse.txt"),
             _restarted(page("02-collapse.txt")), _restarted(page("03-collapse.txt"))]
    seen, transitions = _ready_sequence(pages, tmp_path)
    assert [code for code, _ in seen] == [200, 503, 503, 200, 503], seen
    fired = [t for t in transitions if t.alert == A.SPEC_DRAFTER_DEAD and t.state == "firing"]
    assert len(fired) == 2


# ----- 5. a label value that is not UTF-8 ---------------------------------------------------
@pytest.mark.parametrize(("name", "text"), [
    ("t.json", '[{"targets": ["127.0.0.1:1"], "labels": {"replica": "r0", "zone": "\\ud800"}}]'),
    ("t.yml", '- targets: ["127.0.0.1:1"]\n  labels: {replica: r0, zone: "\\ud800"}\n'),
    ("t.json", '[{"targets": ["127.0.0.1:1"], "labels": {"replica": "r\\udfff0"}}]'),
], ids=["json-value", "yaml-value", "json-replica"])
def test_a_lone_surrogate_in_a_label_is_a_one_line_error(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match="not valid UTF-8") as info:
        parse_targets_file(path.read_text(), path)
    assert str(path) in info.value.message and "\n" not in info.value.message


def _status(labels: tuple[tuple[str, str], ...]):
    w = Watcher([Target("r0", "http://r0/metrics", labels=labels)],
                WatchConfig(state_dir=None), fetch=lambda url, t: "<html></html>")
    w.step()
    w.close()
    return w.statuses


def test_the_exporter_survives_a_label_it_cannot_encode():
    statuses = _status((("zone", "a\ud800b"),))
    text = render(lambda: ExportState(statuses=tuple(statuses), evaluated_at_s=time.time(),
                                      max_age_s=60))
    assert 'zone="a\ufffdb"' in text
    server, _ = start_exporter("127.0.0.1:0", lambda: ExportState(statuses=tuple(statuses)))
    try:
        port = server.server_address[1]
        r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert r.status_code == 200 and "rocmseat_replica_up" in r.text
    finally:
        server.shutdown()
        server.server_close()


# ----- 6. --once with no targets -------------------------------------------------------------
@pytest.mark.parametrize(("name", "text"), [
    ("t.json", "[]"), ("t.yml", ""), ("t.yml", "- targets: []\n"),
    ("t.json", '[{"targets": [], "labels": {"zone": "z"}}]'),
], ids=["json-empty-list", "yaml-empty", "yaml-no-targets", "json-no-targets"])
def test_once_with_no_targets_is_exit_2(rocmseat_cli, tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    result = rocmseat_cli("watch", "--targets-file", str(path), "--once", "--state-dir",
                          str(tmp_path / "s"))
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "no targets" in result.stderr and result.stdout == ""


# ----- 7. an empty re-read keeps the last set ------------------------------------------------
@pytest.mark.parametrize(("name", "good", "empty"), [
    ("t.json", '[{"targets": ["a:1", "b:1"]}]', ""),
    ("t.json", '[{"targets": ["a:1", "b:1"]}]', "[]"),
    ("t.yml", "- targets: ['a:1', 'b:1']\n", ""),
    ("t.yml", "- targets: ['a:1', 'b:1']\n", "- targets: []\n"),
    ("t.yml", "- targets: ['a:1', 'b:1']\n", "# being rewritten\n"),
], ids=["json-empty-file", "json-empty-list", "yaml-empty", "yaml-no-targets", "yaml-comment"])
def test_an_empty_reread_keeps_the_last_set_and_says_so_once(tmp_path, name, good, empty):
    path = tmp_path / name
    path.write_text(good)
    source = TargetsFile(path)
    assert [t.name for t in source.load()] == ["a:1", "b:1"]
    path.write_text(empty)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    said = [source.poll() for _ in range(3)]
    assert all(r.targets is None for r in said), said
    errors = [r.error for r in said if r.error]
    assert len(errors) == 1 and "no targets" in errors[0], said


def test_a_file_caught_mid_write_never_removes_targets(tmp_path):
    path = tmp_path / "t.yml"
    full = "- targets: ['a:1']\n  labels: {zone: z1}\n- targets: ['b:1']\n  labels: {zone: z2}\n"
    path.write_text(full)
    source = TargetsFile(path)
    source.load()
    path.write_text(full[:full.index("- targets: ['b:1']")])  # a writer caught half-way
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    first = source.poll()
    path.write_text(full.replace("z2", "z3"))  # the writer finished
    applied = [r.targets for r in (first, source.poll(), source.poll(), source.poll())
               if r.targets is not None]
    assert applied and all({t.name for t in got} == {"a:1", "b:1"} for got in applied), applied
    assert dict(applied[-1][1].labels)["zone"] == "z3"


# ----- 8. Prometheus's file_sd rules for YAML scalars and label validity ----------------------
# What Debian's Prometheus 2.42 discovers from the same YAML (its yaml.v2 decoder into
# model.LabelSet takes a scalar's text; null and empty values are absent labels);
# tests/watch/test_monitoring_stack.py reads the same file through the real Prometheus.
SCALARS_YAML = """\
- targets: ["127.0.0.1:1"]
  labels:
    rack: 12
    flt: 1.50
    hex: 0x1F
    oct: 010
    boolish: yes
    tru: true
    nul: null
    tilde: ~
    empty:
    sci: 1e3
    date: 2024-01-01
    inf: .inf
    quoted: "12"
    single: '0x1F'
    tagged: !!str 7
    bin: !!binary aGVsbG8=
"""
PROMETHEUS_LABELS = {"bin": "hello", "boolish": "yes", "date": "2024-01-01", "flt": "1.50",
                     "hex": "0x1F", "inf": ".inf", "oct": "010", "quoted": "12", "rack": "12",
                     "sci": "1e3", "single": "0x1F", "tagged": "7", "tru": "true"}


def test_yaml_scalars_are_read_as_prometheus_reads_them(tmp_path):
    (target,) = parse_targets_file(SCALARS_YAML, tmp_path / "t.yml")
    assert dict(target.labels) == {**PROMETHEUS_LABELS, "instance": "127.0.0.1:1"}


@pytest.mark.parametrize(("name", "text", "why"), [
    ("t.yml", "- targets: ['a:1']\n  labels: {x: 1, x: 2}\n", "key 'labels.x' is given twice"),
    ("t.yml", "- targets: ['a:1']\n  labels: {x: [1]}\n", "key 'labels.x': the value must be "),
    ("t.yml", "- targets: ['a:1']\n  labels: {12: x}\n", "label name '12'"),
    ("t.json", '[{"targets": ["a:1"], "labels": {"x": true}}]', "must be a string, not bool"),
], ids=["yaml-duplicate-key", "yaml-sequence-value", "yaml-number-name", "json-bool"])
def test_what_prometheus_refuses_is_refused(tmp_path, name, text, why):
    with pytest.raises(ConfigError, match=re.escape(why)):
        parse_targets_file(text, tmp_path / name)


def test_empty_and_null_labels_are_absent_as_in_prometheus(tmp_path):
    text = ('[{"targets": ["a:1"], "labels": {"instance": "", "replica": null, "zone": "z"}}]')
    (target,) = parse_targets_file(text, tmp_path / "t.json")
    assert target.name == "a:1" and dict(target.labels) == {"instance": "a:1", "zone": "z"}


# ----- 9. credentials with a space, '/', '?' or '#' in the password ---------------------------
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


# ----- lesser items -------------------------------------------------------------------------
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


def test_a_series_repeated_with_an_empty_label_is_a_duplicate():
    line = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 10000.0\n'
    twin = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny",x=""} 10000.0\n'
    with pytest.raises(PageError, match="duplicate series"):
        read_page(GOOD_0.replace(line, line + twin))


def test_baseline_files_never_collide():
    state = Path("/state")
    assert baseline_path(state, "a:b") != baseline_path(state, "a_b")
    assert baseline_path(state, "a/b").parent == state / "watch"
    assert baseline_path(state, "demo.r0") == state / "watch" / "demo.r0.json"  # seat mode


def test_target_baselines_are_keyed_by_name_and_url(tmp_path, page_server):
    from rocmseat.watch.baseline import learned_baseline, save_baseline

    def learned_for(url: str) -> bool:
        w = Watcher([Target("r0", url)], WatchConfig(state_dir=tmp_path),
                    fetch=lambda u, t: GOOD_0)
        w.step()
        w.close()
        return w.statuses[0].baseline is not None

    first = Watcher([Target("r0", "http://a:1/metrics")], WatchConfig(state_dir=tmp_path),
                    fetch=lambda u, t: GOOD_0)
    first.step()
    path = first._baseline_file(first._replicas[0])  # where it would save its baseline
    first.close()
    save_baseline(path, learned_baseline(drafts=1e4, per_pos=(8e3, 6.4e3, 5.12e3),
                                         accepted=19520.0, windows=9, key="unkeyed",
                                         now_s=1.0))
    assert learned_for("http://a:1/metrics")
    assert not learned_for("http://b:1/metrics")  # another replica under the same name


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


def test_a_target_declared_non_speculative_is_ready_without_spec_series(rocmseat_cli,
                                                                         page_server, tmp_path):
    nospec = page("vllm-nospec.txt")
    page_server.play(Answer(nospec))
    port = page_server.url.split(":")[2].split("/")[0]
    path = tmp_path / "t.yml"
    path.write_text(f"- targets: ['127.0.0.1:{port}']\n"
                    "  labels: {replica: plain, rocmseat_spec: 'false', zone: z}\n")
    (target,) = parse_targets_file(path.read_text(), path)
    assert target.expect_spec is False and "rocmseat_spec" not in dict(target.labels)
    once = rocmseat_cli("watch", "--targets-file", str(path), "--once", "--interval", "0.05",
                        "--state-dir", str(tmp_path / "s"))
    flag = rocmseat_cli("watch", "--target", f"plain=127.0.0.1:{port}", "--no-spec", "--once",
                        "--interval", "0.05", "--state-dir", str(tmp_path / "s"))
    assert once.exit_code == 0, once.stdout
    assert flag.exit_code == 0, flag.stdout
    assert "spec_blind" not in once.stdout + flag.stdout


def test_more_targets_than_descriptors_is_refused_at_start(tmp_path):
    import resource

    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"targets": [f"127.0.0.1:{20000 + i}" for i in range(300)]}]))
    done = subprocess.run(
        [*CLI, "watch", "--targets-file", str(path), "--once", "--state-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=env(), cwd=REPO,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200)))
    assert done.returncode == 2, done.stderr
    assert "300 targets need 556 file descriptors; the limit is 200" in done.stderr
    assert done.stdout == ""


def test_alertmanager_groups_one_nodes_replicas_into_one_notification():
    doc = yaml.safe_load((REPO / "prometheus" / "alertmanager.yml").read_text())
    assert doc["route"]["group_by"] == ["alertname", "node", "seat"]
    text = " ".join((REPO / "docs" / "monitoring.md").read_text().split())
    assert "**grouping** `[alertname, node, seat]`" in text
