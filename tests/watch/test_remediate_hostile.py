"""Hostile round 4 on remediation (issue 28): secrets in what a child printed, a damaged but
trusted state or journal, reset under each failure, state paths of the wrong shape, children's
signal mask, the journal's growth, two watchers on one seat, names that forge lines, repeated
warnings. The world is test_remediate's: a real Watcher on pages rendered from vLLM's own
page, the real Remediator, journal, store and restart command.

Every battery is seeded and bounded: the cases are drawn from `random.Random(SEED)`, each one
runs to the end within the test's own time, and the counts are asserted, not sampled.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rocmseat.placement.rules import replica_state_dir
from rocmseat.procgroup import spawn
from rocmseat.runner import Completed, run
from rocmseat.watch import alerts as A
from rocmseat.watch.remediate import journal
from rocmseat.watch.remediate import policy as P
from rocmseat.watch.remediate.service import Remediator, Setup
from tests.watch.test_remediate import INTERVAL, World, collapse

SEED = 28
PASSWORD, TOKEN, BEARER, API_KEY = ("hunter2-pw", "tok-SECRET-28", "brr-SECRET-28",
                                    "sk-SECRET-28")
SECRETS = (PASSWORD, TOKEN, BEARER, API_KEY)
# how a child may print them (the shapes of issue 28)
SECRET_LINES = (
    f"401 for http://admin:{PASSWORD}@127.0.0.1:9/restart?token={TOKEN}",
    f"curl: -H 'Authorization: Bearer {BEARER}' refused",
    f"exec vllm serve m --api-key {API_KEY} --port 8000",
    f"exec vllm serve m --api-key={API_KEY}",
    f"GET http://127.0.0.1:9/x?access_token={TOKEN}&a=1 failed",
    f"auth: user:{PASSWORD}@ at http://u:{PASSWORD}@h/",
    f"password={PASSWORD} token: {TOKEN}",
)


def _failing_command(lines: list[str], stream: str) -> list[str]:
    script = (f"import sys; sys.{stream}.write({json.dumps(chr(10).join(lines))} + '\\n'); "
              "sys.exit(3)")
    return [sys.executable, "-c", script]


def _set_command(world: World, argv: list[str]) -> None:
    text = world.seat_file.read_text()
    head, _, rest = text.partition("restart_command = ")
    _, _, tail = rest.partition("\n")
    world.seat_file.write_text(f"{head}restart_command = {json.dumps(argv)}\n{tail}")
    from rocmseat.seat.load import load_seat

    world.seat = load_seat(world.seat_file)
    world.edge.seat = world.seat
    world.edge.settings = world.seat.remediate


def _sinks(world: World, rocmseat_cli) -> dict[str, str]:
    """Every place remediation's words go: the exporter page, the log lines, state.json, the
    journal files, `remediate status` (text and --json), the alerts' details."""
    from rocmseat.watch.exporter import ExportState, render

    page = render(lambda: ExportState(
        statuses=tuple(world.watcher.statuses), evaluated_at_s=world.watcher.evaluated_at_s,
        remediations=tuple((*k, n) for k, n in sorted(world.remediator.counts.items())),
        remediation_halted=tuple(world.remediator.halted_scopes())))
    folder = journal.seat_dir(world.state, "heal")
    status = rocmseat_cli("remediate", "status", "--state-dir", str(world.state))
    status_json = rocmseat_cli("remediate", "status", "--json", "--state-dir", str(world.state))
    assert status.exit_code == status_json.exit_code == 1, status.stderr
    return {
        "exporter": page,
        "log": "\n".join(world.lines),
        "state": (folder / "state.json").read_text(),
        "journal": "\n".join(p.read_text() for p in sorted((folder / "journal").iterdir())),
        "status": status.stdout + status.stderr,
        "status --json": status_json.stdout + status_json.stderr,
        "alerts": "\n".join(f"{t.alert} {t.state} {dict(t.details)}"
                            for t in world.transitions),
    }


@pytest.mark.parametrize("case", range(6))
def test_secrets_a_child_printed_reach_no_sink(rocmseat_cli, tmp_path, case):
    rng = random.Random(SEED * 100 + case)
    lines = [*rng.sample(SECRET_LINES, 3), SECRET_LINES[case % 3]]
    world = World(tmp_path)
    _set_command(world, _failing_command(lines, rng.choice(["stderr", "stdout"])))
    world.step(3)
    collapse(world)
    world.step(3)
    assert world.outcomes()[-1][3].startswith("failed: ")
    sinks = _sinks(world, rocmseat_cli)
    hits = {(name, s) for name, text in sinks.items() for s in SECRETS if s in text}
    assert hits == set(), hits
    # the failure itself is still told (redacted), and its class is the only label
    assert "<redacted>" in sinks["journal"] and "<redacted>" in sinks["log"]
    labels = [line for line in sinks["exporter"].splitlines()
              if line.startswith("rocmseat_remediations_total{")]
    assert labels and all('outcome="failed"' in x or 'outcome="started"' in x for x in labels)


def test_secrets_in_systemctl_output_reach_no_sink(tmp_path):
    from rocmseat.watch.remediate.actions import ActionFailed, SeatEdge

    world = World(tmp_path)
    line = SECRET_LINES[0] + " " + SECRET_LINES[1] + " " + SECRET_LINES[2]
    seat = world.seat.model_copy(update={"remediate": world.seat.remediate.model_copy(
        update={"restart_command": None, "unit_dir": tmp_path / "units"})})
    edge = SeatEdge(seat, world.edge.records, runner=lambda argv, **kw: Completed(
        tuple(argv), 1, line, line))
    with pytest.raises(ActionFailed) as caught:
        edge._systemctl("restart", "x.service")
    assert not [s for s in SECRETS if s in caught.value.message]


def test_every_outcome_is_one_of_a_closed_set():
    for text in ("started", "failed: r0: http://a:b@h/ 401", "halted: x: y", "refused: z",
                 "dry-run: would restart", "unverified: not enough traffic", "anything else",
                 "reset: back with its drafter", "still collapsed after a fresh compile"):
        assert P.outcome_class(text) in P.OUTCOME_CLASSES


# ----- tampering: state.json and the journal -------------------------------------------------

def _state_doc(world: World) -> dict:
    return json.loads((journal.seat_dir(world.state, "heal") / "state.json").read_text())


def _running(world: World) -> dict:
    """A world whose state holds every kind of number: a pending step, taken, a halt."""
    world.step(3)
    collapse(world)
    world.step(1)
    doc = _state_doc(world)
    doc["halts"]["node:gpu07"] = {"scope": "node:gpu07", "bound": "b", "since_s": 1.79e9,
                                  "text": "t"}
    doc["ladders"]["r0"]["stalls_s"] = [1.79e9]
    doc["ladders"]["r0"]["since_s"] = 1.79e9
    return doc


NUMBER_PATHS = (
    ("ladders", "r0", "since_s"), ("ladders", "r0", "pending", "started_s"),
    ("ladders", "r0", "pending", "drafts"), ("ladders", "r0", "pending", "step"),
    ("ladders", "r0", "pending", "generation_s"), ("ladders", "r0", "stalls_s", 0),
    ("taken", 0, "time_s"), ("halts", "node:gpu07", "since_s"),
    ("ladders", "r0", "pending", "collapsed_tps"),
)
BAD_NUMBERS = ("YEAR10000", "-1e11", "1" + "0" * 400, "NaN", "Infinity", "-Infinity", "1e308",
               "true", '"12"', "-1")


def _put(doc, path, raw: str) -> str:
    """The document's JSON with `raw` (JSON text) at `path`."""
    marker = "__TAMPER__"
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = marker
    value = "253402300800.0" if raw == "YEAR10000" else raw
    return json.dumps(doc).replace(f'"{marker}"', value)


def _tamper_cases() -> list[tuple[str, tuple, str]]:
    rng = random.Random(SEED)
    cases = [(f"{'.'.join(map(str, p))}={v}", p, v) for p in NUMBER_PATHS
             for v in rng.sample(BAD_NUMBERS, 3)]
    # and the shapes that are not numbers
    cases += [
        ("unknown key", ("ladders", "r0", "surprise"), "1"),
        ("mode", ("ladders", "r0", "mode"), '"sideways"'),
        ("a ladder named with an escape", ("ladders", "r0\u001b]0;x\u0007\nforged"), "{}"),
        ("halt scope", ("halts", "node:gpu07", "scope"), '"fleet"'),
        ("taken replica", ("taken", 0, "replica"), '"../../etc"'),
        ("written_at", ("written_at",), '"10000-01-01T00:00:00Z"'),
        ("action", ("taken", 0, "action"), '"rm -rf"'),
        ("why", ("ladders", "r0", "pending", "why", "p0"), "NaN"),
    ]
    return cases


TAMPER = _tamper_cases()


@pytest.mark.parametrize(("name", "path", "raw"), TAMPER, ids=[c[0] for c in TAMPER])
def test_a_tampered_state_is_one_line_and_the_watcher_keeps_watching(rocmseat_cli, tmp_path,
                                                                     name, path, raw):
    world = World(tmp_path)
    doc = _running(world)
    state_file = journal.seat_dir(world.state, "heal") / "state.json"
    state_file.write_text(_put(doc, path, raw))
    restarts = list(world.restarts)
    outside = _outside(tmp_path)
    world.step(4)  # would verify the pending step; raises nothing, acts on nothing
    assert world.restarts == restarts
    said = [x for x in world.lines if "unusable-state" in x]
    assert len(said) == 1, world.lines[-5:]  # once, not every evaluation
    assert str(state_file) in said[0] and "key_'" in said[0], said[0]
    assert world.watcher.evaluations >= 7  # still evaluating, /ready still answered
    assert world.ready() is not None
    for args in (("status",), ("status", "--json"), ("reset", "r0")):
        result = rocmseat_cli("remediate", *args, "--state-dir", str(world.state))
        assert result.exit_code == 2, (args, result.stderr)
        assert result.stderr.startswith("rocmseat: error: ") and str(state_file) in result.stderr
        assert "\x1b" not in result.stderr + result.stdout
        assert "Traceback" not in result.stderr
    assert _outside(tmp_path) == outside  # nothing written outside the state and cache dirs


def _outside(tmp_path: Path) -> dict[str, int]:
    """Every file under tmp_path outside its state and cache dirs, with its size."""
    return {str(p): p.stat().st_size for p in tmp_path.rglob("*")
            if p.is_file() and not p.is_relative_to(tmp_path / "state")
            and not p.is_relative_to(tmp_path / "cache")}


JOURNAL_TAMPER = (
    ("NaN figure", lambda r: r["figures"].update(p0="__NaN__")),
    ("year 10000", lambda r: r.update(when="10000-01-01T00:00:00Z")),
    ("huge drafts", lambda r: r["figures"].update(drafts="__BIG__")),
    ("negative", lambda r: r["figures"].update(tokens_per_s=-5.0)),
    ("unknown key", lambda r: r.update(extra=1)),
    ("replica with escape", lambda r: r.update(replica="r0\u001b[2J\nforged")),
    ("step 9", lambda r: r.update(step=9)),
    ("action", lambda r: r.update(action="format-disk")),
    ("why as a list", lambda r: r.update(why=[1, 2])),
    ("not an object", lambda r: r.clear()),
)


@pytest.mark.parametrize(("name", "change"), JOURNAL_TAMPER, ids=[c[0] for c in JOURNAL_TAMPER])
def test_a_tampered_journal_record_is_one_warning(rocmseat_cli, tmp_path, name, change):
    world = World(tmp_path)
    _running(world)
    folder = journal.seat_dir(world.state, "heal") / "journal"
    [first] = sorted(folder.iterdir())
    record = json.loads(first.read_text())
    change(record)
    text = json.dumps(record).replace('"__NaN__"', "NaN").replace('"__BIG__"', "1" + "0" * 400)
    first.write_text(text if record else "[]")
    for extra in ((), ("--json",)):
        result = rocmseat_cli("remediate", "status", *extra, "--state-dir", str(world.state))
        assert result.exit_code == 0, result.stderr  # the state is fine; the record not read
        warnings = [x for x in result.stderr.splitlines() if x.startswith("rocmseat: warning:")]
        assert len(warnings) == 1 and first.name in warnings[0], result.stderr
        assert "\x1b" not in result.stdout + result.stderr
        if extra:
            assert len(json.loads(result.stdout)["journal"]) == 0
    world.step(2)  # the watcher never reads the journal back to decide: it keeps going
    assert not [x for x in world.lines if "unusable" in x]


def test_names_not_matching_the_replica_rule_are_refused_at_load(rocmseat_cli, tmp_path):
    world = World(tmp_path)
    doc = _running(world)
    doc["ladders"]["r0\u001b]0;pwn\u0007\nr1: drafter"] = doc["ladders"].pop("r0")
    (journal.seat_dir(world.state, "heal") / "state.json").write_text(json.dumps(doc))
    result = rocmseat_cli("remediate", "status", "--state-dir", str(world.state))
    assert result.exit_code == 2
    assert "is not a replica name" in result.stderr and "\x1b" not in result.stderr
    assert len(result.stderr.splitlines()) == 2  # the line and its hint


def test_status_prints_state_text_through_printable(rocmseat_cli, tmp_path):
    world = World(tmp_path)
    doc = _running(world)
    doc["halts"]["node:gpu07"]["text"] = "x\u001b]0;pwn\u0007\nr0: drafter"
    doc["halts"]["node:gpu07"]["bound"] = "b\u001b[2J\rr0: drafter"
    doc["node"] = "gpu07\u0007\nr0: drafter"
    (journal.seat_dir(world.state, "heal") / "state.json").write_text(json.dumps(doc))
    result = rocmseat_cli("remediate", "status", "--state-dir", str(world.state))
    assert result.exit_code == 1, result.stderr
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert not [x for x in result.stdout.splitlines() if x.startswith("r0: drafter")]


# ----- reset as a transaction ----------------------------------------------------------------

def _no_drafter(world: World) -> None:
    world.step(3)
    collapse(world)
    world.step(4)
    world.step(5)
    assert world.ladder().mode == "no-drafter", world.outcomes()


def _restart_log(tmp_path: Path) -> list[str]:
    path = tmp_path / "restarts.log"
    return path.read_text().splitlines() if path.exists() else []


def _fresh_log_world(tmp_path: Path, **kw) -> World:
    from tests.watch.test_remediate import FRESH_LOG

    return World(tmp_path, log_text=FRESH_LOG, **kw)


def test_reset_with_no_placement_record_says_so_and_touches_nothing(rocmseat_cli, tmp_path):
    world = _fresh_log_world(tmp_path)
    _no_drafter(world)
    state_file = journal.seat_dir(world.state, "heal") / "state.json"
    before = state_file.read_text()
    journal_before = sorted(p.name for p in state_file.parent.joinpath("journal").iterdir())
    (replica_state_dir(world.state, "heal", "r0") / "placement.json").unlink()
    restarts = _restart_log(tmp_path)
    result = rocmseat_cli("remediate", "reset", "r0", "--state-dir", str(world.state))
    assert result.exit_code == 2, result.stderr
    assert "no placement record" in result.stderr and "nothing was changed" in result.stderr
    assert state_file.read_text() == before
    assert sorted(p.name for p in state_file.parent.joinpath("journal").iterdir()) == \
        journal_before
    assert _restart_log(tmp_path) == restarts
    status = rocmseat_cli("remediate", "status", "--state-dir", str(world.state))
    assert status.exit_code == 1 and "r0: no-drafter" in status.stdout


def test_reset_with_a_failing_restart_stays_resetting(rocmseat_cli, tmp_path):
    world = _fresh_log_world(tmp_path)
    _no_drafter(world)
    good = world.seat_file.read_text()
    _set_command(world, [sys.executable, "-c", "import sys; sys.exit('supervisor down')"])
    result = rocmseat_cli("remediate", "reset", "r0", "--state-dir", str(world.state))
    assert result.exit_code == 1, result.stderr
    assert "supervisor down" in result.stderr and '"resetting"' in result.stderr
    status = rocmseat_cli("remediate", "status", "--state-dir", str(world.state))
    assert status.exit_code == 1
    assert "r0: resetting" in status.stdout and "reset's restart failed" in status.stdout
    world.step(3)  # the watcher leaves a resetting replica alone
    assert world.ladder().mode == "resetting"
    world.seat_file.write_text(good)
    again = rocmseat_cli("remediate", "reset", "r0", "--state-dir", str(world.state))
    assert again.exit_code == 0, again.stderr
    assert _restart_log(tmp_path)[-1] == "r0 drafter"
    status = rocmseat_cli("remediate", "status", "--state-dir", str(world.state))
    assert status.exit_code == 0 and "r0: drafter" in status.stdout


def _fake_systemctl(tmp_path: Path) -> Path:
    """A `systemctl` on PATH that logs its argv and fails daemon-reload while a flag file
    exists (tests never touch the host's systemd)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "systemctl"
    script.write_text(f"#!{sys.executable}\nimport os, sys\n"
                      f"open({str(tmp_path / 'systemctl.log')!r}, 'a').write(' '.join("
                      "sys.argv[1:]) + '\\n')\n"
                      f"if sys.argv[1] == 'daemon-reload' and os.path.exists("
                      f"{str(tmp_path / 'reload-fails')!r}):\n"
                      "    sys.exit('Failed to reload daemon: Access denied')\n")
    script.chmod(0o755)
    return bin_dir


def test_reset_with_a_failing_daemon_reload_stays_resetting(rocmseat_cli, tmp_path,
                                                             monkeypatch):
    world = _fresh_log_world(tmp_path)
    _no_drafter(world)
    units = tmp_path / "units"
    text = world.seat_file.read_text()
    head, _, rest = text.partition("restart_command = ")
    world.seat_file.write_text(head + f'unit_dir = "{units}"\n' + rest.partition("\n")[2])
    # the drop-in step 2 wrote beside the unit (its content is launch's; the reset removes it)
    from rocmseat.launch.units import NO_DRAFTER_DROPIN

    dropin = units / "rocmseat-heal-r0.service.d" / NO_DRAFTER_DROPIN
    dropin.parent.mkdir(parents=True)
    dropin.write_text("[Service]\nExecStart=\nExecStart=/usr/local/bin/rocmseat launch x "
                      "--no-drafter\n")
    monkeypatch.setenv("PATH", f"{_fake_systemctl(tmp_path)}:{os.environ['PATH']}")
    (tmp_path / "reload-fails").touch()
    result = rocmseat_cli("remediate", "reset", "r0", "--state-dir", str(world.state))
    assert result.exit_code == 1, result.stderr
    assert "daemon-reload" in result.stderr
    status = rocmseat_cli("remediate", "status", "--state-dir", str(world.state))
    assert status.exit_code == 1 and "r0: resetting" in status.stdout
    assert "daemon-reload" in status.stdout
    calls = (tmp_path / "systemctl.log").read_text().splitlines()
    assert calls == ["daemon-reload"]  # no restart on a configuration systemd did not load
    assert not dropin.exists()
    (tmp_path / "reload-fails").unlink()
    again = rocmseat_cli("remediate", "reset", "r0", "--state-dir", str(world.state))
    assert again.exit_code == 0, again.stderr
    # the drop-in was already gone: the reload runs all the same, then the restart
    assert (tmp_path / "systemctl.log").read_text().splitlines()[1:] == [
        "daemon-reload", "restart rocmseat-heal-r0.service"]
    assert rocmseat_cli("remediate", "status", "--state-dir", str(world.state)).exit_code == 0


def test_reset_racing_step_2_waits_for_the_workers_restart(tmp_path):
    """The worker is inside step 2's no-drafter restart when the operator resets: the reset
    marks the replica "resetting", waits for the worker's restart, then restarts it with its
    drafter; the last restart is the drafter's and the state says so."""
    world = _fresh_log_world(tmp_path)
    world.step(3)
    collapse(world)
    inner = world.runner
    resetter: list[subprocess.Popen] = []

    def racing(argv, **kw):
        if kw["env"]["ROCMSEAT_REMEDIATE_MODE"] == "no-drafter" and not resetter:
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
            resetter.append(subprocess.Popen(
                [sys.executable, "-m", "rocmseat", "remediate", "reset", "r0", "--state-dir",
                 str(world.state)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True))
            deadline = time.monotonic() + 60
            while (_state_doc(world)["ladders"]["r0"]["mode"] != "resetting"
                   and resetter[0].poll() is None):
                assert time.monotonic() < deadline
                time.sleep(0.05)
        return inner(argv, **kw)

    world.edge._run = racing
    world.step(1)  # step 2 starts: the worker restarts without the drafter, the reset races
    _, err = resetter[0].communicate(timeout=120)
    assert resetter[0].returncode == 0, err
    # the reset's drafter restart landed after the worker's: the replica has its drafter
    assert _restart_log(tmp_path) == ["r0 no-drafter", "r0 drafter"]
    world.engines["r0"].restart(alpha=0.8, tokens=400.0)  # what the drafter restart brought
    world.step(3)
    assert world.ladder().mode == "drafter" and world.ladder().pending is None
    assert A.SPEC_BLIND not in world.status().alerts and world.ready().ready


def test_an_action_a_reset_overtook_is_skipped(tmp_path):
    world = _fresh_log_world(tmp_path)
    world.step(3)
    collapse(world)
    actions: list[P.Action] = []
    world.remediator._background = True  # queue the action; run it after the reset
    world.remediator._jobs.put = actions.append  # type: ignore[method-assign]
    world.step(1)
    assert [a.mode for a in actions] == ["no-drafter"]
    from rocmseat.watch.remediate.service import begin_reset

    begin_reset(world.state, "heal", "r0", world.clock())
    world.remediator._execute(actions[0])
    assert _restart_log(tmp_path) == []
    assert any("action-skipped" in x for x in world.lines)


# ----- the shape of state paths --------------------------------------------------------------

def _plant(path: Path, shape: str, tmp_path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if shape == "file":
        path.write_text("x")
    elif shape == "fifo":
        os.mkfifo(path)
    elif shape == "link":
        (tmp_path / "elsewhere").mkdir(exist_ok=True)
        path.symlink_to(tmp_path / "elsewhere")
    elif shape == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()


SHAPES = ("file", "fifo", "link", "socket")


@pytest.mark.parametrize("where", ["remediation", "remediation/heal", "remediation/heal/journal"])
@pytest.mark.parametrize("shape", SHAPES)
def test_a_wrong_shape_where_a_remediation_dir_should_be(rocmseat_cli, tmp_path, where, shape):
    world = World(tmp_path)
    world.step(2)
    target = world.state / where
    if target.exists():
        import shutil

        shutil.rmtree(target)
    _plant(target, shape, tmp_path)
    outside = sorted(p for p in tmp_path.rglob("*"))
    world.step(2)  # the watcher: one line, keeps watching
    assert len([x for x in world.lines if "unusable-state" in x]) == 1, world.lines
    for args in (("status", "--seat", str(world.seat_file)),
                 ("reset", "r0", "--seat", str(world.seat_file))):
        result = rocmseat_cli("remediate", *args, "--state-dir", str(world.state))
        assert result.exit_code == 2, (args, result.stderr)
        assert result.stderr.startswith("rocmseat: error: ") and "Traceback" not in result.stderr
    assert (tmp_path / "elsewhere").exists() is (shape == "link")
    if shape == "link":
        assert list((tmp_path / "elsewhere").iterdir()) == []  # nothing written through it
    assert sorted(p for p in tmp_path.rglob("*")) == outside  # nothing made anywhere


@pytest.mark.parametrize("shape", SHAPES)
def test_read_trusted_state_under_a_wrong_shape(tmp_path, shape):
    from rocmseat.errors import ReadError
    from rocmseat.safeio import read_trusted_state

    _plant(tmp_path / "state" / "preflight", shape, tmp_path)
    path = tmp_path / "state" / "preflight" / "verdict.json"
    if shape == "link":
        (tmp_path / "elsewhere" / "verdict.json").write_text("{}")
    with pytest.raises(ReadError) as caught:
        read_trusted_state(path, trusted_root=tmp_path / "state")
    assert "\n" not in caught.value.message


# ----- children: signal mask, process group; the watcher's stop ------------------------------

def _sigblk(text: str) -> int:
    return int(next(x for x in text.splitlines() if x.startswith("SigBlk:")).split()[1], 16)


def test_children_start_with_an_empty_signal_mask_in_their_own_group():
    """The watcher blocks SIGTERM and SIGINT in every thread (rocmseat.cli.watch); a child of
    any of its threads reads its own /proc/<pid>/status: SigBlk 0, its own process group."""
    seen: dict[str, str] = {}
    # the child reads its own /proc/<pid>/status and says its pid and process group
    argv = [sys.executable, "-c", "import os; print(os.getpid(), os.getpgrp()); "
            "print(open(f'/proc/{os.getpid()}/status').read())"]

    def child() -> None:
        proc = spawn(argv, stdout=subprocess.PIPE)
        seen["spawn"] = proc.communicate(timeout=60)[0].decode()
        seen["run"] = run(argv, timeout_s=60).stdout

    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        assert _sigblk(Path("/proc/thread-self/status").read_text()) != 0
        worker = threading.Thread(target=child)
        worker.start()
        worker.join(60)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    assert _sigblk(seen["spawn"]) == 0 and _sigblk(seen["run"]) == 0
    for text in seen.values():
        pid, pgid = text.splitlines()[0].split()
        assert pid == pgid  # the leader of its own process group


def test_a_restart_command_the_watcher_started_gets_sigterm_when_it_stops(tmp_path):
    """SIGTERM to the watcher during a restart: its restart command is ended (SIGTERM to its
    group) and waited for, and the log says so."""
    world = World(tmp_path)
    pidfile = tmp_path / "restart.pid"
    _set_command(world, [sys.executable, "-c",
                         f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid()));"
                         " time.sleep(600)"])
    remediator = Remediator(
        Setup(world.seat, world.seat_file, world.state, "on", "gpu07", world.edge.records,
              max_age_s=3 * INTERVAL), world.edge, log=world.lines.append, clock=world.clock,
        background=True)
    world.remediator = remediator
    world.step(3)
    collapse(world)
    world.step(1)
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    remediator.close()
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(
        f"/proc/{pid}/status").read_text()
    said = [x for x in world.lines if x.startswith("rocmseat-remediate stop")]
    assert said[0].startswith("rocmseat-remediate stop replica=r0 action=") and "ended=1" in \
        said[1], said


# ----- the journal's growth ------------------------------------------------------------------

def test_a_24_hour_flap_journals_the_refusal_once_per_episode(tmp_path):
    """A page flapping between collapsed and healthy every two evaluations on a replica with no
    placement record, for 24 h at the default interval (10 s): 8,640 evaluations."""
    world = World(tmp_path, recorded=False)
    world.step(3)
    healthy = world.status()
    collapsed = dataclasses.replace(healthy, alerts=(A.SPEC_DRAFTER_DEAD,))

    class View:
        statuses = [healthy]
        evaluated_at_s: float | None = None
        targets = world.watcher.targets

        def set_targets(self, targets):
            return (0, 0, 0)

        def set_alert(self, replica, alert, on, details):
            pass

    view = View()
    evaluations = 24 * 3600 // 10
    for n in range(evaluations):
        world.clock.tick(10.0)
        view.evaluated_at_s = world.clock()
        view.statuses = [collapsed if n % 2 == 0 else healthy]
        world.remediator.after_step(view)
    folder = journal.seat_dir(world.state, "heal") / "journal"
    files = list(folder.iterdir())
    size = sum(p.stat().st_size for p in files)
    print(f"24 h flap at 10 s: {evaluations} evaluations, {len(files)} journal files, "
          f"{size} bytes")
    assert len(files) == 1 and size < 4096
    assert world.outcomes()[0][3].startswith("refused: r0 has no placement record")


def test_the_journal_is_pruned_by_count_and_age_keeping_the_current_ladder(tmp_path):
    world = World(tmp_path)
    meta = world.remediator.meta
    now = world.clock()
    for i in range(300):
        journal.write_record(world.state, meta, P.StepRecord(
            "r0", None, "none", f"refused: {i}", now - 40 * 86_400 + i * 100))
    for i in range(150):
        journal.write_record(world.state, meta, P.StepRecord("r0", None, "none", f"old {i}",
                                                             now - 3600 + i))
    ladder = P.Ladder(mode="no-drafter", since_s=now - 1000, ladder_started_s=now - 3600)
    state = P.State({"r0": ladder})
    gone = journal.prune(world.state, "heal", state, now)
    left = journal.read_records(world.state, "heal", last=1000)[0]
    # 300 older than 30 days went; the 150 of the running ladder stay although over 100
    assert gone == 300 and len(left) == 150
    gone = journal.prune(world.state, "heal", P.State(), now)
    assert gone == 50 and len(journal.read_records(world.state, "heal", last=1000)[0]) == 100


# ----- two watchers on one seat --------------------------------------------------------------

def test_two_watchers_count_the_verification_drafts_once(tmp_path):
    world = World(tmp_path)
    second_lines: list[str] = []
    second = Remediator(
        Setup(world.seat, world.seat_file, world.state, "on", "gpu07", world.edge.records,
              max_age_s=3 * INTERVAL), world.edge, log=second_lines.append, clock=world.clock,
        background=False)
    step = world.step

    def both(n: int = 1) -> None:
        for _ in range(n):
            step(1)
            second.after_step(world.watcher)

    world.step = both  # type: ignore[method-assign]
    world.step(3)
    collapse(world)
    world.step(1)  # step 1 starts (one action: the lock holds)
    world.step(1)  # the restart is seen
    world.step(1)  # 100 drafts of the new engine: not enough for verify_drafts = 200
    assert world.outcomes()[-1][3] == "started", world.outcomes()
    world.step(1)
    done = world.journal()[-1]
    assert done["outcome"] == "recovered" and done["figures"]["drafts"] == 200
    assert world.restarts == [("r0", "drafter")]
    assert [x for x in second_lines if "follower" in x]


# ----- repeated warnings ---------------------------------------------------------------------

def test_a_full_disk_says_state_not_saved_once_per_change(tmp_path, monkeypatch):
    world = World(tmp_path, recorded=False)
    world.step(3)
    collapse(world)

    def full(*args, **kw):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(journal, "save_state", full)
    world.step(20)
    said = [x for x in world.lines if "state-not-saved" in x]
    assert len(said) == 1 and "No_space_left_on_device" in said[0], said
    monkeypatch.undo()
    world.step(3)  # saved again: nothing more said
    assert len([x for x in world.lines if "state-not-saved" in x]) == 1


@pytest.mark.parametrize("shape", SHAPES)
def test_the_preflight_readers_under_a_wrong_shape_state_dir(rocmseat_cli, tmp_path, shape):
    """`<state>/preflight` of the wrong shape: `preflight --json` and `--format npd --cached`
    say so in one line and exit 2 (they exited 3 on NotADirectoryError)."""
    from tests.conftest import FIXTURES

    state = tmp_path / "state"
    _plant(state / "preflight", shape, tmp_path)
    x99 = str(FIXTURES / "sysfs" / "x99-r9700")
    cached = rocmseat_cli("preflight", "--format", "npd", "--cached", "--sysfs-root", x99,
                          "--state-dir", str(state))
    assert cached.exit_code == 2, cached.stderr
    assert cached.stdout.startswith("UNKNOWN: untrusted preflight: is a ")
    assert len(cached.stdout.splitlines()) == 1 and "Traceback" not in cached.stderr
    full = rocmseat_cli("preflight", "--json", "--sysfs-root", x99, "--state-dir", str(state))
    assert full.exit_code == 2, full.stderr
    assert "internal error" not in full.stderr and "Traceback" not in full.stderr
    json.loads(full.stdout)


@pytest.mark.parametrize("case", random.Random(SEED).sample(range(len(TAMPER)), 4))
def test_the_watch_process_keeps_watching_on_a_tampered_state(tmp_path, case):
    """`rocmseat watch SEAT --remediate` as a process (its own threads, signal handling and
    exporter) on a tampered state: one line naming the file and the key, /healthz answers,
    SIGTERM ends it with exit 0 (a damaged state once ended it with exit 3)."""
    import re

    import httpx

    name, path, raw = TAMPER[case]
    world = World(tmp_path)
    doc = _running(world)
    world.remediator.close()  # the in-test watcher lets go of the judge's lock
    state_file = journal.seat_dir(world.state, "heal") / "state.json"
    state_file.write_text(_put(doc, path, raw))
    log = tmp_path / "watch.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rocmseat", "watch", str(world.seat_file), "--remediate",
             "--interval", "0.2", "--exporter-listen", "127.0.0.1:0", "--state-dir",
             str(world.state), "--sysfs-root", str(tmp_path / "sys")],
            stdout=out, stderr=subprocess.STDOUT, env={
                **os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    try:
        deadline = time.monotonic() + 60
        while "unusable-state" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        port = re.search(r"exporter=127\.0\.0\.1:(\d+)", log.read_text()).group(1)
        for _ in range(5):  # several evaluations later: still serving
            time.sleep(0.3)
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    said = [x for x in log.read_text().splitlines() if "unusable-state" in x]
    assert len(said) == 1 and str(state_file) in said[0] and "key_'" in said[0], name
