"""The code base's own rules: ruff and mypy clean, and only one module spells the real /sys."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

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
