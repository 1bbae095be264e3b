"""The one reader of files a user names: seat files, profiles, target files, recorded pages.

Only regular files are read. A FIFO would block `open()` forever and `/dev/zero` never ends, so the
file is opened non-blocking, checked with fstat on the open descriptor (no race with a rename)
and read up to a cap; one byte more than the cap is an error, never a truncated value
(docs/architecture.md, "Hostile input"). Symlinks to regular files are followed: operators link
seat files into place.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from rocmseat.errors import ReadError

# Seat files and profiles are a few KiB; 1 MiB leaves room for comments without letting
# `--profile /dev/zero`-like input take the memory of the host.
DEFAULT_LIMIT_BYTES = 1 << 20


def file_kind(mode: int) -> str:
    """What an `st_mode` that is not a regular file is, for a message: "is a FIFO, not ..."."""
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


def misplaced(mode: int) -> str | None:
    """What an lstat `st_mode` is where a directory should be, for a message; None for a
    directory."""
    if stat.S_ISDIR(mode):
        return None
    kind = ("a symlink" if stat.S_ISLNK(mode) else "a file" if stat.S_ISREG(mode)
            else file_kind(mode))
    return f"is {kind} where a directory should be"


def read_regular_bytes(path: Path, *, limit_bytes: int = DEFAULT_LIMIT_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit_bytes`; ReadError (exit 2) otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise ReadError(path, "is a directory, not a file") from None
        raise ReadError(path, exc.strerror or type(exc).__name__) from None
    try:
        return _read_open(fd, path, limit_bytes)
    finally:
        os.close(fd)


def _read_open(fd: int, path: Path, limit_bytes: int) -> bytes:
    """The bytes behind an open descriptor, checked on it with fstat (no race with a rename):
    a regular file of at most `limit_bytes`, else ReadError naming `path`."""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ReadError(path, f"is {file_kind(info.st_mode)}, not a regular file")
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


def _decode(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReadError(path, f"is not UTF-8 text (byte {exc.start})") from None


def read_regular_text(path: Path, *, limit_bytes: int = DEFAULT_LIMIT_BYTES) -> str:
    """The text of a regular UTF-8 file of at most `limit_bytes`; ReadError naming it otherwise."""
    return _decode(path, read_regular_bytes(path, limit_bytes=limit_bytes))


class UntrustedState(ReadError):
    """A state file (or a directory on its way) that anyone but root or the reader could have
    written: its contents must not decide a verdict (docs/architecture.md, "State")."""


_GROUP_OR_OTHER_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _trust_problem(info: os.stat_result, euid: int) -> str | None:
    if stat.S_ISLNK(info.st_mode):
        return "is a symlink; state is never read through a link (someone may have planted it)"
    if info.st_uid not in (0, euid):
        return f"is owned by uid {info.st_uid}, not by root or uid {euid} who reads it"
    if info.st_mode & _GROUP_OR_OTHER_WRITE:
        return (f"is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o}); "
                "anyone could have forged it")
    return None


def check_trusted_path(path: Path, *, trusted_root: Path | None = None) -> None:
    """sshd's StrictModes for a state file: the file and every directory from its parent up to
    `trusted_root` (the state dir, inclusive; only the parent when None) are no link, owned by
    root or the reading user, not writable by group or others. UntrustedState naming the first
    offender otherwise; FileNotFoundError when the file is absent. Whatever stands where one
    of those directories should be (a file, a FIFO, a socket, a link) is one UntrustedState
    line, never an OSError."""
    euid = os.geteuid()
    _check_dir_shapes(path, trusted_root)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ReadError(path, exc.strerror or type(exc).__name__) from None
    if (problem := _trust_problem(info, euid)) is not None:
        raise UntrustedState(path, problem, hint=f"check who wrote {path}; remove it to start over")
    if not stat.S_ISREG(info.st_mode):
        raise UntrustedState(path, f"is {file_kind(info.st_mode)}, not a regular file")
    directory = path.parent
    stop = trusted_root if trusted_root is not None else directory
    while True:
        try:
            dir_info = os.lstat(directory)
        except OSError as exc:
            raise ReadError(directory, exc.strerror or type(exc).__name__) from None
        if (problem := _trust_problem(dir_info, euid)) is not None:
            raise UntrustedState(
                directory, f"(directory of {path.name}) {problem}",
                hint=f"chown root {directory} and chmod go-w {directory}")
        if directory in (stop, directory.parent) or not _is_below(stop, directory):
            return
        directory = directory.parent


def check_write_dirs(path: Path, *, trusted_root: Path) -> None:
    """Before a state file is written: every directory that exists from `trusted_root` (the
    state dir, inclusive) down to the file's parent is a real directory, never a link (a link
    planted at `<state>/preflight` would carry the write outside the state dir) nor a file.
    UntrustedState naming it otherwise; an absent directory passes (the writer makes it)."""
    with contextlib.suppress(FileNotFoundError):
        _check_dir_shapes(path, trusted_root)


def _check_dir_shapes(path: Path, trusted_root: Path | None) -> None:
    """Top-down from `trusted_root` (or the parent) to the file's parent: each is a real
    directory, or absent (then FileNotFoundError: the file is absent too)."""
    parent = path.parent
    stop = trusted_root if trusted_root is not None and _is_below(trusted_root, parent) \
        else parent
    chain = [parent, *[d for d in parent.parents if _is_below(stop, d) or d == stop]]
    for directory in reversed(chain):
        try:
            info = os.lstat(directory)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise ReadError(directory, exc.strerror or type(exc).__name__) from None
        if stat.S_ISLNK(info.st_mode):
            raise UntrustedState(directory, f"(directory of {path.name}) is a symlink; state is "
                                 "never read through a link",
                                 hint=f"move {directory} away; rocmseat makes its own")
        if (shape := misplaced(info.st_mode)) is not None:
            raise UntrustedState(directory, shape, hint=f"move {directory} away")


def _is_below(root: Path, directory: Path) -> bool:
    try:
        directory.relative_to(root)
    except ValueError:
        return False
    return directory != root


def read_trusted_state(path: Path, *, trusted_root: Path | None = None,
                       limit_bytes: int = DEFAULT_LIMIT_BYTES) -> str | None:
    """The text of a state file that may decide a verdict (verdict, baselines, placement), or
    None when it is absent. UntrustedState when `check_trusted_path` refuses it; ReadError
    when it cannot be read. Opened with O_NOFOLLOW and checked again on the open descriptor,
    so a link swapped in after the check is refused too."""
    try:
        check_trusted_path(path, trusted_root=trusted_root)
    except FileNotFoundError:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UntrustedState(path, "is a symlink; state is never read through a link") from None
        raise ReadError(path, exc.strerror or type(exc).__name__) from None
    try:
        # checked again on the descriptor that is read: no window for a swap after the check
        info = os.fstat(fd)
        if (problem := _trust_problem(info, os.geteuid())) is not None:
            raise UntrustedState(path, problem)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedState(path, f"is {file_kind(info.st_mode)}, not a regular file")
        return _decode(path, _read_open(fd, path, limit_bytes))
    finally:
        os.close(fd)
