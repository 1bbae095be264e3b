"""The code base's own rules: ruff and mypy clean, only one module spells the real /sys, and the
rooms depend downward only (the layers contract)."""

from __future__ import annotations

import ast
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


def _module_imports(package: Path) -> dict[str, set[str]]:
    """module -> the modules of the package it imports, every import statement counted (inside
    functions too, and under `if TYPE_CHECKING:`); `from a.b import c` is an edge to a.b.c when
    that is a module, else to a.b."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            edges[name] |= {t for t in targets if t in modules and t != name}
    return edges


def _import_cycles(package: Path) -> list[list[str]]:
    """The import cycles of the package: each strongly connected component of more than one
    module, sorted (Tarjan's algorithm, iterative)."""
    edges = _module_imports(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return sorted(cycles)


# Cycles known and allowed, each spelled as _import_cycles spells it: removed by issue 32's other
# branches (remediation, state); once they are merged this list is empty, and stays so.
KNOWN_CYCLES = [
]


def test_no_module_cycles_within_a_room() -> None:
    # docs/architecture.md, "The house": the layers contract holds rooms apart; inside a room,
    # no two modules import each other, however lazily (an import inside a function included)
    cycles = _import_cycles(REPO / "rocmseat")
    assert [c for c in cycles if c not in KNOWN_CYCLES] == [], "import cycles"
    assert [c for c in KNOWN_CYCLES if c not in cycles] == [], (
        "a known cycle is gone: take it out of KNOWN_CYCLES")


def test_the_cycle_check_sees_a_lazy_cycle(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "room").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "room" / "__init__.py").write_text("")
    (package / "room" / "a.py").write_text("from pkg.room.b import B\n")
    (package / "room" / "b.py").write_text("def f():\n    from . import c\n")
    (package / "room" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.room.a\n")
    (package / "room" / "d.py").write_text("from pkg.room import a\n")  # into it, not in it
    assert _import_cycles(package) == [["pkg.room.a", "pkg.room.b", "pkg.room.c"]]


def test_no_module_imports_another_modules_private_name() -> None:
    # a private helper borrowed by another module is a second public API nobody declared
    # (safeio._kind was, for three rounds): make it public where it lives, or keep it home
    found = []
    for path in sorted((REPO / "rocmseat").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "")
                                                     .startswith("rocmseat")):
                found += [f"{path.relative_to(REPO)}:{node.lineno}: {alias.name}"
                          for alias in node.names
                          if alias.name.startswith("_") and not alias.name.startswith("__")]
    assert found == []


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
