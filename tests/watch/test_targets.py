"""Watch targets from the seat's placement (rocmseat.watch.targets): each replica's own port, its
GPU pair, its cache dir; the node's answer (its sysfs root, by default the node's own) merged
with the placement.json launch recorded; a record that is not usable is said and its replica is
still watched on its port.

The recorded placements here are written the way launch writes them: the resolver's record for
the fixture node (rocmseat.launch.flow.place_for_launch) saved with
rocmseat.placement.recorded.write_recorded;
the hostile ones are those records, edited.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

import rocmseat.sysfs.fs
from rocmseat.errors import ConfigError
from rocmseat.launch import flow
from rocmseat.placement.recorded import write_recorded
from rocmseat.seat.load import load_seat
from rocmseat.watch.targets import seat_targets
from tests.conftest import FIXTURES, REPO
from tests.watch.conftest import Answer, PageServer, page

SHIPPED = REPO / "launchers" / "r9700-mxfp4-dflash.toml"
X99 = FIXTURES / "sysfs" / "x99-r9700"
NO_GPU = FIXTURES / "sysfs" / "no-amdgpu"  # a monitoring host: its /sys shows no AMD GPU
A, B, C, D = "0000:05:00.0", "0000:09:00.0", "0000:86:00.0", "0000:89:00.0"
SEAT_STATE = Path("seats") / "r9700-mxfp4-dflash"


def copy_seat(tmp_path: Path, *replacements: tuple[str, str]) -> Path:
    text = SHIPPED.read_text().replace('"../checks/x99-r9700.toml"',
                                       json.dumps(str(REPO / "checks" / "x99-r9700.toml")))
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "launchers" / "seat.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def launched(seat_path: Path, state: Path, *replicas: str) -> None:
    """What launch leaves in the state dir of each replica it started: its placement.json."""
    seat = load_seat(seat_path)
    for record in flow.place_for_launch(seat, X99, state_dir=state).records:
        if record.replica in replicas:
            write_recorded(record)


@pytest.fixture
def node_root(monkeypatch):
    """Make this node's sysfs root a fixture tree (tests never read the real /sys)."""
    def use(root: Path) -> None:
        monkeypatch.setattr(rocmseat.sysfs.fs, "default_sysfs_root", lambda: root)
    return use


def test_r1_alone_is_watched_on_its_own_port_with_its_gpus(tmp_path):
    """Issue 10: with state for r1 only, an auto seat's r1 was scraped on r0's port (the
    position in the list of replicas found, not r1's index) and had no GPU path."""
    seat_path = copy_seat(tmp_path, ('names = ["r0", "r1"]', ""))
    launched(seat_path, tmp_path / "state", "r1")
    [r1] = seat_targets(load_seat(seat_path), tmp_path / "state", sysfs_root=NO_GPU)
    assert (r1.name, r1.url) == ("r1", "http://127.0.0.1:8001/metrics")
    assert r1.gpus == (C, D)
    assert r1.cache_dir == Path("/var/cache/rocmseat/r9700-mxfp4-dflash/r1")


def test_shipped_seat_r1_only(tmp_path):
    seat = load_seat(SHIPPED)
    for record in flow.place_for_launch(seat, X99, state_dir=tmp_path / "state").records[1:]:
        write_recorded(record)
    targets = seat_targets(seat, tmp_path / "state", sysfs_root=NO_GPU)
    assert [(t.name, t.url, t.gpus) for t in targets] == [
        ("r1", "http://127.0.0.1:8001/metrics", (C, D))]


def test_with_the_node_readable_every_replica_is_watched(tmp_path):
    seat = load_seat(SHIPPED)
    targets = seat_targets(seat, tmp_path / "state", sysfs_root=X99)
    assert [(t.name, t.url, t.gpus) for t in targets] == [
        ("r0", "http://127.0.0.1:8000/metrics", (A, B)),
        ("r1", "http://127.0.0.1:8001/metrics", (C, D))]


def test_called_as_watch_calls_it_the_node_is_read(tmp_path, node_root):
    """Review of issue 10: `watch SEAT` never read sysfs (seat_targets had no root unless
    given one), so on the GPU node itself an auto seat with no record was a config error whose
    hint ("run watch where the GPUs are") was not true. Called as the CLI calls it, the node's
    own sysfs root is read; the replica that never launched is watched too."""
    seat = load_seat(SHIPPED)
    state = tmp_path / "state"
    launched(SHIPPED, state, "r1")
    node_root(X99)
    targets = seat_targets(seat, state)
    assert [(t.name, t.url, t.gpus) for t in targets] == [
        ("r0", "http://127.0.0.1:8000/metrics", (A, B)),
        ("r1", "http://127.0.0.1:8001/metrics", (C, D))]


def test_a_cpu_seat_reads_no_sysfs():
    # tests/conftest.py makes default_sysfs_root raise: a cpu seat never asks for it
    [r0] = seat_targets(load_seat(REPO / "launchers" / "demo-cpu.toml"), None)
    assert (r0.name, r0.url, r0.gpus) == ("r0", "http://127.0.0.1:8100/metrics", ())


def test_explicit_seat_needs_neither_sysfs_nor_state(tmp_path):
    seat_path = copy_seat(tmp_path, ('mode = "auto"', f'mode = "explicit"\npairs = '
                                     f'[["{C}", "{D}"], ["{A}", "{B}"]]'))
    targets = seat_targets(load_seat(seat_path), None, sysfs_root=None)
    assert [(t.name, t.url, t.gpus) for t in targets] == [
        ("r0", "http://127.0.0.1:8000/metrics", (C, D)),
        ("r1", "http://127.0.0.1:8001/metrics", (A, B))]


def test_auto_seat_with_neither_says_why_and_the_hint_is_true(tmp_path, node_root):
    node_root(NO_GPU)
    with pytest.raises(ConfigError) as info:
        seat_targets(load_seat(SHIPPED), tmp_path / "state")
    message = info.value.message
    assert message.startswith(f"{SHIPPED}: key 'replicas': seat r9700-mxfp4-dflash places its "
                              "replicas from the node's GPUs ([replicas] mode = 'auto') and this "
                              f"host cannot tell them: no AMD GPU under {NO_GPU}/class/drm")
    assert message.endswith(f"and no replica has a placement.json under "
                            f"{tmp_path / 'state' / SEAT_STATE} (none was "
                            "launched with this state dir)")
    assert info.value.hint == ("launch a replica with this state dir first (it records its "
                               "placement.json), or run watch on the GPU node, whose sysfs it "
                               f"reads (read {NO_GPU})")
    # and the hint holds: on the GPU node (the same call, the node's root readable) it works
    node_root(X99)
    assert [t.name for t in seat_targets(load_seat(SHIPPED), tmp_path / "state")] == ["r0", "r1"]


@pytest.mark.parametrize("text", ["{not json", '{"schema": "rocmseat.placement/v1"}', "[]",
                                  json.dumps({"schema": "rocmseat.placement/v1", "port": 1e999}),
                                  "[" * 100_000])
def test_an_unreadable_record_is_that_replicas_problem_only(tmp_path, text):
    """Review of issue 10: one unreadable placement.json stopped the whole watcher (exit 2).
    It is that replica's problem: said in one line, the replica still watched on the port the
    seat's rule gives it, every other replica watched as before."""
    state = tmp_path / "state"
    launched(SHIPPED, state, "r0")
    bad = state / SEAT_STATE / "r1" / "placement.json"
    bad.parent.mkdir(parents=True)
    bad.write_text(text)
    said: list[str] = []
    targets = seat_targets(load_seat(SHIPPED), state, sysfs_root=NO_GPU, say=said.append)
    assert [(t.name, t.url, t.gpus) for t in targets] == [
        ("r0", "http://127.0.0.1:8000/metrics", (A, B)),
        ("r1", "http://127.0.0.1:8001/metrics", ())]
    [line] = said
    assert line.startswith(f"{bad}: ") and line.endswith("(watched on its port by the seat's "
                                                          "rule)")
    assert "\n" not in line and len(line) < 600


def test_a_fifo_record_is_refused_not_waited_on(tmp_path):
    state = tmp_path / "state"
    fifo = state / SEAT_STATE / "r1" / "placement.json"
    fifo.parent.mkdir(parents=True)
    os.mkfifo(fifo)
    said: list[str] = []
    [r1] = seat_targets(load_seat(SHIPPED), state, sysfs_root=NO_GPU, say=said.append)
    assert (r1.name, r1.url) == ("r1", "http://127.0.0.1:8001/metrics")
    assert said == [f"{fifo}: is a FIFO, not a regular file (watched on its port by the seat's "
                    "rule)"]


def test_another_replicas_record_is_not_taken(tmp_path):
    state = tmp_path / "state"
    launched(SHIPPED, state, "r1")
    moved = state / SEAT_STATE / "r0"
    (state / SEAT_STATE / "r1").rename(moved)
    said: list[str] = []
    [r0] = seat_targets(load_seat(SHIPPED), state, sysfs_root=NO_GPU, say=said.append)
    assert (r0.name, r0.url, r0.gpus) == ("r0", "http://127.0.0.1:8000/metrics", ())
    assert said == [f"{moved / 'placement.json'}: the record of r9700-mxfp4-dflash/r1, not of "
                    "r9700-mxfp4-dflash/r0 (watched on its port by the seat's rule)"]


def _edit(key: str, value: Any):
    def edit(doc: dict[str, Any]) -> None:
        doc[key] = value
    return edit


# Records that parse but disagree with the seat's placement rule (the reviewer's reproducers,
# /tmp/review-1/variants.py): before the review they were all trusted, a scrape went to
# evil.example or port 22, a cache dir of /etc or a one-GPU pair was taken as r1's.
AGAINST_THE_RULE = [
    ("host_evil", _edit("host", "evil.example"), "key 'host' is 'evil.example' but the seat "
     "gives replica r1 '127.0.0.1'"),
    ("port_odd", _edit("port", 22), "key 'port' is 22 but the seat gives replica r1 8001"),
    ("index_dup", _edit("index", 0), "key 'index' is 0 but the seat gives replica r1 1"),
    ("cache_elsewhere", _edit("cache_dir", "/etc"), "key 'cache_dir' is '/etc' but the seat "
     "gives replica r1 '/var/cache/rocmseat/r9700-mxfp4-dflash/r1'"),
    ("state_elsewhere", _edit("state_dir", "/srv/x"), "key 'state_dir' is '/srv/x' but the seat "
     "gives replica r1 "),
    ("pci_one", _edit("pci_pair", [C]), "key 'pci_pair length' is 1 but the seat gives replica "
     "r1 2"),
    ("gfx_evil", _edit("gfx_targets", ["gfx1201\u202e", "x" * 4000]), "not a placement record: "
     "key 'gfx_targets': 'gfx1201\\u202e' is not a gfx target such as 'gfx1201'"),
    ("gfx_long", _edit("gfx_targets", ["gfx1201", "gfx" + "1" * 50]), "is not a gfx target"),
    ("note_bidi", _edit("hip_note", "ok\u202eevil"), "key 'hip_note': holds the control or "
     "format character U+202E"),
]


@pytest.mark.parametrize(("case", "edit", "said"), AGAINST_THE_RULE,
                         ids=[c[0] for c in AGAINST_THE_RULE])
def test_a_record_against_the_seats_rule_is_not_used(tmp_path, case, edit, said):
    """Review of issue 10, defect 3: placement.json was trusted without a cross-check against
    the seat. A record whose host, port, index, cache dir, state dir or pair length is not what
    the seat's rule gives its replica, or whose gfx strings are not gfx targets, is not used:
    one line says why, and the replica is watched where the seat says it listens."""
    state = tmp_path / "state"
    launched(SHIPPED, state, "r1")
    path = state / SEAT_STATE / "r1" / "placement.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    lines: list[str] = []
    [r1] = seat_targets(load_seat(SHIPPED), state, sysfs_root=NO_GPU, say=lines.append)
    assert (r1.name, r1.url, r1.gpus) == ("r1", "http://127.0.0.1:8001/metrics", ())
    assert r1.cache_dir == Path("/var/cache/rocmseat/r9700-mxfp4-dflash/r1")
    [line] = lines
    assert line.startswith(f"{path}: ") and said in line, line


def test_a_replica_the_seat_cannot_have_is_not_watched(tmp_path):
    state = tmp_path / "state"
    launched(SHIPPED, state, "r1")
    seven = state / SEAT_STATE / "r7"
    (state / SEAT_STATE / "r1").rename(seven)
    doc = json.loads((seven / "placement.json").read_text())
    doc.update(replica="r7", index=7, port=8007, state_dir=str(seven))
    (seven / "placement.json").write_text(json.dumps(doc))
    lines: list[str] = []
    with pytest.raises(ConfigError, match=r"no replica has a placement\.json"):
        seat_targets(load_seat(SHIPPED), state, sysfs_root=NO_GPU, say=lines.append)
    assert lines == [f"{seven / 'placement.json'}: seat r9700-mxfp4-dflash has no replica 'r7' "
                     "(r0, r1) (not watched: not a replica of this seat)"]


def test_two_records_of_one_gpu_are_neither_used(tmp_path):
    """Two records that claim the same GPU (or port, or index): which one tells the truth
    cannot be known; neither is used, both replicas are watched by the rule."""
    state = tmp_path / "state"
    launched(SHIPPED, state, "r0", "r1")
    r0 = state / SEAT_STATE / "r0" / "placement.json"
    doc = json.loads(r0.read_text())
    doc["pci_pair"] = [C, D]
    r0.write_text(json.dumps(doc))
    lines: list[str] = []
    targets = seat_targets(load_seat(SHIPPED), state, sysfs_root=NO_GPU, say=lines.append)
    assert [(t.name, t.url, t.gpus) for t in targets] == [
        ("r0", "http://127.0.0.1:8000/metrics", ()), ("r1", "http://127.0.0.1:8001/metrics", ())]
    assert lines[0].startswith(f"{r0}: GPU {C} is also in the record of r1: neither is used")


@pytest.mark.parametrize("kind", ["to_passwd", "to_a_good_record", "replica_dir"])
def test_a_planted_link_is_not_followed(tmp_path, kind):
    state = tmp_path / "state"
    launched(SHIPPED, state, "r1")
    directory = state / SEAT_STATE / "r1"
    path = directory / "placement.json"
    if kind == "replica_dir":
        elsewhere = tmp_path / "elsewhere"
        directory.rename(elsewhere)
        directory.symlink_to(elsewhere)
        shown = f"{directory}: is a symlink"
    else:
        target = Path("/etc/passwd") if kind == "to_passwd" else tmp_path / "good.json"
        if kind == "to_a_good_record":
            target.write_text(path.read_text())
        path.unlink()
        path.symlink_to(target)
        shown = f"{path}: is a symlink"
    lines: list[str] = []
    [r1] = seat_targets(load_seat(SHIPPED), state, sysfs_root=NO_GPU, say=lines.append)
    assert (r1.name, r1.gpus) == ("r1", ())
    [line] = lines
    assert line.startswith(shown)


def test_problems_go_to_the_log_without_say(tmp_path, caplog):
    state = tmp_path / "state"
    bad = state / SEAT_STATE / "r1" / "placement.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{")
    with caplog.at_level("WARNING", logger="rocmseat.watch.targets"):
        seat_targets(load_seat(SHIPPED), state, sysfs_root=NO_GPU)
    assert [r.getMessage()[:len(str(bad))] for r in caplog.records] == [str(bad)]


def test_watch_once_scrapes_r1_on_its_port(rocmseat_cli, tmp_path, page_server, node_root):
    """`rocmseat watch SEAT --once --json` with state for r1 only, end to end against a real
    local server, on a host whose /sys shows no GPU: port_base is set so that r1's port
    (port_base + 1) is the server's."""
    node_root(NO_GPU)
    port = int(page_server.url.split(":")[2].split("/")[0])
    seat_path = copy_seat(tmp_path, ("port_base = 8000", f"port_base = {port - 1}"),
                          ('exporter_listen = "127.0.0.1:9464"', 'exporter_listen = "off"'))
    state = tmp_path / "state"
    launched(seat_path, state, "r1")
    page_server.play(Answer(page("00-healthy.txt")), Answer(page("01-healthy.txt")))
    result = rocmseat_cli("watch", str(seat_path), "--once", "--json", "--interval", "0.05",
                          "--state-dir", str(state))
    [replica] = json.loads(result.stdout)["replicas"]
    assert replica["replica"] == "r1" and replica["url"] == page_server.url
    assert replica["up"] is True and page_server.served == 2, result.stderr


def _server_beside_a_dead_port() -> tuple[PageServer, socket.socket, int]:
    """A page server on port P and a socket bound (never listening: connections are refused)
    on P + 1 or P - 1; returns the server, the socket and the offset of the dead port."""
    for _ in range(50):
        server = PageServer()
        port = server.httpd.server_address[1]
        for offset in (1, -1):
            dead = socket.socket()
            try:
                dead.bind(("127.0.0.1", port + offset))
            except OSError:
                dead.close()
                continue
            return server, dead, offset
        server.close()
    raise AssertionError("no two neighbouring free ports on 127.0.0.1 in 50 tries")


def test_watch_once_on_the_node_reports_a_replica_without_a_record_down(rocmseat_cli, tmp_path,
                                                                       node_root):
    """On the GPU node (`watch SEAT` reads its sysfs), a replica that never launched has no
    placement.json: it is watched all the same, and reported down when nothing answers."""
    node_root(X99)
    server, dead, offset = _server_beside_a_dead_port()
    try:
        port = server.httpd.server_address[1]
        live, down = ("r0", "r1") if offset == 1 else ("r1", "r0")
        base = port if offset == 1 else port - 1
        seat_path = copy_seat(tmp_path, ("port_base = 8000", f"port_base = {base}"),
                              ('exporter_listen = "127.0.0.1:9464"', 'exporter_listen = "off"'))
        state = tmp_path / "state"
        launched(seat_path, state, live)
        server.play(Answer(page("00-healthy.txt")), Answer(page("01-healthy.txt")))
        # --timeout 2: the live replica must answer in time while CI runs the engine tier
        # beside this one; the dead port refuses at once, so this costs nothing
        result = rocmseat_cli("watch", str(seat_path), "--once", "--json", "--interval", "0.05",
                              "--timeout", "2", "--state-dir", str(state))
    finally:
        dead.close()
        server.close()
    replicas = {r["replica"]: r for r in json.loads(result.stdout)["replicas"]}
    assert set(replicas) == {"r0", "r1"}, result.stderr
    assert replicas[live]["up"] is True
    assert replicas[down]["up"] is False
    assert replicas[down]["url"] == f"http://127.0.0.1:{port + offset}/metrics"
    assert result.exit_code != 0


def test_watch_once_of_the_shipped_seat_uses_8001_for_r1(rocmseat_cli, tmp_path, node_root):
    """The command of the issue, as shipped, on a host whose /sys shows no GPU: the JSON names
    r1 alone, on port 8001 (nothing is expected to listen there in the test run: it is exit 2,
    could not check)."""
    node_root(NO_GPU)
    state = tmp_path / "state"
    launched(SHIPPED, state, "r1")
    result = rocmseat_cli("watch", str(SHIPPED), "--once", "--json", "--interval", "0.05",
                          "--timeout", "0.5", "--state-dir", str(state))
    [replica] = json.loads(result.stdout)["replicas"]
    assert (replica["replica"], replica["url"]) == ("r1", "http://127.0.0.1:8001/metrics")


def test_a_linked_seat_state_dir_is_not_read(tmp_path):
    state = tmp_path / "state"
    launched(SHIPPED, state, "r1")
    real = tmp_path / "real-seats"
    (state / "seats").rename(real)
    (state / "seats").symlink_to(real)
    lines: list[str] = []
    with pytest.raises(ConfigError):
        seat_targets(load_seat(SHIPPED), state, sysfs_root=NO_GPU, say=lines.append)
    assert lines == [f"{state / 'seats'}: is a symlink; no placement.json is read through one"]
