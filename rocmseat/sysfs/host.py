"""This boot of this host: the kernel's boot id and host name, read under a proc root.

`<proc>/sys/kernel/random/boot_id` is a random UUID the kernel draws once per boot
(Documentation/admin-guide/sysctl/kernel.rst, "random": "boot_id ... a UUID generated the first
time this is read ... the same for the whole boot"); `<proc>/sys/kernel/hostname` is the UTS
node name (the same text as uname -n). A cached verdict and the error readings record both, so a
verdict taken before a reboot, or on another host sharing the state dir, is never read as this
boot's. Where the proc root comes from: rocmseat.sysfs.fs.default_proc_root.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rocmseat.errors import ParseError
from rocmseat.sysfs.attrs import read_parsed

_UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
# HOST_NAME_MAX is 64 (include/uapi/linux/utsname.h __NEW_UTS_LEN); printable, no spaces
_HOSTNAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True, slots=True)
class BootIdentity:
    """`boot_id`/`host` None with `error` None: no proc root (a fixture tree has no boot).
    `error`: a proc root was given but a file could not be read or parsed (one line)."""

    boot_id: str | None
    host: str | None
    error: str | None = None


NO_PROC = BootIdentity(None, None)
_UPTIME_RE = re.compile(r"^(\d{1,9}\.\d{1,9}) \d{1,15}\.\d{1,9}$")  # < 1e9 s: 31 years


def parse_uptime(text: str, source: str = "<text>") -> float:
    """`<proc>/uptime`: "<seconds since boot> <idle seconds>" (fs/proc/uptime.c uptime_proc_show
    prints ktime_get_boottime_ts64(): CLOCK_BOOTTIME, which counts suspend and never steps with
    the wall clock) -> the seconds since boot."""
    match = _UPTIME_RE.fullmatch(text.strip())
    if match is None:
        raise ParseError(source, text, "not '<seconds since boot> <idle seconds>'")
    return float(match.group(1))


def read_uptime_s(proc_root: Path | None) -> tuple[float | None, str | None]:
    """(seconds since boot, None), (None, reason) when it cannot be read, (None, None) without a
    proc root (a fixture tree has no boot)."""
    if proc_root is None:
        return None, None
    path = proc_root / "uptime"
    value, error = read_parsed(path, parse_uptime)
    if value is None and error is None:
        error = f"{path}: missing"
    return value, error


def parse_boot_id(text: str, source: str = "<text>") -> str:
    """`boot_id`: a lowercase UUID on one line."""
    value = text.strip()
    if not _UUID_RE.fullmatch(value):
        raise ParseError(source, text, "not a boot id (a UUID)")
    return value


def parse_hostname(text: str, source: str = "<text>") -> str:
    """`hostname`: one host name of at most 64 printable characters."""
    value = text.strip()
    if not _HOSTNAME_RE.fullmatch(value):
        raise ParseError(source, text, "not a host name")
    return value


def read_boot_identity(proc_root: Path | None) -> BootIdentity:
    """This boot's identity under `proc_root`; NO_PROC when there is none."""
    if proc_root is None:
        return NO_PROC
    kernel = proc_root / "sys" / "kernel"
    boot_path, host_path = kernel / "random" / "boot_id", kernel / "hostname"
    boot_id, boot_error = read_parsed(boot_path, parse_boot_id)
    host, host_error = read_parsed(host_path, parse_hostname)
    errors = []
    for value, error, path in ((boot_id, boot_error, boot_path), (host, host_error, host_path)):
        if error:
            errors.append(error)
        elif value is None:
            errors.append(f"{path}: missing")
    return BootIdentity(boot_id, host, errors[0] if errors else None)
