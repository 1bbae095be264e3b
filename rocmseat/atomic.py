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
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ReadError(lock_path, "is a symlink; rocmseat never locks through a link "
                            "(someone else may have planted it)") from None
        raise ReadError(lock_path, exc.strerror or type(exc).__name__) from None
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
