"""The state dir's layout has one spelling (rocmseat/statedir.py; docs/architecture.md, "State"):
the names stay what they were on disk, and no other module of the package spells them."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from rocmseat.statedir import ReplicaDir, StateDir
from tests.conftest import REPO

FILE_NAMES = {"verdict.json", "error-readings.json", "placement.json", "startup.json",
              "preflight-sysfs.json", "state.json", ".launch.lock", ".action.lock",
              ".judge.lock"}
DIR_NAMES = {"preflight", "watch", "errors", "seats", "history", "remediation", "journal", ".lock"}


def test_the_layout_is_the_one_on_disk():
    root = Path("/s")
    state = StateDir(root)
    assert state.verdict == root / "preflight" / "verdict.json"
    assert state.readings == root / "preflight" / "error-readings.json"
    assert state.baseline("r0%3A8000") == root / "watch" / "r0%3A8000.json"
    assert state.errors == root / "errors"
    replica = state.replica("demo", "r0")
    assert replica == ReplicaDir(root / "seats" / "demo" / "r0")
    assert replica.placement == root / "seats" / "demo" / "r0" / "placement.json"
    assert replica.startup == root / "seats" / "demo" / "r0" / "startup.json"
    assert replica.history == root / "seats" / "demo" / "r0" / "history"
    assert replica.preflight_sysfs == root / "seats" / "demo" / "r0" / "preflight-sysfs.json"
    assert replica.report_lock == root / "seats" / "demo" / "r0" / ".lock"
    assert replica.launch_lock == root / "seats" / "demo" / "r0" / ".launch.lock"
    assert state.remediation_state("demo") == root / "remediation" / "demo" / "state.json"
    assert state.remediation_journal("demo") == root / "remediation" / "demo" / "journal"
    assert state.remediation_lock("demo") == root / "remediation" / "demo" / ".lock"
    assert state.remediation_action_lock("demo") == root / "remediation" / "demo" / ".action.lock"
    assert state.remediation_judge_lock("demo") == root / "remediation" / "demo" / ".judge.lock"


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def spellings(path: Path, base: Path = REPO) -> list[str]:
    """A state file's name as a string of its own, or a state dir's name joined onto a path."""
    tree = ast.parse(path.read_text())
    shown = path.relative_to(base)
    docs = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and id(node) not in docs
                and node.value in FILE_NAMES):
            out.append(f"{shown}:{node.lineno}: {node.value!r}")
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                and isinstance(node.right, ast.Constant) and node.right.value in DIR_NAMES):
            out.append(f"{shown}:{node.lineno}: / {node.right.value!r}")
    return out


def test_no_other_module_spells_the_layout():
    found = [hit for path in sorted((REPO / "rocmseat").rglob("*.py"))
             if path.name != "statedir.py" or path.parent.name != "rocmseat"
             for hit in spellings(path)]
    assert found == [], "\n".join(found)


def test_the_check_sees_a_spelling(tmp_path):
    # the check above can fail: a module that names a state file or dir itself is caught, a
    # docstring or a message that mentions one is not
    planted = tmp_path / "planted.py"
    planted.write_text('"""Writes startup.json."""\n'
                       'def f(d):\n'
                       '    """Reads placement.json."""\n'
                       '    print("no placement.json is read")\n'
                       '    return d / "remediation" / "x", d / "startup.json"\n')
    assert spellings(planted, tmp_path) == ["planted.py:5: / 'remediation'",
                                            "planted.py:5: 'startup.json'"]


# --- the one door (issue 32): nothing but rocmseat/statedir.py opens, makes, parses, writes,
# locks, lists or removes a file under the state dir. An ast scan, per function: a value is a
# state path when it comes from the layout (StateDir(...), ReplicaDir(...), a function that
# returns a state file's path) or from a name that holds the state dir (state_dir, state_root,
# record.state_dir ...), through assignments, `/`, attributes, method calls and for-loops; a
# sink is any call that opens, makes, reads, parses, writes, lists or removes (builtins, os,
# shutil, pathlib, json, and the helpers under the door: safeio's readers, atomic's writers and
# locks) with such a value among its arguments or as its receiver.
STATE_NAMES = {"state_dir", "state_root", "_state_dir"}
STATE_MAKERS = {"StateDir", "ReplicaDir", "baseline_path", "state_path", "verdict_path",
                "replica_state_dir", "seat_state_dir", "_result_path", "default_state_dir"}
SINK_FUNCS = {"open", "read_trusted_state", "read_regular_text", "atomic_write_json",
              "atomic_write_text", "atomic_write_bytes", "write_into", "exclusive_lock",
              "make_dirs", "check_write_dirs", "loads", "load", "makedirs", "mkdir", "mkfifo"}
# the writers' leading arguments that say where they write (the rest is what they write)
PATH_ARGS = {"atomic_write_json": 1, "atomic_write_text": 1, "atomic_write_bytes": 1,
             "write_into": 2}
SINK_METHODS = {"open", "mkdir", "read_text", "write_text", "read_bytes", "write_bytes",
                "touch", "loads", "load",
                # listing and removing (pathlib's): the door's names() and remove() do it
                "iterdir", "glob", "rglob", "walk", "unlink", "rmdir", "rename"}
# os's and shutil's listing and removing calls, caught only as os.x / shutil.x or a bare x
# (`remove` and `replace` are also the door's StateDir.remove, list.remove and str.replace)
MODULE_SINKS = {"listdir", "scandir", "walk", "fwalk", "unlink", "remove", "rmdir",
                "removedirs", "rename", "renames", "replace", "rmtree"}
# the door itself, and nothing else (remediation's state, journal and locks joined it: issue 32)
OUTSIDE_THE_DOOR = ("rocmseat/statedir.py",)


def _names(node: ast.AST) -> set[str]:
    """Every name and attribute name a value is made from."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
    return found


# fields of a placement record that are no path (the gate's arm takes its port and URL from it)
NOT_PATHS = {"port", "base_url", "url", "name", "index"}


def _walk_values(node: ast.AST):
    """ast.walk, but not into the door's own `.read(...)` (what it returns is a document's
    value, not a path: a figure read from startup.json sizes the gate's battery) nor into a
    record's fields that are no path."""
    todo = [node]
    while todo:
        sub = todo.pop()
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) \
                and sub.func.attr == "read":
            continue
        if isinstance(sub, ast.Attribute) and sub.attr in NOT_PATHS:
            continue
        yield sub
        todo.extend(ast.iter_child_nodes(sub))


def _state_value(node: ast.AST, tainted: set[str]) -> bool:
    for sub in _walk_values(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            called = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else "")
            if called in STATE_MAKERS:
                return True
        if isinstance(sub, ast.Name) and sub.id in tainted:
            return True
        if isinstance(sub, ast.Attribute) and sub.attr in STATE_NAMES:
            return True
    return False


def _targets(node: ast.AST) -> set[str]:
    """The names an assignment binds (not `record` of `record.field = ...`)."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Tuple | ast.List):
        return {name for item in node.elts for name in _targets(item)}
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return set()


def _tainted(func: ast.AST, params: set[str] | None = None) -> set[str]:
    """The names of a function that hold a state path (to a fixpoint: assignments in any order);
    `params`: its parameters some caller in the module hands a state path."""
    tainted = set(STATE_NAMES) | (params or set())
    while True:
        before = len(tainted)
        for node in ast.walk(func):
            assigned = isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign)
            if assigned and node.value is not None:
                if _state_value(node.value, tainted):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        tainted |= _targets(target)
            elif isinstance(node, ast.For | ast.comprehension) and _state_value(node.iter, tainted):
                tainted |= _targets(node.target)
            elif isinstance(node, ast.withitem) and node.optional_vars is not None \
                    and _state_value(node.context_expr, tainted):
                tainted |= _targets(node.optional_vars)
            elif isinstance(node, ast.NamedExpr) and _state_value(node.value, tainted):
                tainted |= _targets(node.target)
        if len(tainted) == before:
            return tainted


def _handed(tree: ast.Module, scopes: list[ast.AST]) -> dict[int, set[str]]:
    """Per function of the module (by id), the parameters a caller in the module hands a state
    path (positionally or by keyword), to a fixpoint: a helper that opens what it is given is
    caught where it opens it."""
    functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions.setdefault(node.name, []).append(node)
    handed: dict[int, set[str]] = {}
    while True:
        before = sum(len(v) for v in handed.values())
        for scope in scopes:
            tainted = _tainted(scope, handed.get(id(scope), set()))
            for call in (n for n in ast.walk(scope) if isinstance(n, ast.Call)):
                func = call.func
                name = func.id if isinstance(func, ast.Name) else (
                    func.attr if isinstance(func, ast.Attribute) else "")
                for target in functions.get(name, []):
                    names = [a.arg for a in target.args.posonlyargs + target.args.args]
                    if names and names[0] in ("self", "cls") and isinstance(func, ast.Attribute):
                        names = names[1:]
                    got = {names[i] for i, a in enumerate(call.args)
                           if i < len(names) and _state_value(a, tainted)}
                    got |= {k.arg for k in call.keywords
                            if k.arg is not None and _state_value(k.value, tainted)}
                    if got:
                        handed.setdefault(id(target), set()).update(got)
        if sum(len(v) for v in handed.values()) == before:
            return handed


def door_breaches(path: Path, base: Path = REPO) -> list[str]:
    tree = ast.parse(path.read_text())
    shown = path.relative_to(base)
    out = []
    scopes: list[ast.AST] = [
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    top = ast.Module(body=[n for n in tree.body if not isinstance(
        n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)], type_ignores=[])
    params = _handed(tree, [top, *scopes])
    for scope in [top, *scopes]:
        tainted = _tainted(scope, params.get(id(scope), set()))
        for node in ast.walk(scope):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            args = [*node.args, *(k.value for k in node.keywords)]
            called = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else "")
            if called in PATH_ARGS:  # a writer: where it writes counts, not what (a report's text)
                args = [*node.args[:PATH_ARGS[called]],
                        *(k.value for k in node.keywords if k.arg in ("path", "directory"))]
            if isinstance(func, ast.Name) and (func.id in SINK_FUNCS or func.id in MODULE_SINKS):
                hit = any(_state_value(a, tainted) for a in args)
            elif isinstance(func, ast.Attribute) and func.attr in MODULE_SINKS \
                    and isinstance(func.value, ast.Name) and func.value.id in ("os", "shutil"):
                hit = any(_state_value(a, tainted) for a in args)
            elif isinstance(func, ast.Attribute) and (func.attr in SINK_FUNCS
                                                      or func.attr in SINK_METHODS):
                hit = _state_value(func.value, tainted) or any(
                    _state_value(a, tainted) for a in args)
            else:
                continue
            if hit:
                out.append(f"{shown}:{node.lineno}: {ast.unparse(node)[:100]}")
    return sorted(set(out))


def test_nothing_but_the_door_touches_state():
    found = []
    for path in sorted((REPO / "rocmseat").rglob("*.py")):
        inside = path.relative_to(REPO).as_posix()
        if inside.startswith(OUTSIDE_THE_DOOR):
            continue
        found += door_breaches(path)
    assert found == [], "\n".join(found)


def test_the_door_check_sees_a_breach(tmp_path):
    # the check above can fail: each way of touching a state file by hand is caught (listing
    # and unlinking too), however the path reached the call; the door itself (its names() and
    # remove() among it), a list's remove, a str's replace and a path that is not the state
    # dir's are not
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import json, os\n"
        "def f(state_dir, cache_root, record):\n"
        "    folder = StateDir(state_dir).baselines\n"
        "    folder.mkdir(parents=True, exist_ok=True)\n"
        "    path = baseline_path(state_dir, 'k')\n"
        "    doc = json.loads(read_regular_text(path, limit_bytes=1))\n"
        "    with open(ReplicaDir(record.state_dir).startup) as handle:\n"
        "        handle.read()\n"
        "    for entry in sorted(os.listdir(folder)):\n"
        "        (folder / entry).read_text()\n"
        "    atomic_write_json(state_dir / 'x', {})\n"
        "    StateDir(state_dir).read(BASELINE, name='k')\n"
        "    (cache_root / 'manifest.json').read_text()\n"
        "    names = [p.name for p in (folder / 'sub').iterdir()]\n"
        "    os.unlink(path)\n"
        "    StateDir(state_dir).remove(BASELINE, name='k'), StateDir(state_dir).names(WATCH_DIR)\n"
        "    names.remove('k'), str(path).replace('/', '-'), os.unlink(cache_root / 'x')\n"
        "    _private(StateDir(state_dir).errors, cache_root)\n"
        "    return doc\n"
        "def _private(folder, other):\n"
        "    folder.mkdir(mode=0o700)\n"
        "    shutil.rmtree(folder)\n"
        "    other.mkdir()\n")
    assert [line.split(": ", 1)[0] for line in door_breaches(planted, tmp_path)] == [
        "planted.py:10", "planted.py:11", "planted.py:14", "planted.py:15", "planted.py:21",
        "planted.py:22", "planted.py:4", "planted.py:6", "planted.py:6", "planted.py:7",
        "planted.py:9"]


# --- umask 002 (issue 32, item 1): every document written reads back after a restart --------
# Under umask 002 a plain mkdir makes 0775 dirs, and a state file in one is refused by its own
# reader (StrictModes: writable by group). The writer runs in one process under umask 002 (a
# crash log first: it makes the state dir), the readers in a fresh one (a restart): the watch
# baseline, the placement, the slow-spawn history, the canary's baselines, the startup report
# and its history, the error readings, remediation's state and journal (its lock and judge's
# lock taken on the way, in a state dir of their own: remediation is the first to make it).
UMASK_SCENARIO = r'''
import os, sys, datetime as dt
from pathlib import Path
os.umask(0o002)
phase, state = sys.argv[1], Path(sys.argv[2])
healing = state.parent / "healing" / "state"  # made first by remediation (and its parent)
from rocmseat.launch.flow import usable_state_dir
from rocmseat.launch.report import previous_start, save_report
from rocmseat.placement.place import place
from rocmseat.placement.recorded import read_recorded, write_recorded
from rocmseat.preflight.windows import Stamp, load_ring, save_readings
from rocmseat.seat.canary_schema import Canary
from rocmseat.seat.load import load_seat
from rocmseat.watch.baseline import (check_state_dir_writable, learned_baseline, load_baseline,
                                     save_baseline)
from rocmseat.watch.canary_service import CanaryService
from rocmseat.watch.remediate import journal, policy as P
from rocmseat.watch.spawn import SpawnWatch
from tests.launch.test_report import report_at
from tests.placement.test_recorded import SEAT, X99
seat = load_seat(SEAT)
lines = []
canary = CanaryService(Canary(enabled=True, prompts=["a", "b"]), [], statuses=lambda: [],
                       set_alert=lambda *a: None, state_dir=state, seat="demo", log=lines.append)
spawn = SpawnWatch(state_dir=state, prefix="demo", log=lines.append)
baseline = learned_baseline(drafts=1e4, per_pos=(8e3, 6.4e3), accepted=14_400.0, windows=9,
                            key="k1", now_s=1_790_000_000.0)
meta = journal.Meta("demo", "/etc/rocmseat/demo.toml", "gpu07", "on")
ladder_state = P.State(ladders={"r1": P.Ladder("no-drafter", 1_790_000_000.0, None, "k1", (), "",
                                               ladder_started_s=1_790_000_000.0)})
if phase == "write":
    # a crash first (it made the state dir's parents 0775 with a plain mkdir -p)
    os.environ.pop("ROCMSEAT_ERROR_LOG", None)
    os.environ["ROCMSEAT_STATE_DIR"] = str(state)
    from rocmseat.cli.main import _write_crash_log
    assert _write_crash_log(["x"], "trace").parent == state / "errors"
    check_state_dir_writable(state)
    save_baseline(state, "demo.r1", baseline)
    record = place(seat, sysfs_root=X99, state_root=state, require_node=True).pick("r1")
    usable_state_dir(record, state)
    write_recorded(record)
    spawn._save("r1", {"k1": {4: [19.5, 20.0]}})
    canary._save("r1", "k1", [0.5, None])
    save_report(state, report_at(25, "GPU KV cache size: 600,000 tokens"))
    print(save_readings(state, X99, None, {"0000:05:00.0": {"aer.badtlp": 3}},
                        Stamp("2026-11-25T10:00:00Z")))
    assert journal.try_judge(healing, "demo") is not None
    with journal.locked(healing, "demo"), journal.acting(healing, "demo", timeout_s=5.0):
        journal.save_state(healing, meta, ladder_state, 1_790_000_100.0)
        journal.write_record(healing, meta, P.StepRecord("r1", 2, P.RESTART_NO_DRAFTER,
                                                       "serving without the drafter",
                                                       1_790_000_100.0))
    sys.exit(0)
print("baseline", load_baseline(state, "demo.r1") == (baseline, None))
recorded = read_recorded(seat, state)
print("placement", [r.replica for r in recorded.records], dict(recorded.problems))
print("spawn history", spawn._load("r1"))
print("canary baselines", canary._load("r1", "k1"))
previous, problems = previous_start(state, "s", "r0")
print("startup history", previous is not None and previous.kv_cache_tokens, problems)
loaded = load_ring(state, X99, None)
ring = loaded.ring
print("error readings", ring is not None and dict(ring.devices["0000:05:00.0"][0].counters),
      loaded.problem)
print("remediation state", journal.load_state(healing, "demo") == (ladder_state, meta))
records, problems = journal.read_records(healing, "demo")
print("remediation journal", [(r["replica"], r["step"], r["outcome"]) for r in records], problems)
print("said", lines)
modes = sorted({f"{oct(p.stat().st_mode & 0o777)}" for p in [
    state, *state.rglob("*"), healing.parent, healing, *healing.rglob("*")] if p.is_dir()})
print("dir modes", modes)
'''


def test_under_umask_002_every_document_reads_back_after_a_restart(tmp_path):
    import subprocess
    import sys

    state = tmp_path / "state"
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(phase: str) -> str:
        proc = subprocess.run([sys.executable, "-c", UMASK_SCENARIO, phase, str(state)],
                              capture_output=True, text=True, timeout=120, env=env, cwd=REPO)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert run("write") == "None\n"  # the readings saved, no problem
    assert run("read").splitlines() == [
        "baseline True",
        "placement ['r1'] {}",
        "spawn history {'k1': {4: [19.5, 20.0]}}",
        "canary baselines [0.5, None]",
        "startup history 600000 []",
        "error readings {'aer.badtlp': 3} None",
        "remediation state True",
        "remediation journal [('r1', 2, 'serving without the drafter')] []",
        "said []",
        "dir modes ['0o700', '0o755']",  # errors/ and remediation/ are 0700
    ]


# --- the door's own rules ----------------------------------------------------------------------
def _doc():
    from rocmseat.located import load_json
    from rocmseat.statedir import WATCH_FILE, Document

    return Document(WATCH_FILE, "rocmseat.test/v1", load_json, limit_bytes=64)


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "a\0b"])
def test_a_part_never_leaves_its_directory(tmp_path, name):
    from rocmseat.errors import ConfigError

    with pytest.raises(ConfigError, match="is not a state file name"):
        StateDir(tmp_path).path(_doc(), name=name)


def test_write_stamps_the_schema_and_read_gives_it_back(tmp_path):
    state = StateDir(tmp_path / "state")
    assert state.read(_doc(), name="k") is None  # no file
    path = state.write(_doc(), {"schema": "forged", "a": 1}, name="k")
    assert path == tmp_path / "state" / "watch" / "k.json"
    assert state.read(_doc(), name="k") == {"a": 1, "schema": "rocmseat.test/v1"}
    path.write_text('{"a": "' + "x" * 100 + '"}')
    from rocmseat.errors import ReadError

    with pytest.raises(ReadError, match=f"^{path}: .*64"):  # the document's cap
        state.read(_doc(), name="k")


def test_the_door_never_goes_through_a_link(tmp_path):
    from rocmseat.atomic import WriteRefused
    from rocmseat.safeio import UntrustedState

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "watch").symlink_to(elsewhere)
    state = StateDir(tmp_path / "state")
    with pytest.raises(UntrustedState, match="is a symlink"):
        state.write(_doc(), {}, name="k")
    with pytest.raises(UntrustedState, match="is a symlink"):
        state.read(_doc(), name="k")
    assert list(elsewhere.iterdir()) == []
    (tmp_path / "state" / "watch").unlink()
    (tmp_path / "state" / "watch").mkdir()
    (tmp_path / "state" / "watch" / "k.json").symlink_to(elsewhere / "planted.json")
    with pytest.raises(WriteRefused, match="is a symlink"):
        state.write(_doc(), {}, name="k")
    assert list(elsewhere.iterdir()) == []


def test_hold_is_one_holder_and_never_a_link_or_a_fifo(tmp_path):
    from rocmseat.atomic import WriteRefused
    from rocmseat.statedir import JUDGE_LOCK

    state = StateDir(tmp_path / "state")
    fd = state.hold(JUDGE_LOCK, seat="demo")
    assert fd is not None
    try:
        assert state.hold(JUDGE_LOCK, seat="demo") is None  # held: another open file's flock
    finally:
        os.close(fd)
    again = state.hold(JUDGE_LOCK, seat="demo")  # released with its descriptor
    assert again is not None
    os.close(again)
    path = state.remediation_judge_lock("demo")
    assert stat_mode(path) == 0o600 and stat_mode(path.parent) & 0o022 == 0
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):  # ELOOP: the caller names it
        state.hold(JUDGE_LOCK, seat="demo")
    assert not (tmp_path / "elsewhere").exists()
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(WriteRefused, match="not a lock file"):
        state.hold(JUDGE_LOCK, seat="demo")


def stat_mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_names_lists_a_real_dir_of_the_layout_and_never_through_a_link(tmp_path):
    from rocmseat.safeio import UntrustedState
    from rocmseat.statedir import HISTORY_DIR, WATCH_DIR

    state = StateDir(tmp_path / "state")
    assert state.names(WATCH_DIR) is None  # no dir
    watch = tmp_path / "state" / "watch"
    watch.mkdir(parents=True)
    for name in ("b.json", "a.json", ".a.json.x.tmp", "c.txt"):
        (watch / name).write_text("{}")
    assert state.names(WATCH_DIR) == ["a.json", "b.json", "c.txt"]  # hidden ones left out
    assert state.names(WATCH_DIR, suffix=".json") == ["a.json", "b.json"]
    (tmp_path / "state" / "seats").write_text("")  # a file where a dir should be
    with pytest.raises(UntrustedState, match="where a directory should be"):
        state.names(HISTORY_DIR, seat="s", replica="r0")
    (tmp_path / "state" / "seats").unlink()
    (tmp_path / "state" / "seats").symlink_to(tmp_path)  # a link on the way
    with pytest.raises(UntrustedState, match="is a symlink"):
        state.names(HISTORY_DIR, seat="state", replica="watch")
    watch.rename(tmp_path / "elsewhere")
    watch.symlink_to(tmp_path / "elsewhere")  # the dir itself a link
    with pytest.raises(UntrustedState, match="is a symlink; state is never listed through a link"):
        state.names(WATCH_DIR)
    watch.unlink()
    watch.write_text("")
    assert state.names(WATCH_DIR) is None  # a file: no dir there


def test_remove_unlinks_a_file_or_a_link_itself_and_nothing_else(tmp_path):
    from rocmseat.errors import ConfigError
    from rocmseat.safeio import UntrustedState
    from rocmseat.statedir import WATCH_FILE

    state = StateDir(tmp_path / "state")
    assert state.remove(WATCH_FILE, name="k") is False  # no dir, no file
    state.write(_doc(), {}, name="k")
    assert state.remove(WATCH_FILE, name="k") is True
    assert state.remove(_doc(), name="k") is False  # gone already
    watch = tmp_path / "state" / "watch"
    outside = tmp_path / "outside.json"
    outside.write_text("keep")
    (watch / "link.json").symlink_to(outside)
    assert state.remove(WATCH_FILE, name="link") is True  # the link, never its target
    assert outside.read_text() == "keep" and not os.path.lexists(watch / "link.json")
    os.mkfifo(watch / "fifo.json")
    (watch / "dir.json").mkdir()
    assert state.remove(WATCH_FILE, name="fifo") is False
    assert state.remove(WATCH_FILE, name="dir") is False
    assert (watch / "fifo.json").exists() and (watch / "dir.json").is_dir()
    watch.chmod(0o777)
    with pytest.raises(ConfigError, match="is writable by every user"):
        state.remove(WATCH_FILE, name="fifo")
    watch.chmod(0o755)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "k.json").write_text("keep")
    watch.rename(tmp_path / "old-watch")
    watch.symlink_to(elsewhere)
    with pytest.raises(UntrustedState, match="is a symlink"):
        state.remove(WATCH_FILE, name="k")
    assert (elsewhere / "k.json").read_text() == "keep"
