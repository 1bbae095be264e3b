from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

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


def fixture_builder() -> ModuleType:
    """tests/fixtures/build_sysfs_fixtures.py as a module (its hosts, gpu_metrics(), ...)."""
    name = "build_sysfs_fixtures"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, FIXTURES / "build_sysfs_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
