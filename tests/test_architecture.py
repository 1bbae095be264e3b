"""docs/architecture.md holds: the names its interfaces and contracts give exist, the schema
table lists every document schema the package writes, and one module spawns processes. (The
layers contract is tests/test_static.py's; the one HTTP client tests/test_http_client.py's; the
one state layout tests/test_statedir.py's.)"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DOC = (REPO / "docs" / "architecture.md").read_text()
PACKAGE = sorted((REPO / "rocmseat").rglob("*.py"))


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        try:
            for name in parts[cut:]:
                target = getattr(target, name)
        except AttributeError:
            return False
        return True
    return False


DOTTED = sorted({m for m in re.findall(r"rocmseat(?:\.[A-Za-z_]\w*)+(?![\w/-])", DOC)})
PATHS = sorted(set(re.findall(r"(?<![\w/])(?:rocmseat|tests|bench)/[\w/]+\.py", DOC)))


@pytest.mark.parametrize("dotted", DOTTED)
def test_every_name_the_page_gives_exists(dotted):
    assert _resolves(dotted), f"docs/architecture.md names {dotted}, which does not exist"


@pytest.mark.parametrize("path", PATHS)
def test_every_file_the_page_gives_exists(path):
    assert (REPO / path).is_file(), f"docs/architecture.md names {path}, which does not exist"


def test_the_schema_table_is_every_schema_the_package_writes():
    table = DOC.split("## JSON schemas", 1)[1]
    listed = set(re.findall(r"`(rocmseat\.[a-z-]+/v\d+)`", table))
    spelled = set()
    for path in PACKAGE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                spelled.update(re.findall(r"^rocmseat\.[a-z-]+/v\d+$", node.value))
    assert spelled - listed == set(), "schemas missing from the table"
    assert listed - spelled == set(), "schemas in the table that no module writes"


# Everything that starts a process, outside rocmseat/procgroup.py (docs/architecture.md,
# "Processes"): subprocess's starters, os's fork/exec/spawn family, asyncio's, pty's.
STARTERS = re.compile(
    r"^(subprocess\.(Popen|run|call|check_call|check_output|getoutput|getstatusoutput)"
    r"|os\.(fork|forkpty|system|popen|posix_spawnp?|spawn\w*|exec\w*)"
    r"|asyncio\.create_subprocess_\w+|pty\.(fork|spawn)|multiprocessing\.\w+)$"
)


def starters(path: Path, base: Path = REPO) -> list[str]:
    tree = ast.parse(path.read_text())
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in {"subprocess", "os", "pty",
                                                                 "asyncio", "multiprocessing"}:
            aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
        if isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names})
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):  # a subclass of Popen starts processes too
            bases = [b.value if isinstance(b, ast.Subscript) else b for b in node.bases]
            if any(isinstance(b, ast.Attribute) and isinstance(b.value, ast.Name)
                   and STARTERS.match(f"{aliases.get(b.value.id, b.value.id)}.{b.attr}")
                   for b in bases):
                found.append(f"{path.relative_to(base)}:{node.lineno}: class {node.name}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            name = f"{aliases.get(func.value.id, func.value.id)}.{func.attr}"
        elif isinstance(func, ast.Name):
            name = aliases.get(func.id, func.id)
        else:
            continue
        if STARTERS.match(name):
            found.append(f"{path.relative_to(base)}:{node.lineno}: {name}")
    return found


def test_one_module_starts_processes():
    found = [hit for path in PACKAGE if path != REPO / "rocmseat" / "procgroup.py"
             for hit in starters(path)]
    assert found == [], "processes start through rocmseat.procgroup:\n" + "\n".join(found)
    assert starters(REPO / "rocmseat" / "procgroup.py"), "the spawner itself is seen"


def test_the_spawner_check_sees_every_spelling(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import subprocess as sp\nfrom os import system\nimport os\n"
                       "sp.run(['x'])\nsystem('x')\nos.execv('x', ['x'])\n"
                       "class Quiet(sp.Popen[bytes]):\n    pass\n")
    hits = [h.split(": ")[1] for h in starters(planted, tmp_path)]
    assert sorted(hits) == sorted(["subprocess.run", "os.system", "os.execv", "class Quiet"])

