"""`read_attr` reads regular files only (issue 11): sysfs attributes are kernfs regular files, so
a FIFO, a directory, a device node or a symlink where an attribute should be is Unreadable,
never a hang, never "absent", never a value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocmseat.sysfs.fs import MAX_ATTR_BYTES, Unreadable, read_attr


def test_regular_file_and_absent(tmp_path):
    (tmp_path / "vendor").write_text("0x1002\n")
    assert read_attr(tmp_path / "vendor") == "0x1002\n"
    assert read_attr(tmp_path / "absent") is None
    assert read_attr(tmp_path / "vendor" / "below-a-file") is None


def test_fifo_is_unreadable_without_blocking(tmp_path):
    # Before the fix open() blocked forever on a FIFO with no writer: run it in a child with a
    # deadline so a regression fails here instead of hanging the suite.
    fifo = tmp_path / "current_link_speed"
    os.mkfifo(fifo)
    code = (
        "import sys; from pathlib import Path; from rocmseat.sysfs.fs import read_attr; "
        "print(repr(read_attr(Path(sys.argv[1]))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    assert "Unreadable(" in proc.stdout and "is a FIFO" in proc.stdout
    value = read_attr(fifo)  # and in-process, now that it cannot block
    assert isinstance(value, Unreadable)
    assert value.reason == "is a FIFO, not a regular file (sysfs attributes are regular files)"


@pytest.mark.parametrize("kind", ["directory", "dangling", "loop", "to-regular", "to-devnull"])
def test_not_a_regular_file_is_unreadable(tmp_path, kind):
    attr = tmp_path / "vendor"
    if kind == "directory":
        attr.mkdir()
    elif kind == "dangling":
        attr.symlink_to(tmp_path / "gone")
    elif kind == "loop":
        attr.symlink_to(attr)
    elif kind == "to-regular":
        (tmp_path / "real").write_text("0x1002\n")
        attr.symlink_to(tmp_path / "real")
    else:
        attr.symlink_to("/dev/null")
    value = read_attr(attr)
    assert isinstance(value, Unreadable), value
    assert value.path == str(attr)
    expected = "is a directory" if kind == "directory" else "is a symbolic link"
    assert value.reason.startswith(expected), value.reason


def test_huge_attribute_is_unreadable_not_truncated(tmp_path):
    attr = tmp_path / "aer_dev_correctable"
    attr.write_bytes(b"BadTLP 1\n" * (MAX_ATTR_BYTES // 9 + 10))
    value = read_attr(attr)
    assert isinstance(value, Unreadable)
    assert value.reason == f"larger than {MAX_ATTR_BYTES:,} bytes (a sysfs attribute is a page)"


def test_device_node_is_unreadable():
    value = read_attr(Path("/dev/zero"))
    assert isinstance(value, Unreadable)
    assert value.reason.startswith("is a character device")
