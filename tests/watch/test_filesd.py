"""`--targets-file`: Prometheus file_sd targets, their labels, and re-reading the file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from rocmseat.errors import ConfigError, ReadError
from rocmseat.watch import alerts as A
from rocmseat.watch.filesd import Reload, TargetsFile, parse_targets_file, read_targets_file
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.scrape import Target
from tests.conftest import REPO
from tests.watch.conftest import Answer, FakeClock, page

GROUPS = [
    {"targets": ["10.0.0.1:8000", "10.0.0.1:8001"], "labels": {"node": "", "zone": "z1"}},
]


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_json_and_yaml_read_alike(tmp_path):
    doc = [{"targets": ["10.0.0.1:8000", "[fd00::1]:8001"],
            "labels": {"zone": "z1", "__metrics_path__": "/prom/metrics", "__scheme__": "https",
                       "__param_format": "text", "__meta_drop": "x"}},
           {"targets": ["h2:9000"], "labels": {"replica": "r9", "instance": "node-2"}}]
    as_json = read_targets_file(write(tmp_path, "t.json", doc))
    yaml_text = """
- targets: ['10.0.0.1:8000', '[fd00::1]:8001']
  labels:
    zone: z1
    __metrics_path__: /prom/metrics
    __scheme__: https
    __param_format: text
    __meta_drop: x
- targets: [h2:9000]
  labels: {replica: r9, instance: node-2}
"""
    as_yaml = read_targets_file(write(tmp_path, "t.yaml", yaml_text))
    assert as_json == as_yaml
    a, b, c = as_json
    assert a == Target("10.0.0.1:8000", "https://10.0.0.1:8000/prom/metrics?format=text",
                       labels=(("instance", "10.0.0.1:8000"), ("zone", "z1")))
    assert b.name == "[fd00::1]:8001" and b.url == "https://[fd00::1]:8001/prom/metrics?format=text"
    assert c == Target("r9", "http://h2:9000/metrics", labels=(("instance", "node-2"),))


@pytest.mark.parametrize(("name", "text", "why"), [
    ("t.json", "{not json", "not JSON"),
    ("t.yml", "- targets: [a\n", "not YAML"),
    ("t.yml", "!!python/object:os.system {}\n", "not YAML"),
    ("t.txt", "[]", "ends in .json, .yml or .yaml"),
    ("t.json", '{"targets": []}', "expected a list of target groups"),
    ("t.json", '[42]', "entry 1: expected a mapping"),
    ("t.json", '[{"targets": "h:1"}]', "entry 1: key 'targets' must be a list"),
    ("t.json", '[{"targets": ["h:1"], "labels": []}]', "entry 1: key 'labels' must be a mapping"),
    ("t.json", '[{"targets": ["h:1"]}, {"targets": ["http://h:1/x"]}]',
     "entry 2: target 'http://h:1/x' is not host:port"),
    ("t.json", '[{"targets": ["h:99999"]}]', "the port is not a number"),
    ("t.json", '[{"targets": ["h:1"], "labels": {"zone": 7}}]',
     "entry 1: key 'labels.zone': the value must be a string, not int"),
    ("t.json", '[{"targets": ["h:1"], "labels": {"zone": "a\\u0000b"}}]', "control characters"),
    # issue 18, item 12: C1 control characters (U+009B is a terminal's CSI) were accepted
    ("t.json", '[{"targets": ["h:1"], "labels": {"zone": "a\\u009b2Jb"}}]',
     "control characters"),
    ("t.yml", '- {targets: ["h:1"], labels: {zone: "a\\x85b"}}\n', "control characters"),
    ("t.json", '[{"targets": ["h:1"], "labels": {"zone": "a\\u2028b"}}]', "control characters"),
    ("t.json", '[{"targets": ["h:1"], "labels": {"bad-name": "x"}}]', "label name 'bad-name'"),
    ("t.json", '[{"targets": ["h:1"], "labels": {"severity": "page"}}]',
     "rocmseat sets this label itself"),
    ("t.json", '[{"targets": ["h:1"], "labels": {"alert": "x"}}]', "rocmseat sets this label"),
    ("t.json", '[{"targets": ["h:1"], "labels": {"__scheme__": "ftp"}}]', "is not http or https"),
    ("t.json", '[{"targets": ["h:1"]}, {"targets": ["h:1"]}]',
     "entry 2: the replica name 'h:1' is also used by entry 1"),
    ("t.json", '[{"targets": ["h:1"], "extra": 1}]', "unknown key 'extra'"),
    ("t.json", "[" * 5000 + "]" * 5000, "nested too deeply"),
    ("t.yml", "a: &a [x, x]\nb: &b [*a, *a]\n", "expected a list of target groups"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None)
def test_bad_files_are_one_line_errors_naming_file_and_entry(tmp_path, name, text, why):
    path = write(tmp_path, name, text)
    with pytest.raises(ConfigError, match=why) as info:
        read_targets_file(path)
    assert str(path) in info.value.message and "\n" not in info.value.message


def test_alias_bombs_are_bounded(tmp_path):
    # YAML aliases multiply without bytes: the target count is capped, not the file size
    lines = ["- &x0 ['h:1']"] + [f"- &x{i} [*x{i - 1}, *x{i - 1}]" for i in range(1, 30)]
    with pytest.raises(ConfigError, match="entry 1: expected a mapping"):
        parse_targets_file("\n".join(lines) + "\n", tmp_path / "t.yaml")
    nested = "- targets: &t [[['h:1']]]\n" + "".join("- targets: *t\n" for _ in range(3))
    with pytest.raises(ConfigError, match="entry 1: key 'targets' must be a list"):
        parse_targets_file(nested, tmp_path / "t.yaml")
    doc = "- &g {targets: ['h:1', 'h:2']}\n" + "- *g\n" * 3
    with pytest.raises(ConfigError, match="also used by entry 1"):
        parse_targets_file(doc, tmp_path / "t.yaml")


def test_a_fifo_or_a_huge_file_is_refused(tmp_path):
    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    with pytest.raises(ReadError, match="FIFO"):
        read_targets_file(fifo)
    big = write(tmp_path, "big.json", "[" + " " * (2 << 20) + "]")
    with pytest.raises(ReadError, match="limit"):
        read_targets_file(big)


def test_reload_keeps_unchanged_targets_state_and_resolves_removed(tmp_path, page_server):
    path = write(tmp_path, "t.json", [{"targets": ["a:1", "b:1"], "labels": {"zone": "z1"}}])
    source = TargetsFile(path)
    clock, transitions = FakeClock(), []
    pages = {"a:1": [page("01-healthy.txt"), page("02-collapse.txt"), page("03-collapse.txt")],
             "b:1": ["<html></html>"] * 10, "c:1": [page("00-healthy.txt")] * 5}
    w = Watcher(source.load(), WatchConfig(state_dir=tmp_path, pinned_al=2.9, down_after=1),
                fetch=lambda url, t: pages[url.split("/")[2]].pop(0), clock=clock,
                on_transition=transitions.append)
    w.step()
    clock.tick(10)
    first = {s.replica: s for s in w.step()}
    assert A.SPEC_DRAFTER_DEAD in first["a:1"].alerts and A.REPLICA_DOWN in first["b:1"].alerts
    assert source.poll().targets is None  # unchanged: one stat
    time.sleep(0.01)
    write(tmp_path, "t.json", [{"targets": ["a:1", "c:1"], "labels": {"zone": "z1"}}])
    assert source.poll().targets is None  # read once: applied when the next read agrees
    reload = source.poll()
    assert reload.targets is not None and reload.error is None
    assert w.set_targets(reload.targets) == (1, 1, 0)
    clock.tick(10)
    after = {s.replica: s for s in w.step()}
    w.close()
    # a:1 kept its previous scrape (a window at once) and its active alert
    assert after["a:1"].window is not None and A.SPEC_DRAFTER_DEAD in after["a:1"].alerts
    assert "c:1" in after and "b:1" not in after
    resolved = [t for t in transitions if t.replica == "b:1" and t.state == "resolved"]
    assert [(t.alert, dict(t.details)) for t in resolved] == [
        (A.REPLICA_DOWN, {"reason": "target-removed"})]
    fired = next(t for t in transitions if t.alert == A.SPEC_DRAFTER_DEAD)
    assert fired.to_alertmanager()["labels"] == {
        "alertname": "spec_drafter_dead", "replica": "a:1", "severity": "critical",
        "source": "rocmseat-watch", "instance": "a:1", "zone": "z1"}
    assert fired.log_line().endswith("label.instance=a:1 label.zone=z1")


def test_a_bad_reload_keeps_the_last_good_set_and_says_so_once(tmp_path):
    path = write(tmp_path, "t.json", [{"targets": ["a:1"]}])
    source = TargetsFile(path)
    assert [t.name for t in source.load()] == ["a:1"]
    time.sleep(0.01)
    path.write_text('[{"targets": ["a:1"], "labels": {"zone": 7}}]')
    assert source.poll() == Reload(None)  # read once: judged when the next read agrees
    first = source.poll()
    assert first.targets is None and "entry 1: key 'labels.zone'" in (first.error or "")
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    assert [source.poll(), source.poll()] == [Reload(None)] * 2  # the same error is said once
    path.write_text('[{"targets": ["a:1", "b:1"]}]')
    assert source.poll() == Reload(None)
    assert [t.name for t in source.poll().targets or []] == ["a:1", "b:1"]


def test_relabel_resends_active_alerts_under_the_new_labels(tmp_path):
    clock, transitions = FakeClock(), []
    w = Watcher([Target("a", "http://a/metrics", labels=(("zone", "z1"),))],
                WatchConfig(state_dir=tmp_path, down_after=1),
                fetch=lambda url, t: "garbage\n", clock=clock, on_transition=transitions.append)
    w.step()
    w.set_targets([Target("a", "http://a/metrics", labels=(("zone", "z2"),))])
    w.close()
    assert [(t.state, dict(t.labels)["zone"]) for t in transitions] == [
        ("firing", "z1"), ("resolved", "z1"), ("firing", "z2")]


def test_cli_targets_file_once(rocmseat_cli, page_server, tmp_path):
    port = page_server.url.split(":")[2].split("/")[0]
    path = write(tmp_path, "t.yml", f"- targets: ['127.0.0.1:{port}']\n"
                                    "  labels: {replica: r0, zone: z1}\n")
    page_server.play(Answer(page("01-healthy.txt")), Answer(page("02-collapse.txt")))
    result = rocmseat_cli("watch", "--targets-file", str(path), "--once", "--json",
                          "--interval", "0.05", "--state-dir", str(tmp_path / "s"))
    assert result.exit_code == 1, result.stdout + result.stderr
    (replica,) = json.loads(result.stdout)["replicas"]
    assert replica["replica"] == "r0" and replica["alerts"] == ["spec_drafter_dead"]
    assert replica["labels"] == {"instance": f"127.0.0.1:{port}", "zone": "z1"}


def test_cli_bad_targets_file_is_refused_at_start(rocmseat_cli, tmp_path):
    path = write(tmp_path, "t.json", '[{"targets": ["h:1"]}, {"targets": "h:2"}]')
    result = rocmseat_cli("watch", "--targets-file", str(path), "--state-dir", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"rocmseat: error: {path}: entry 2: key 'targets' must be a list of \"host:port\" "
        "strings")
    clash = write(tmp_path, "c.json", '[{"targets": ["h:1"], "labels": {"replica": "r0"}}]')
    both = rocmseat_cli("watch", "--targets-file", str(clash), "--target", "r0=http://h:2/",
                        "--once", "--state-dir", str(tmp_path))
    assert both.exit_code == 2 and "the name 'r0' is used twice" in both.stderr


def test_running_loop_rereads_the_file_and_keeps_the_last_good_set(page_server, tmp_path):
    port = page_server.url.split(":")[2].split("/")[0]
    page_server.play(Answer(page("01-healthy.txt")))
    path = write(tmp_path, "t.json", [{"targets": [f"127.0.0.1:{port}"],
                                       "labels": {"replica": "r0"}}])
    env = {**os.environ, "PYTHONPATH": str(REPO), "ROCMSEAT_ERROR_LOG": "/dev/null"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from rocmseat.cli.main import main; main()", "watch",
         "--targets-file", str(path), "--interval", "0.1", "--exporter-listen", "off",
         "--state-dir", str(tmp_path / "s")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    lines = []

    def wait_for(needle):
        assert proc.stderr is not None
        deadline = time.monotonic() + 30  # a bound for a broken build
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            lines.append(line.rstrip("\n"))
            if needle in line:
                return line
        raise AssertionError(f"{needle!r} not in {lines}")

    try:
        wait_for("rocmseat-watch start replicas=r0")
        path.write_text("[{]")
        bad = wait_for("targets-file-error")
        path.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}", f"localhost:{port}"],
                                     "labels": {"zone": "z"}}]))
        good = wait_for("targets-file-reloaded")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert bad.split(" ", 1)[1].startswith("rocmseat-watch targets-file-error keeping=1 error=")
    assert str(path) in bad
    assert "targets=2 added=2 removed=1 relabelled=0" in good


def _anchored(groups: int, labels: int) -> str:
    """One group of `labels` labels and no targets, anchored, then referenced `groups` times,
    then one real target (issue 18, item 7: 2,000 labels x 60,000 references, 320 KiB)."""
    body = "\n".join(f"    l{i}: v{i}" for i in range(labels))
    return (f"- &g\n  targets: []\n  labels:\n{body}\n" + "- *g\n" * groups
            + "- targets: ['127.0.0.1:9']\n")


def test_an_anchored_group_is_checked_once(tmp_path):
    """Issue 18, item 7: one 2,000-label group referenced 60,000 times ran over 90 s at start
    (each reference validated its 2,000 labels again). Each distinct group is checked once."""
    path = write(tmp_path, "t.yml", _anchored(60_000, 2_000))
    assert path.stat().st_size < 340_000
    targets = _within(lambda: read_targets_file(path))
    assert [t.name for t in targets] == ["127.0.0.1:9"]


def _within(call, bound_s=60.0):
    """The call's value; a failure when it is still running after `bound_s` (a bound on a
    hang, far above the ~0.1 s it takes, far below the 90 s it took)."""
    import threading

    box = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()
    thread.join(bound_s)
    assert not thread.is_alive(), f"still parsing after {bound_s:g} s"
    return box[0]


def test_aliased_labels_on_many_targets_are_bounded(tmp_path):
    # the other shape: one 2,000-label mapping given to 20,000 targets would carry 40 million
    # labels; the work of a file is counted before it is done
    text = ("- targets: ['h0:1']\n  labels: &L\n"
            + "\n".join(f"    l{i}: v{i}" for i in range(2_000)) + "\n"
            + "".join(f"- {{targets: ['h{i}:1'], labels: *L}}\n" for i in range(1, 20_000)))
    path = write(tmp_path, "t.yml", text)

    def refused():
        with pytest.raises(ConfigError, match=r"entry \d+: more than 2,000,000 labels in all"):
            read_targets_file(path)
        return True

    assert _within(refused)


def test_the_same_labels_under_the_limit_are_shared_and_right(tmp_path):
    text = ("- targets: ['h0:1']\n  labels: &L {zone: z1, rack: '12'}\n"
            + "".join(f"- {{targets: ['h{i}:1'], labels: *L}}\n" for i in range(1, 300)))
    targets = read_targets_file(write(tmp_path, "t.yml", text))
    assert len(targets) == 300
    assert all(dict(t.labels)["zone"] == "z1" and dict(t.labels)["rack"] == "12"
               for t in targets)


def test_a_symlink_loop_is_named_as_one(tmp_path):
    """Issue 18, item 12: a symlink loop must be named as such, at start and on a re-read."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(ReadError, match="Too many levels of symbolic links"):
        read_targets_file(a)
    good = write(tmp_path, "t.json", [{"targets": ["h:1"]}])
    source = TargetsFile(good)
    source.load()
    good.unlink()
    good.symlink_to(a)
    said = source.poll()
    assert said.targets is None and "Too many levels of symbolic links" in (said.error or "")


def test_a_seat_label_is_the_seat_of_those_replicas(tmp_path):
    """Issue 19: a targets-file group labelled `seat` was refused ("rocmseat sets this label
    itself"); a user who labels replicas with the seat they serve means exactly that."""
    from rocmseat.watch.alerts import Transition

    path = write(tmp_path, "t.json", [{"targets": ["h:1"], "labels": {"seat": "qwen-mxfp4"}},
                                      {"targets": ["h:2"]}])
    one, two = read_targets_file(path)
    assert dict(one.labels)["seat"] == "qwen-mxfp4"
    fired = Transition(one.name, A.REPLICA_DOWN, A.FIRING, 0.0, None, labels=one.labels)
    assert fired.to_alertmanager(node="n1")["labels"]["seat"] == "qwen-mxfp4"
    other = Transition(two.name, A.REPLICA_DOWN, A.FIRING, 0.0, None, labels=two.labels)
    assert "seat" not in other.to_alertmanager(node="n1")["labels"]


def test_a_slow_reread_never_holds_an_evaluation(tmp_path):
    """Issue 18, item 7: a re-read of a big file in a running watcher froze evaluation for
    more than 30 s (`/healthz` stale). The file is polled on a thread of its own; here its
    poll is held on an event while evaluations go on."""
    import threading

    from rocmseat.watch.filesd import BackgroundPoll

    release = threading.Event()
    entered = threading.Event()

    class Slow(TargetsFile):
        def poll(self):
            entered.set()
            release.wait(30)
            return Reload([Target("new", "http://127.0.0.1:9/metrics")])

    path = write(tmp_path, "t.json", [{"targets": ["h:1"]}])
    polling = BackgroundPoll(Slow(path))
    polling.request()
    assert entered.wait(10)
    polling.request()  # one poll at a time: this does not start a second
    assert polling.take() is None  # the evaluation thread goes on meanwhile
    release.set()
    polling.join(10)
    done = polling.take()
    assert done is not None and [t.name for t in done.targets or []] == ["new"]
    assert polling.take() is None


def test_a_poll_that_breaks_is_said_and_the_watch_goes_on(tmp_path):
    from rocmseat.watch.filesd import BackgroundPoll

    class Broken(TargetsFile):
        def poll(self):
            raise RuntimeError("boom")

    polling = BackgroundPoll(Broken(write(tmp_path, "t.json", [{"targets": ["h:1"]}])))
    polling.request()
    polling.join(10)
    done = polling.take()
    assert done is not None and done.targets is None
    assert done.error == f"{tmp_path / 't.json'}: could not be re-read (RuntimeError: boom)"


def test_a_running_watcher_keeps_evaluating_while_a_big_file_is_reread(page_server, tmp_path):
    """Issue 18, item 7, the running watcher: a re-read of an anchored file froze evaluation
    (`/healthz` stale, `/ready` "no fresh verdict"). The file is swapped for a 770 KiB one
    (a 2,000-label group referenced 150,000 times: two reads of it take seconds here) and the
    watchdog's own counter of evaluations keeps moving until the reload is said (3 evaluations
    when the reads ran on the evaluation thread, 18 with them on a thread of their own)."""
    import threading

    import httpx

    from rocmseat.watch.service import Parts, Sinks, run_service

    port = page_server.url.split(":")[2].split("/")[0]
    page_server.play(Answer(page("01-healthy.txt")))
    path = write(tmp_path, "t.yml", f"- targets: ['127.0.0.1:{port}']\n")
    lines: list[str] = []
    stop = threading.Event()
    source = TargetsFile(path)
    targets = source.load()
    worker = threading.Thread(target=run_service, args=(
        targets, WatchConfig(interval_s=0.1, timeout_s=1.0, state_dir=tmp_path / "s"),
        Sinks("127.0.0.1:0")), kwargs={"log": lines.append, "stop": stop,
                                       "parts": Parts(targets_file=source)}, daemon=True)
    worker.start()

    def said(needle, bound_s=60.0):  # a bound for a broken build
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            found = [line for line in list(lines) if needle in line]
            if found:
                return found[0]
            time.sleep(0.02)
        raise AssertionError(f"{needle!r} not in {lines}")

    def evaluations(base):
        text = httpx.get(f"{base}/metrics", timeout=5).text
        return float(next(line.split()[1] for line in text.splitlines()
                          if line.startswith("rocmseat_watch_evaluations_total ")))

    try:
        start = said("rocmseat-watch start")
        base = "http://" + start.rsplit("exporter=", 1)[1]
        while evaluations(base) < 3:
            time.sleep(0.05)
        big = _anchored(150_000, 2_000).replace("127.0.0.1:9", f"localhost:{port}")
        tmp = tmp_path / "t.yml.new"
        tmp.write_text(big)
        os.replace(tmp, path)
        before = evaluations(base)
        said("targets-file-reloaded")
        during = evaluations(base) - before
    finally:
        stop.set()
        worker.join(30)
    print(f"evaluations while a 770 KiB anchored file was re-read: {during:.0f}")
    assert during >= 8, lines
    assert said("targets-file-reloaded").endswith("targets=1 added=1 removed=1 relabelled=0")


def test_watch_once_starts_at_once_on_an_anchored_file(rocmseat_cli, page_server, tmp_path):
    """Issue 18, item 7, the command: `watch --targets-file` on the 320 KiB anchored file ran
    for over 90 s at start; now it reads it and judges its one replica."""
    port = page_server.url.split(":")[2].split("/")[0]
    page_server.play(Answer(page("00-healthy.txt")), Answer(page("01-healthy.txt")))
    path = write(tmp_path, "t.yml",
                 _anchored(60_000, 2_000).replace("127.0.0.1:9", f"127.0.0.1:{port}"))
    result = _within(lambda: rocmseat_cli("watch", "--targets-file", str(path), "--once",
                                          "--interval", "0.05", "--baseline-al", "2.9",
                                          "--state-dir", str(tmp_path / "s")))
    assert result.exit_code == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[1].split()[:2] == [f"127.0.0.1:{port}", "yes"]
