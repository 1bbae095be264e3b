"""The sysfs root and the one attribute reader every sysfs module uses.

This is the only module that spells the real sysfs mount point; tests never reach it
(tests/conftest.py makes `default_sysfs_root` raise).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

SYSFS_ENV = "ROCMSEAT_SYSFS_ROOT"
_REAL_SYSFS = "/sys"


def default_sysfs_root() -> Path:
    """`$ROCMSEAT_SYSFS_ROOT`, else the real /sys."""
    return Path(os.environ.get(SYSFS_ENV) or _REAL_SYSFS)


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


_UNSUPPORTED_ERRNOS = {errno.EOPNOTSUPP, errno.ENODATA, errno.EINVAL, errno.ENOTSUP}

AttrValue = str | Unsupported | Unreadable | None


def read_attr(path: Path) -> AttrValue:
    """Read a sysfs attribute as text.

    Returns the text (trailing newline kept: parsers decide), None when the file is absent,
    Unsupported or Unreadable otherwise. Reads the whole file: sysfs reports sizes of 0 or 4096
    whatever the content (prometheus/procfs internal/util/readfile.go).
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read(1 << 20)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        if exc.errno in _UNSUPPORTED_ERRNOS:
            return Unsupported(str(path), reason)
        return Unreadable(str(path), reason)
    return data.decode("utf-8", errors="replace")
