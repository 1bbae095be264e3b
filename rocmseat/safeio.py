"""The one reader of files a user names: seat files, profiles, target files, recorded pages.

Only regular files are read. A FIFO would block `open()` forever and `/dev/zero` never ends, so the
file is opened non-blocking, checked with fstat on the open descriptor (no race with a rename)
and read up to a cap; one byte more than the cap is an error, never a truncated value
(docs/architecture.md, "Hostile input"). Symlinks to regular files are followed: operators link
seat files into place.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from rocmseat.errors import ReadError

# Seat files and profiles are a few KiB; 1 MiB leaves room for comments without letting
# `--profile /dev/zero`-like input take the memory of the host.
DEFAULT_LIMIT_BYTES = 1 << 20


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def read_regular_bytes(path: Path, *, limit_bytes: int = DEFAULT_LIMIT_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit_bytes`; ReadError (exit 2) otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise ReadError(path, "is a directory, not a file") from None
        raise ReadError(path, exc.strerror or type(exc).__name__) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ReadError(path, f"is {_kind(info.st_mode)}, not a regular file")
        if info.st_size > limit_bytes:
            raise ReadError(path, f"is {info.st_size:,} bytes; the limit is {limit_bytes:,}")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 16, limit_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit_bytes:
                raise ReadError(path, f"is larger than the limit of {limit_bytes:,} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise ReadError(path, exc.strerror or type(exc).__name__) from None
    finally:
        os.close(fd)


def read_regular_text(path: Path, *, limit_bytes: int = DEFAULT_LIMIT_BYTES) -> str:
    """The text of a regular UTF-8 file of at most `limit_bytes`; ReadError naming it otherwise."""
    data = read_regular_bytes(path, limit_bytes=limit_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReadError(path, f"is not UTF-8 text (byte {exc.start})") from None
