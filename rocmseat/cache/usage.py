"""Which running processes use a cache directory: their environment points into it, or they hold
a file in it open. Reading another user's process needs permission; without it the answer is
"unknown", never "no".
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil


@dataclass(frozen=True, slots=True)
class ProcessView:
    """What could be read of one process (None: not permitted or gone)."""

    pid: int
    name: str
    environ: dict[str, str] | None
    open_files: tuple[str, ...] | None  # open, mapped (mmap/dlopen) files and the cwd


class Use(enum.StrEnum):
    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class InUse:
    use: Use
    pids: tuple[int, ...] = ()
    unreadable: int = 0  # processes that could not be inspected
    unreadable_pids: tuple[int, ...] = ()  # which ones (so an operator can look at them)

    def describe(self) -> str:
        if self.use is Use.YES:
            return "yes (pid " + ", ".join(str(p) for p in self.pids) + ")"
        if self.use is Use.UNKNOWN:
            shown = ", ".join(str(p) for p in self.unreadable_pids[:5])
            more = ", ..." if len(self.unreadable_pids) > 5 else ""
            which = f": pid {shown}{more}" if shown else ""
            return f"unknown ({self.unreadable} process(es) not readable{which})"
        return "no"


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def judge_use(directory: Path, views: Iterable[ProcessView]) -> InUse:
    """Pure: a process uses `directory` if an env value or an open file points into it."""
    target = os.path.normpath(str(directory))
    pids: list[int] = []
    unreadable: list[int] = []
    for view in views:
        if view.environ is None and view.open_files is None:
            unreadable.append(view.pid)
            continue
        # Values may be path lists (PYTHONPATH=a:b): every absolute part counts.
        parts = (p for v in (view.environ or {}).values() for p in v.split(os.pathsep))
        env_hit = any(_inside(os.path.normpath(p), target) for p in parts if p.startswith("/"))
        file_hit = any(_inside(f, target) for f in view.open_files or ())
        if env_hit or file_hit:
            pids.append(view.pid)
    if pids:
        return InUse(Use.YES, tuple(sorted(pids)), len(unreadable), tuple(sorted(unreadable)))
    if unreadable:
        return InUse(Use.UNKNOWN, (), len(unreadable), tuple(sorted(unreadable)))
    return InUse(Use.NO)


def scan_processes() -> Iterator[ProcessView]:
    """Every process of the host as far as we may read it (psutil; the edge)."""
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "name"]):
        if proc.pid == me:
            continue
        environ: dict[str, str] | None
        files: tuple[str, ...] | None
        try:
            environ = dict(proc.environ())
        except (psutil.AccessDenied, psutil.ZombieProcess):
            environ = None
        except psutil.NoSuchProcess:
            continue
        try:
            files = _paths_in_use(proc)
        except (psutil.AccessDenied, psutil.ZombieProcess):
            files = None
        except psutil.NoSuchProcess:
            continue
        if environ is None and files is None and _kernel_thread(proc):
            continue
        yield ProcessView(proc.pid, str(proc.info.get("name") or ""), environ, files)


def _paths_in_use(proc: psutil.Process) -> tuple[str, ...]:
    """Open files, mapped files and the working directory of a process.

    Mapped files matter most: a replica dlopen()s the compiled kernels (.so) of its cache and
    closes the descriptor, so they show in /proc/PID/maps only. After its cache was renamed
    aside while it still ran, its environment names the live path, but the kernel reports the
    mappings under the new (moved-aside) name.
    """
    paths = [f.path for f in proc.open_files()]
    paths += [m.path for m in proc.memory_maps(grouped=True) if m.path.startswith("/")]
    paths.append(proc.cwd())
    # The kernel marks a mapping of a deleted file " (deleted)"; the path prefix still counts.
    return tuple(path.removesuffix(" (deleted)") for path in paths)


def _kernel_thread(proc: psutil.Process) -> bool:
    """Kernel threads have no environment or files to read; they are not 'unreadable'."""
    try:
        return not proc.cmdline()
    except psutil.Error:
        return False
