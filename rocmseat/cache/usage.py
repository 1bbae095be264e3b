"""Which running processes use a cache directory: their environment points into it, or they hold
a file in it open or mapped, or work inside it. Reading another user's process needs permission;
without it the answer is "unknown", never "no" (docs/cache.md, "cache-audit").

A process counts as read only when every part of it was read: its environment, its open files,
its memory maps and its working directory. One part that could not be read could be the one that
points into the directory, so the answer for that process is "unknown" unless another part
already says "yes".

Paths are compared resolved. The kernel reports open files, maps and the cwd with symlinks
resolved (proc(5): /proc/PID/fd, /proc/PID/maps); an environment value is text and may name the
directory through a link (`VLLM_CACHE_ROOT=/srv/alias/vllm` with `/srv/alias -> r0.stale-...`),
so `scan_processes` (the edge) resolves the absolute paths in every value, and `judge_use` (pure)
compares against the directory's own path and its resolved path.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

# Bounds on what one process's environment may cost us to resolve.
MAX_ENV_PATHS = 4096
MAX_PATH_CHARS = 4096

KTHREADD_PID = 2  # Linux: every kernel thread is kthreadd or a child of it


@dataclass(frozen=True, slots=True)
class ProcessView:
    """What could be read of one process (None: not permitted)."""

    pid: int
    name: str
    environ: dict[str, str] | None
    open_files: tuple[str, ...] | None  # open, mapped (mmap/dlopen) files and the cwd
    # Parts that could not be read ("environment", "open files", "memory maps", "cwd").
    unreadable_parts: tuple[str, ...] = ()
    # The absolute paths in the environment's values, each as written and resolved (the edge
    # fills it in); None: derive them from `environ` as written.
    env_paths: tuple[str, ...] | None = None

    @property
    def fully_read(self) -> bool:
        return self.environ is not None and self.open_files is not None and not (
            self.unreadable_parts
        )


class Use(enum.StrEnum):
    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class InUse:
    use: Use
    pids: tuple[int, ...] = ()
    unreadable: int = 0  # processes that could not be inspected (wholly or in part)
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


def env_path_parts(environ: dict[str, str]) -> list[str]:
    """The absolute paths in the values (path lists such as PYTHONPATH=a:b count part by part)."""
    out: list[str] = []
    for value in environ.values():
        for part in value.split(os.pathsep):
            if part.startswith("/") and len(part) <= MAX_PATH_CHARS:
                out.append(os.path.normpath(part))
                if len(out) >= MAX_ENV_PATHS:
                    return out
    return out


def judge_use(
    directory: Path, views: Iterable[ProcessView], *, real_directory: Path | None = None
) -> InUse:
    """Pure: a process uses `directory` if an env value or an open file points into it.

    `real_directory`: the directory with its symlinks resolved (os.path.realpath, at the edge),
    when its path runs through a link: open files and maps are reported resolved.
    """
    targets = {os.path.normpath(str(directory))}
    if real_directory is not None:
        targets.add(os.path.normpath(str(real_directory)))
    pids: list[int] = []
    unreadable: list[int] = []
    for view in views:
        parts = view.env_paths
        if parts is None:
            parts = tuple(env_path_parts(view.environ or {}))
        env_hit = any(_inside(p, t) for p in parts for t in targets)
        file_hit = any(_inside(f, t) for f in view.open_files or () for t in targets)
        if env_hit or file_hit:
            pids.append(view.pid)
        elif not view.fully_read:
            unreadable.append(view.pid)
    if pids:
        return InUse(Use.YES, tuple(sorted(pids)), len(unreadable), tuple(sorted(unreadable)))
    if unreadable:
        return InUse(Use.UNKNOWN, (), len(unreadable), tuple(sorted(unreadable)))
    return InUse(Use.NO)


class _Gone(Exception):
    """The process ended (or is a zombie, which holds no files, maps or cwd) while we read it."""


def _part(read: Callable[[], list[str]]) -> list[str] | None:
    try:
        return read()
    except psutil.NoSuchProcess:  # ZombieProcess included
        raise _Gone from None
    except (psutil.Error, OSError):
        return None


def read_process(proc: psutil.Process) -> ProcessView | None:
    """Every part of one process we may read, each part on its own (None: it is gone)."""
    unreadable: list[str] = []
    try:
        environ: dict[str, str] | None
        try:
            environ = dict(proc.environ())
        except psutil.NoSuchProcess:
            raise _Gone from None
        except (psutil.Error, OSError):
            environ = None
            unreadable.append("environment")
        paths: list[str] = []
        read_any = False
        for what, read in (
            ("open files", lambda: [f.path for f in proc.open_files()]),
            # A replica dlopen()s the compiled kernels (.so) of its cache and closes the
            # descriptor, so they show in /proc/PID/maps only. After its cache was renamed aside
            # while it ran, the kernel reports the mappings under the moved-aside name.
            ("memory maps",
             lambda: [m.path for m in proc.memory_maps(grouped=True) if m.path.startswith("/")]),
            ("cwd", lambda: [proc.cwd()]),
        ):
            got = _part(read)
            if got is None:
                unreadable.append(what)
            else:
                read_any = True
                paths += got
    except _Gone:
        return None
    # The kernel marks a mapping of a deleted file " (deleted)"; the path prefix still counts.
    files = tuple(p.removesuffix(" (deleted)") for p in paths) if read_any else None
    env_paths = None
    if environ is not None:
        written = env_path_parts(environ)
        env_paths = tuple(dict.fromkeys([*written, *(os.path.realpath(p) for p in written)]))
    info = getattr(proc, "info", None) or {}
    return ProcessView(proc.pid, str(info.get("name") or ""), environ, files,
                       tuple(unreadable), env_paths)


def scan_processes() -> Iterator[ProcessView]:
    """Every process of the host as far as we may read it (psutil; the edge)."""
    me = os.getpid()
    kthreadd = _is_kthreadd()
    for proc in psutil.process_iter(["pid", "name"]):
        if proc.pid == me or (kthreadd and _kernel_thread(proc)):
            continue
        view = read_process(proc)
        if view is not None:
            yield view


def _is_kthreadd() -> bool:
    """Pid 2 is the kernel's kthreadd (parent 0) on the host; in a pid namespace it is not."""
    try:
        return psutil.Process(KTHREADD_PID).ppid() == 0
    except psutil.Error:
        return False


def _kernel_thread(proc: psutil.Process) -> bool:
    """Kernel threads (kthreadd and its children, no command line) have no environment or
    files to read; they are not 'unreadable'. The parent pid and the command line are readable
    without permission (/proc/PID/stat, /proc/PID/cmdline), unlike the environment."""
    try:
        if proc.pid == KTHREADD_PID:
            return True
        return proc.ppid() == KTHREADD_PID and not proc.cmdline()
    except psutil.Error:
        return False
