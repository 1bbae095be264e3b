"""The sysfs root, the proc root, and the one attribute reader every sysfs module uses.

This is the only module that spells the real sysfs and procfs mount points; tests never reach
them (tests/conftest.py makes `default_sysfs_root` raise, and `default_proc_root` answers None for
any sysfs root but the real one).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from rocmseat.safeio import file_kind

SYSFS_ENV = "ROCMSEAT_SYSFS_ROOT"
PROC_ENV = "ROCMSEAT_PROC_ROOT"
KMSG_ENV = "ROCMSEAT_KMSG"
_REAL_SYSFS = "/sys"
_REAL_PROC = "/proc"
_REAL_KMSG = "/dev/kmsg"
# The mount point itself, for rules that must name it (e.g. a cache root may not live there).
REAL_SYSFS_MOUNT = _REAL_SYSFS


def default_sysfs_root() -> Path:
    """`$ROCMSEAT_SYSFS_ROOT`, else the real /sys."""
    return Path(os.environ.get(SYSFS_ENV) or _REAL_SYSFS)


def default_proc_root(sysfs_root: Path) -> Path | None:
    """Where this host's boot id and host name are read (docs/preflight.md, "The cached verdict").

    `$ROCMSEAT_PROC_ROOT` when set; else the real /proc when `sysfs_root` is the real /sys (the
    same host); else None: a fixture or copied sysfs tree has no boot of its own, and a test
    never reads the host's /proc by accident. A container that reads the host's sysfs at another
    path (the DaemonSet's /host/sys) sets ROCMSEAT_PROC_ROOT=/proc: the boot id is the kernel's,
    the same inside and outside the container.
    """
    if env := os.environ.get(PROC_ENV):
        return Path(env)
    return Path(_REAL_PROC) if is_live_root(sysfs_root) else None


def default_kmsg_path(sysfs_root: Path) -> Path | None:
    """Where this host's kernel log is read (docs/preflight.md, "Kernel events").

    `$ROCMSEAT_KMSG` when set (a device, a saved log, a FIFO a test writes); else the real
    /dev/kmsg when `sysfs_root` is the real /sys; else None, as for the proc root: a fixture
    tree has no kernel of its own, and a test never reads the host's log by accident.
    """
    if env := os.environ.get(KMSG_ENV):
        return Path(env)
    return Path(_REAL_KMSG) if is_live_root(sysfs_root) else None


def is_live_root(root: Path) -> bool:
    """True when `root` is the host's real sysfs (udev and amdsmi only make sense there)."""
    try:
        return root.resolve() == Path(_REAL_SYSFS)
    except OSError:
        return False


@dataclass(frozen=True, slots=True)
class Unsupported:
    """The attribute exists but the kernel refuses to produce it (EOPNOTSUPP, ENODATA, EINVAL).

    Distinct from None (absent) and never turned into 0: amdgpu returns -ENODATA for pcie_bw on
    ASICs without get_pcie_usage, and a PCI link read fails with -EINVAL when the capability read
    fails (drivers/pci/pci-sysfs.c).
    """

    path: str
    reason: str


@dataclass(frozen=True, slots=True)
class Unreadable:
    """Any other read failure (permission denied, I/O error): a device error, not a value."""

    path: str
    reason: str
    # the errno of the failed open or read (EPERM: amdgpu's pm getters on a runtime-suspended
    # GPU, rocmseat.sysfs.amdgpu); None when the failure was no system call's (a FIFO, too big)
    errno: int | None = None


_UNSUPPORTED_ERRNOS = {errno.EOPNOTSUPP, errno.ENODATA, errno.EINVAL, errno.ENOTSUP}

# A text attribute is one page (PAGE_SIZE: 4 KiB on x86, 64 KiB on some arm64/ppc64 kernels;
# sysfs_emit() never writes past it). Anything larger is not a sysfs attribute.
MAX_ATTR_BYTES = 1 << 16

_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC

AttrValue = str | Unsupported | Unreadable | None
AttrBytes = bytes | Unsupported | Unreadable | None


def read_attr(path: Path | str) -> AttrValue:
    """Read a sysfs attribute as text (read_attr_bytes, decoded; trailing newline kept:
    parsers decide)."""
    raw = read_attr_bytes(path)
    if isinstance(raw, bytes):
        return raw.decode("utf-8", errors="replace")
    return raw


def read_attr_bytes(path: Path | str) -> AttrBytes:
    """Read a sysfs attribute as bytes (a binary attribute such as amdgpu's gpu_metrics).

    Returns the bytes, None when the file is absent, Unsupported or Unreadable otherwise.
    Reads the whole file: sysfs reports sizes of 0 or 4096 whatever the content
    (prometheus/procfs internal/util/readfile.go).

    Only regular files are read. Attributes are kernfs regular files
    (Documentation/filesystems/sysfs.rst), never symlinks, FIFOs or device nodes; a tree with
    one of those where an attribute should be is broken or hostile, so the file is opened
    non-blocking and without following a final symlink (a FIFO would block open() forever),
    checked with fstat on the open descriptor, and read up to MAX_ATTR_BYTES.
    """
    try:
        fd = os.open(path, _READ_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return Unreadable(str(path), _symlink_reason(path))
        reason = exc.strerror or type(exc).__name__
        if exc.errno in _UNSUPPORTED_ERRNOS:
            return Unsupported(str(path), reason)
        return Unreadable(str(path), reason, exc.errno)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            return Unreadable(
                str(path),
                f"is {file_kind(mode)}, not a regular file (sysfs attributes are regular files)",
            )
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, MAX_ATTR_BYTES + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_ATTR_BYTES:
                return Unreadable(
                    str(path), f"larger than {MAX_ATTR_BYTES:,} bytes (a sysfs attribute is a page)"
                )
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if exc.errno in _UNSUPPORTED_ERRNOS:
            return Unsupported(str(path), reason)
        return Unreadable(str(path), reason, exc.errno)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _symlink_reason(path: Path | str) -> str:
    """O_NOFOLLOW refused the final component (or the path loops): say which."""
    try:
        target = os.readlink(path)
    except OSError:
        return "too many levels of symbolic links"
    shown = target if len(target) <= 60 else target[:57] + "..."
    return (
        f"is a symbolic link to {shown!r}, not a regular file (sysfs attributes are regular files)"
    )
