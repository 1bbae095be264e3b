"""The code base's own rules: ruff and mypy clean, only one module spells the real /sys, and the
rooms depend downward only (the layers contract)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def _tool(name: str) -> list[str]:
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return [sys.executable, "-m", name]


def test_ruff_clean() -> None:
    proc = subprocess.run(
        [*_tool("ruff"), "check", "rocmseat", "tests", "bench"],
        cwd=REPO, capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_clean() -> None:
    proc = subprocess.run([*_tool("mypy")], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_only_fs_module_spells_sys() -> None:
    pattern = re.compile(r"""["']/sys(/|["'])""")
    offenders = [
        str(path.relative_to(REPO))
        for path in (REPO / "rocmseat").rglob("*.py")
        if path.name != "fs.py" and pattern.search(path.read_text())
    ]
    assert offenders == []


# Modules allowed their own spelling, by stem: the kernel log's rule keeps TAB and LF in a
# record; that room is issue 32's kernel-log branch's, so the lead empties this after merging.
_CONTROL_RULE_ELSEWHERE = {"kernlog"}


def test_only_text_module_spells_the_control_character_rule() -> None:
    # docs/architecture.md, "The house": one control-character rule (rocmseat/text.py); a
    # class range through US, DEL or the last C1 character is a second spelling of it
    pattern = re.compile(r"-\\x(?:1f|9f)|\\x7f")
    offenders = sorted(
        str(path.relative_to(REPO))
        for path in (REPO / "rocmseat").rglob("*.py")
        if path.name != "text.py" and path.stem not in _CONTROL_RULE_ELSEWHERE
        and pattern.search(path.read_text())
    )
    assert offenders == []


def _lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` over the `rocmseat` package under `tree` with the contract of its
    pyproject.toml ([tool.importlinter]); no cache, so every run reads the code afresh."""
    if shutil.which("lint-imports") is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        ["lint-imports", "--no-cache"], cwd=tree, env=env, capture_output=True, text=True,
    )


def test_rooms_depend_downward_only() -> None:
    # docs/architecture.md, "The house": the layers contract of pyproject.toml, imports inside
    # functions included (grimp reads every import statement of a module)
    proc = _lint_imports(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rooms depend downward only KEPT" in proc.stdout


def test_the_layers_contract_fails_on_a_lazy_back_edge(tmp_path: Path) -> None:
    # the same contract over a copy of the package where a foundation module imports the cache
    # room inside a function: the run must fail and name the edge
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(REPO / "rocmseat", tmp_path / "rocmseat",
                    ignore=shutil.ignore_patterns("__pycache__"))
    text = tmp_path / "rocmseat" / "text.py"
    text.write_text(text.read_text() + "\n\ndef _back() -> None:\n"
                    "    from rocmseat.cache.key import normalise_flag  # noqa: F401\n")
    proc = _lint_imports(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "rocmseat.text is not allowed to import rocmseat.cache" in proc.stdout
    assert "rocmseat.text -> rocmseat.cache.key" in proc.stdout


# The functions past ruff's branch/statement limits, each with a `noqa` on its `def` line: the
# debt docs/architecture.md ("Function size") lists. It may shrink; it may not grow.
SIZE_EXCEPTIONS = {
    "rocmseat/launch/flow.py:_launch_locked", "rocmseat/runner.py:_collect",
    "rocmseat/speculation/advise/advice.py:from_gate",
    "rocmseat/speculation/advise/advice.py:render",
    "rocmseat/speculation/gate/arms.py:run_arm", "rocmseat/speculation/plot.py:advise_picture",
    "rocmseat/watch/exporter.py:collect",
    "rocmseat/watch/metrics.py:_read", "rocmseat/watch/service.py:run_service",
    "rocmseat/watch/uevents.py:node_events",
}


def test_the_function_size_exceptions_are_the_listed_ones() -> None:
    found = set()
    pattern = re.compile(r"^\s*def (\w+)\(.*# noqa: [^#]*PLR09(?:12|15)")
    for path in sorted((REPO / "rocmseat").rglob("*.py")):
        for line in path.read_text().splitlines():
            match = pattern.match(line)
            if match:
                found.add(f"{path.relative_to(REPO).as_posix()}:{match.group(1)}")
    assert found == SIZE_EXCEPTIONS
    text = (REPO / "docs" / "architecture.md").read_text()
    for entry in SIZE_EXCEPTIONS:
        assert entry.split(":")[1] in text, entry


# The functions of rocmseat/ that still take 10 or more parameters (self/cls aside; *args and
# **kwargs one each): the debt docs/architecture.md ("Function size") names. It may shrink; it
# may not grow. It is empty: every such function takes a parameter object (issue 23).
MAX_PARAMETERS = 9
PARAMETER_EXCEPTIONS: set[str] = set()


def _parameter_counts(root: Path) -> dict[str, int]:
    """`path:qualified name` -> its parameter count, for every function under `root`."""
    import ast

    counts: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", where)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                args = child.args
                names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
                counts[f"{where}:{prefix}{child.name}"] = len(
                    [n for n in names if n not in ("self", "cls")])
                visit(child, f"{prefix}{child.name}.", where)
            else:
                visit(child, prefix, where)

    for path in sorted(root.rglob("*.py")):
        visit(ast.parse(path.read_text()), "", path.relative_to(root.parent).as_posix())
    return counts


def test_no_function_takes_ten_or_more_parameters() -> None:
    # several values that travel together are one frozen dataclass (docs/architecture.md,
    # "Function size"); a click command takes **values and builds its options object
    over = {name: n for name, n in _parameter_counts(REPO / "rocmseat").items()
            if n > MAX_PARAMETERS}
    new = {name: n for name, n in over.items() if name not in PARAMETER_EXCEPTIONS}
    assert new == {}, "make these take a parameter object"
    assert PARAMETER_EXCEPTIONS - set(over) == set(), "fixed: take it out of the set"


def test_the_parameter_count_sees_every_kind_of_parameter(tmp_path: Path) -> None:
    # the count itself: positional-only, keyword-only, *args, **kwargs, methods and nested
    # functions all count; self and cls do not
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text(
        "def f(a, /, b, *args, c, **kw): pass\n"
        "class K:\n"
        "    def m(self, a, b, c, d, e, f, g, h, i, j): pass\n"
        "    @classmethod\n"
        "    def k(cls): pass\n"
        "def outer():\n"
        "    def inner(a, b): pass\n")
    assert _parameter_counts(package) == {
        "pkg/m.py:f": 5, "pkg/m.py:K.m": 10, "pkg/m.py:K.k": 0, "pkg/m.py:outer": 0,
        "pkg/m.py:outer.inner": 2,
    }


def test_each_command_builds_its_options_object_from_every_option() -> None:
    # docs/architecture.md ("Function size"): a command takes **values and builds one frozen
    # options object from them; its fields are exactly the command's parameters, so an option
    # added or renamed on one side only fails here, not at a user's first run
    import dataclasses
    import inspect

    import click

    from rocmseat.cli.main import cli

    def commands(group: click.Group, path: str) -> list[tuple[str, click.Command]]:
        found = []
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None, name
            if isinstance(command, click.Group):
                found += commands(command, f"{path} {name}")
            else:
                found.append((f"{path} {name}", command))
        return found

    checked = []
    for path, command in commands(cli, "rocmseat"):
        callback = inspect.unwrap(command.callback)
        params = list(inspect.signature(callback).parameters.values())
        if [p.kind for p in params] != [inspect.Parameter.VAR_KEYWORD]:
            continue
        built = re.search(r"= (\w+)\(\*\*" + params[0].name + r"\)", inspect.getsource(callback))
        assert built, f"{path}: takes **{params[0].name} but builds no options object from it"
        options = getattr(inspect.getmodule(callback), built.group(1))
        assert dataclasses.is_dataclass(options), path
        assert options.__dataclass_params__.frozen, path
        assert {f.name for f in dataclasses.fields(options)} == {
            p.name for p in command.params if p.name}, path
        checked.append(path)
    assert {"rocmseat watch", "rocmseat preflight", "rocmseat launch",
            "rocmseat slurm health"} <= set(checked)
