"""Atomic writes (temp file in the same directory + os.replace) and exclusive locks."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rocmseat import jsonio
from rocmseat.errors import ReadError, RocmseatError
from rocmseat.safeio import file_kind
from rocmseat.text import printable


def make_dirs(directory: Path) -> None:
    """`mkdir -p`, and the dirs it creates are not writable by group or others whatever the
    umask (a stricter umask is kept): under a umask of 002 they would be 0775, and every state
    file written there untrusted by its own readers (rocmseat.safeio.read_trusted_state)."""
    missing = []
    probe = directory
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    directory.mkdir(parents=True, exist_ok=True)
    for created in missing:
        with contextlib.suppress(OSError):  # made meanwhile by someone else: theirs to keep
            info = os.lstat(created)
            if info.st_uid == os.geteuid() and stat.S_ISDIR(info.st_mode):
                os.chmod(created, stat.S_IMODE(info.st_mode) & ~(stat.S_IWGRP | stat.S_IWOTH))


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write `data` to `path` so that a reader sees the old file or the new one, never a part.

    The temp file lives in the destination directory so os.replace is a rename on one
    filesystem; it is fsynced before the rename so a crash cannot publish an empty file.
    """
    make_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class WriteRefused(RocmseatError):
    """A file rocmseat was to write into a directory it was handed could not be written (a link
    or a non-regular file at the name, or the OS refused): one line naming the file."""

    exit_code = 2

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{printable(str(path), 4096)}: not written: {why}")
        self.path = path


def file_identity(info: os.stat_result) -> tuple[int, int, int, int]:
    """What says a file is still the one that was read: (device, inode, size, mtime ns)."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def write_into(directory: Path, name: str, data: bytes, *, mode: int = 0o644,
               owner: tuple[int, int] | None = None,
               unchanged: tuple[int, int, int, int] | None = None) -> Path:
    """Write `data` as `directory/name`: a temp file in `directory`, fsynced, renamed over the
    name. A symlink, FIFO, directory or device at the name is refused (never written through,
    never replaced), and every OS failure (a read-only or immutable directory, a full disk) is
    one WriteRefused naming the file (docs/architecture.md "Hostile input").

    `owner` (uid, gid): the new file gets them (an edited file keeps its owner and group);
    `unchanged`: the `file_identity` of the file when it was read: a file changed since (a
    writer rewriting it in place) is refused just before the rename, and nothing is written."""
    if not name or "/" in name or name in (".", ".."):
        raise WriteRefused(directory / name, "not a file name")
    path = directory / name
    _check_target(path)
    try:
        dir_info = os.stat(directory)
    except OSError as exc:
        raise WriteRefused(path, f"directory: {exc.strerror or type(exc).__name__}") from None
    if not stat.S_ISDIR(dir_info.st_mode):
        raise WriteRefused(path, f"{printable(str(directory))} is not a directory")
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if owner is not None:
                try:
                    os.fchown(handle.fileno(), *owner)
                except PermissionError:
                    raise WriteRefused(path, f"cannot keep its owner (uid {owner[0]}, gid "
                                       f"{owner[1]}) as uid {os.geteuid()}: edit it as its "
                                       "owner or as root") from None
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        if unchanged is not None:
            try:
                now = file_identity(os.lstat(path))
            except FileNotFoundError:
                now = None
            if now != unchanged:
                raise WriteRefused(path, "changed while rocmseat edited it (size, mtime or inode "
                                   "differ from what was read): nothing written; run again once "
                                   "the other writer is done")
        _check_target(path)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise WriteRefused(path, exc.strerror or type(exc).__name__) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return path


def _check_target(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise WriteRefused(path, exc.strerror or type(exc).__name__) from None
    if stat.S_ISLNK(info.st_mode):
        raise WriteRefused(path, "is a symlink; rocmseat never writes through a link "
                           "(someone else may have planted it)")
    if not stat.S_ISREG(info.st_mode):
        raise WriteRefused(path, f"is {file_kind(info.st_mode)}, not a regular file")


def atomic_write_text(path: Path, text: str, *, mode: int = 0o644) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_json(path: Path, value: Any, *, mode: int = 0o644) -> None:
    atomic_write_text(path, jsonio.dumps(value) + "\n", mode=mode)


class LockTimeout(RocmseatError):
    pass


@contextlib.contextmanager
def exclusive_lock(lock_path: Path, *, timeout_s: float | None = None) -> Iterator[None]:
    """Hold an flock on `lock_path` (created if needed). The kernel drops it if we die."""
    make_dirs(lock_path.parent)
    # Never through a symlink someone planted at the lock's name (docs/architecture.md,
    # "Hostile input"): O_NOFOLLOW makes that an ELOOP error instead of locking their file.
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                     | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ReadError(lock_path, "is a symlink; rocmseat never locks through a link "
                            "(someone else may have planted it)") from None
        raise ReadError(lock_path, exc.strerror or type(exc).__name__) from None
    kind = os.fstat(fd).st_mode
    if not stat.S_ISREG(kind):  # a FIFO or a device planted at the lock's name
        os.close(fd)
        raise ReadError(lock_path, f"is {file_kind(kind)}, not a lock file")
    try:
        if timeout_s is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise LockTimeout(
                            f"{lock_path}: still locked by another process after {timeout_s:g} s"
                        ) from None
                    time.sleep(0.05)
        yield
    finally:
        os.close(fd)
