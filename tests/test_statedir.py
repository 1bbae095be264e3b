"""The state dir's layout has one spelling (rocmseat/statedir.py; docs/architecture.md, "State"):
the names stay what they were on disk, and no other module of the package spells them."""

from __future__ import annotations

import ast
from pathlib import Path

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
