"""The committed fixture trees are exactly what tests/fixtures/build_sysfs_fixtures.py builds."""

from __future__ import annotations

import os

from tests.conftest import FIXTURES
from tests.sysfs.conftest import fixture_builder


def _builder():
    return fixture_builder()


def test_committed_trees_equal_the_builder(tmp_path):
    builder = _builder()
    builder.build_all(tmp_path)
    assert sorted(p.name for p in (FIXTURES / "sysfs").iterdir()) == sorted(builder.HOSTS)
    assert builder.tree_differences(tmp_path, FIXTURES / "sysfs") == []


def test_tree_difference_is_detected(tmp_path):
    builder = _builder()
    builder.build(builder_name := "no-amdgpu", tmp_path / "a")
    builder.build(builder_name, tmp_path / "b")
    (tmp_path / "b" / builder_name / "devices/system/node/node0/cpulist").write_text("0-3\n")
    assert builder.tree_differences(tmp_path / "a", tmp_path / "b") == [
        f"{builder_name}/devices/system/node/node0/cpulist"
    ]


def test_symlinks_are_relative_and_kernel_shaped():
    root = FIXTURES / "sysfs" / "x99-r9700"
    card = root / "class/drm/card4"
    assert (
        os.readlink(card)
        == "../../devices/pci0000:80/0000:80:03.0/0000:87:00.0/0000:88:00.0/0000:89:00.0/drm/card4"
    )
    assert os.readlink(card / "device") == "../../../0000:89:00.0"
    assert os.readlink(root / "bus/pci/devices/0000:89:00.0").startswith(
        "../../../devices/pci0000:80/"
    )
    for path in root.rglob("*"):
        if path.is_symlink():
            assert not os.readlink(path).startswith("/"), path
            assert path.resolve().is_relative_to(root.resolve()), path
