from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

SYSFS_FIXTURES = FIXTURES / "sysfs"


@pytest.fixture
def copy_tree(tmp_path):
    """copy_tree(name) -> a writable copy of a fixture tree (symlinks kept)."""

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(SYSFS_FIXTURES / name, dest, symlinks=True)
        return dest

    return copy
