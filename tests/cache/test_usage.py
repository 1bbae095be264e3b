"""Which processes use a cache dir, read from real processes through psutil (not fakes).

The pure judge is tested with ProcessView tables in test_audit.py; here real children hold a
cache dir through their environment or an open file, and a child without permission to read
other processes must answer "unknown", never "no".
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from rocmseat.cache.usage import ProcessView, Use, judge_use, scan_processes

CTX = multiprocessing.get_context("fork")
NOBODY = 65534


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        child.kill()
        child.wait(timeout=30)


def _hold(children: list[subprocess.Popen[str]], code: str, env: dict[str, str]) -> int:
    """Start a Python child that runs `code`, says 'ready' and waits for stdin to close."""
    child = subprocess.Popen(
        [sys.executable, "-c", code + "\nprint('ready', flush=True)\nimport sys; sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )
    children.append(child)
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child.pid


def test_environment_and_open_files_of_real_processes(
    tmp_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    by_env = tmp_path / "cache" / "r0"
    by_file = tmp_path / "cache" / "r0.stale-20261120T101500Z"
    unused = tmp_path / "cache" / "r1.stale-20261120T101500Z"
    for directory in (by_env, by_file, unused):
        (directory / "vllm").mkdir(parents=True)
    (by_file / "vllm" / "graph.so").write_bytes(b"\x7fELF")
    env_pid = _hold(children, "pass", {"VLLM_CACHE_ROOT": str(by_env / "vllm"), "PATH": "/usr/bin"})
    held = str(by_file / "vllm" / "graph.so")
    file_pid = _hold(children, f"handle = open({held!r}, 'rb')", {"PATH": "/usr/bin"})
    by_map = tmp_path / "cache" / "r2.stale-20261120T101500Z"
    by_cwd = tmp_path / "cache" / "r3.stale-20261120T101500Z"
    for directory in (by_map, by_cwd):
        (directory / "vllm").mkdir(parents=True)
    (by_map / "vllm" / "kernel.so").write_bytes(b"\x7fELF" + bytes(8188))
    # dlopen()-style: map the file, close the descriptor; only /proc/PID/maps still shows it
    mapped = str(by_map / "vllm" / "kernel.so")
    map_pid = _hold(children, (
        f"import mmap\nhandle = open({mapped!r}, 'rb')\n"
        "view = mmap.mmap(handle.fileno(), 0, prot=mmap.PROT_READ)\nhandle.close()"
    ), {"PATH": "/usr/bin"})
    cwd_pid = _hold(children, f"import os\nos.chdir({str(by_cwd)!r})", {"PATH": "/usr/bin"})
    views = list(scan_processes())
    assert judge_use(by_map, views).pids == (map_pid,)
    assert judge_use(by_cwd, views).pids == (cwd_pid,)
    env_use = judge_use(by_env, views)
    file_use = judge_use(by_file, views)
    assert env_use.use is Use.YES and env_pid in env_use.pids and file_pid not in env_use.pids
    assert file_use.use is Use.YES and file_use.pids == (file_pid,)
    # No reader: "no" only when every process could be read (this sandbox's pid 1 cannot be,
    # even by root: then it is "unknown", naming the unreadable pids).
    unreadable = tuple(sorted(v.pid for v in views if v.environ is None and v.open_files is None))
    unused_use = judge_use(unused, views)
    assert unused_use.use is (Use.UNKNOWN if unreadable else Use.NO)
    assert unused_use.unreadable_pids == unreadable
    # a dir whose name is a prefix of the used dirs' names is not used through them
    assert judge_use(tmp_path / "cache" / "r", views).pids == ()


def _scan_as_nobody(directory: str, queue: Any) -> None:
    os.setgroups([])
    os.setresgid(NOBODY, NOBODY, NOBODY)
    os.setresuid(NOBODY, NOBODY, NOBODY)
    use = judge_use(Path(directory), scan_processes())
    queue.put((use.use.value, use.pids, use.unreadable))


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")
def test_no_permission_is_unknown_not_no(
    tmp_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    """A process we may not read could be using the dir: the answer is unknown, never no."""
    directory = tmp_path / "cache" / "r0.stale-20261120T101500Z"
    directory.mkdir(parents=True)
    _hold(children, "pass", {"VLLM_CACHE_ROOT": str(directory), "PATH": "/usr/bin"})
    queue = CTX.Queue()
    child = CTX.Process(target=_scan_as_nobody, args=(str(directory), queue))
    child.start()
    state, pids, unreadable = queue.get(timeout=60)
    child.join(30)
    assert child.exitcode == 0
    assert state == "unknown" and pids == () and unreadable >= 1


def test_environment_through_an_alias_is_resolved(
    tmp_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    """Before: a stale dir named through a symlink in an environment value read as unused, and
    `cache-audit --prune --yes` removed it under the running process."""
    stale = tmp_path / "cache" / "r0.stale-20261120T101500Z"
    (stale / "vllm").mkdir(parents=True)
    alias = tmp_path / "srv-alias"
    alias.symlink_to(stale)
    pid = _hold(children, "pass", {"VLLM_CACHE_ROOT": str(alias / "vllm"), "PATH": "/usr/bin"})
    views = list(scan_processes())
    use = judge_use(stale, views)
    assert use.use is Use.YES and use.pids == (pid,)
    # and a dir that merely shares a prefix with the resolved path is not used through it
    assert pid not in judge_use(tmp_path / "cache" / "r0.stale-20261120T10", views).pids


def test_directory_under_a_linked_ancestor(
    tmp_path: Path, children: list[subprocess.Popen[str]]
) -> None:
    """Open files and maps are reported resolved; a cache root reached through a link matches
    through `real_directory`."""
    real = tmp_path / "data"
    stale = real / "cache" / "r0.stale-20261120T101500Z"
    (stale / "vllm").mkdir(parents=True)
    (stale / "vllm" / "k.so").write_bytes(b"\x7fELF")
    (tmp_path / "var-cache").symlink_to(real)
    seen_as = tmp_path / "var-cache" / "cache" / "r0.stale-20261120T101500Z"
    held = str(stale / "vllm" / "k.so")
    pid = _hold(children, f"handle = open({held!r}, 'rb')", {"PATH": "/usr/bin"})
    views = list(scan_processes())
    use = judge_use(seen_as, views, real_directory=Path(os.path.realpath(seen_as)))
    assert use.use is Use.YES and use.pids == (pid,)


PARTLY_READ: list[tuple[dict[str, Any], Use]] = [
    # (what was read of pid 6, expected) for a dir the readable parts do not name
    ({"environ": {"P": "/x"}, "open_files": None}, Use.UNKNOWN),  # files, maps, cwd unreadable
    ({"environ": None, "open_files": ("/a",)}, Use.UNKNOWN),  # environment unreadable
    ({"environ": {"P": "/x"}, "open_files": ("/a",), "unreadable_parts": ("memory maps",)},
     Use.UNKNOWN),
    ({"environ": {"P": "/x"}, "open_files": ("/a",), "unreadable_parts": ("cwd",)}, Use.UNKNOWN),
    ({"environ": {"P": "/x"}, "open_files": ("/a",)}, Use.NO),  # everything read
    # a part that was read already says yes: the unreadable rest cannot change that
    ({"environ": {"P": "/c/r0/vllm"}, "open_files": None, "unreadable_parts": ("open files",)},
     Use.YES),
]


@pytest.mark.parametrize(("read", "expected"), PARTLY_READ)
def test_any_unreadable_part_is_unknown_never_no(read: dict[str, Any], expected: Use) -> None:
    """Issue 10: the answer is unknown when ANY part of a process could not be read."""
    use = judge_use(Path("/c/r0"), [ProcessView(6, "y", **read)])
    assert use.use is expected
    assert use.unreadable_pids == ((6,) if expected is Use.UNKNOWN else ())


def test_scan_marks_the_part_it_could_not_read(
    tmp_path: Path, children: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real process whose memory maps cannot be read (psutil raising AccessDenied for it, as
    it does for another user's process): its view says so and the answer is unknown."""
    unused = tmp_path / "cache" / "r1.stale-20261120T101500Z"
    unused.mkdir(parents=True)
    pid = _hold(children, "pass", {"PATH": "/usr/bin"})
    real_maps = psutil.Process.memory_maps

    def maps(self: psutil.Process, grouped: bool = True) -> Any:
        if self.pid == pid:
            raise psutil.AccessDenied(self.pid)
        return real_maps(self, grouped)

    monkeypatch.setattr(psutil.Process, "memory_maps", maps)
    [view] = [v for v in scan_processes() if v.pid == pid]
    assert view.unreadable_parts == ("memory maps",)
    assert view.environ is not None and view.open_files is not None  # the other parts were read
    assert judge_use(unused, [view]).use is Use.UNKNOWN
