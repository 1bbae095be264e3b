"""seat/ is the seat file's schema and loading only (issue 16): it imports none of the hardware
rooms (node, hip, preflight) nor the placement resolver; what the seat file alone says of its
replicas it asks of rocmseat.placement.rules, which imports the seat schema and nothing of the
node."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

FORBIDDEN = ("rocmseat.node", "rocmseat.hip", "rocmseat.preflight", "rocmseat.placement.resolve",
             "rocmseat.placement.place", "rocmseat.placement.recorded", "rocmseat.launch")


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


SCHEMA_FILES = [*sorted((REPO / "rocmseat" / "seat").glob("*.py")),
                REPO / "rocmseat" / "placement" / "rules.py", REPO / "rocmseat" / "tomlio.py"]


@pytest.mark.parametrize("path", SCHEMA_FILES, ids=lambda p: p.name)
def test_the_schema_room_reads_no_hardware_room(path):
    bad = sorted(m for m in imports(path) if m.startswith(FORBIDDEN))
    assert bad == [], f"{path.relative_to(REPO)} imports {bad}"
