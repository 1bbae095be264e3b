"""rocmseat/safeio.py: user-named files are regular, bounded and never block (issue 11)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from rocmseat.errors import ReadError
from rocmseat.safeio import misplaced, read_regular_bytes, read_regular_text


def test_regular_file_and_symlink_to_it(tmp_path: Path):
    f = tmp_path / "seat.toml"
    f.write_text("name = 'x'\n")
    link = tmp_path / "link.toml"
    link.symlink_to(f)
    assert read_regular_text(f) == read_regular_text(link) == "name = 'x'\n"


def test_fifo_is_refused_without_blocking(tmp_path: Path):
    fifo = tmp_path / "seat.toml"
    os.mkfifo(fifo)
    with pytest.raises(ReadError, match="is a FIFO, not a regular file"):
        read_regular_text(fifo)


def test_dev_zero_is_refused():
    with pytest.raises(ReadError, match="character device"):
        read_regular_bytes(Path("/dev/zero"))


def test_directory_missing_and_dangling(tmp_path: Path):
    with pytest.raises(ReadError, match="directory"):
        read_regular_text(tmp_path)
    with pytest.raises(ReadError, match="No such file"):
        read_regular_text(tmp_path / "absent")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ReadError, match="No such file"):
        read_regular_text(tmp_path / "dangling")


def test_size_cap_is_an_error_not_a_truncation(tmp_path: Path):
    f = tmp_path / "big"
    f.write_bytes(b"a" * 1001)
    with pytest.raises(ReadError, match="limit is 1,000"):
        read_regular_bytes(f, limit_bytes=1000)
    assert read_regular_bytes(f, limit_bytes=1001) == b"a" * 1001


def test_not_utf8(tmp_path: Path):
    f = tmp_path / "bin"
    f.write_bytes(b"ok\xff")
    with pytest.raises(ReadError, match="not UTF-8 text"):
        read_regular_text(f)


def test_one_file_kind_for_every_reader_and_writer(tmp_path: Path):
    """safeio.file_kind names what stands there for the safe reader, the trusted-state reader,
    the atomic writer and the sysfs attribute reader alike."""
    import socket

    from rocmseat.atomic import WriteRefused, write_into
    from rocmseat.safeio import file_kind
    from rocmseat.sysfs.fs import Unreadable, read_attr

    fifo, sock, directory = tmp_path / "fifo", tmp_path / "sock", tmp_path / "dir"
    os.mkfifo(fifo)
    directory.mkdir()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock))
        kinds = {p.name: file_kind(os.lstat(p).st_mode) for p in (fifo, sock, directory)}
        kinds["null"] = file_kind(os.stat("/dev/null").st_mode)
    assert kinds == {"fifo": "a FIFO", "sock": "a socket", "dir": "a directory",
                     "null": "a character device"}
    attr = read_attr(fifo)
    assert isinstance(attr, Unreadable) and "is a FIFO, not a regular file" in attr.reason
    with pytest.raises(WriteRefused, match="is a FIFO, not a regular file"):
        write_into(tmp_path, "fifo", b"x")


@pytest.mark.parametrize(("mode", "said"), [
    (stat.S_IFDIR | 0o700, None),
    (stat.S_IFREG | 0o600, "is a file where a directory should be"),
    (stat.S_IFLNK | 0o777, "is a symlink where a directory should be"),
    (stat.S_IFIFO | 0o600, "is a FIFO where a directory should be"),
    (stat.S_IFSOCK | 0o600, "is a socket where a directory should be"),
    (stat.S_IFCHR | 0o600, "is a character device where a directory should be"),
    (stat.S_IFBLK | 0o600, "is a block device where a directory should be"),
])
def test_what_stands_where_a_directory_should_be(mode: int, said: str | None) -> None:
    assert misplaced(mode) == said
