"""The one subprocess runner: argv lists only, never a shell, and every wait bounded.

A child runs in a process group of its own (rocmseat/procgroup.py). `run` never waits past
its timeout by more than a short grace: at the deadline the child's group is killed, the pipes
are read for at most `KILL_GRACE_S` more and then closed, whoever still holds them (a grandchild
that left the group with `setsid` keeps the write end of our pipe open and, under
`communicate()`, kept the caller waiting as long as it lived). Captured output is capped
(`limit_bytes` per stream): a child that prints more is killed and the result says so, rather
than the caller holding gigabytes (400 MB of `scontrol` output once took 1.2 GB of memory).
Output is decoded as UTF-8 with replacement: a stray byte is a `?`-like mark, never a crash.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rocmseat.procgroup import kill_group, signal_group, spawn, wait_for

# after a kill (timeout, too much output), or after the child exited while something it
# started still holds its pipes: the longest the pipes are read before they are closed
KILL_GRACE_S = 2.0
# `cancel` set: the child's group gets SIGTERM, then SIGKILL after this
CANCEL_GRACE_S = 10.0
# per stream; `scontrol -o show node` is ~1.5 KB a node: 64 MiB holds a 40,000-node cluster
DEFAULT_LIMIT_BYTES = 64 << 20
_CHUNK = 65536


@dataclass(frozen=True, slots=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False
    # the child printed more than the cap on a stream: it was killed, the output is cut there
    truncated: bool = False
    cancelled: bool = False  # the caller's `cancel` ended it (SIGTERM to its group)

    @property
    def ok(self) -> bool:
        return (self.returncode == 0 and not self.timed_out and not self.truncated
                and not self.cancelled)


class Runner(Protocol):
    def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        input_text: str | None = None,
        cancel: threading.Event | None = None,
    ) -> Completed: ...


def run(
    argv: Sequence[str],
    *,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    input_text: str | None = None,
    limit_bytes: int = DEFAULT_LIMIT_BYTES,
    cancel: threading.Event | None = None,
) -> Completed:
    """Run argv to completion. A missing program is returncode 127, not an exception.

    Returns within `timeout_s` + `KILL_GRACE_S` (+ the time the kernel takes to reap a killed
    child). Without a timeout it waits for the child, then at most `KILL_GRACE_S` for the pipes.
    `cancel` set while it runs: SIGTERM to the child's group, SIGKILL `CANCEL_GRACE_S` later.
    """
    args = tuple(str(a) for a in argv)
    try:
        proc = spawn(
            args,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
        )
    except FileNotFoundError:
        return Completed(args, 127, "", f"{args[0]}: command not found")
    except PermissionError as exc:
        return Completed(args, 126, "", f"{args[0]}: {exc.strerror}")
    try:
        return _collect(proc, args, timeout_s, input_text, limit_bytes, cancel)
    except BaseException:
        kill_group(proc)
        _close(proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=KILL_GRACE_S)
        raise


def _collect(proc: subprocess.Popen[bytes], args: tuple[str, ...], timeout_s: float | None,  # noqa: PLR0912, PLR0915, PLR0917
             input_text: str | None, limit_bytes: int,
             cancel: threading.Event | None = None) -> Completed:
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    buffers = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    pending = memoryview(input_text.encode("utf-8")) if input_text is not None else None
    start = time.monotonic()
    deadline = None if timeout_s is None else start + timeout_s
    cut_at: float | None = None  # when the pipes are given up (after a kill or an exit)
    timed_out = truncated = cancelled = False
    with selectors.DefaultSelector() as sel:
        for fd in buffers:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        if proc.stdin is not None:
            if pending:
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE)
            else:
                _close_stdin(proc)
        while sel.get_map():
            now = time.monotonic()
            if not cancelled and cancel is not None and cancel.is_set():
                cancelled = True
                signal_group(proc.pid, signal.SIGTERM)
                deadline = min(deadline or now + CANCEL_GRACE_S, now + CANCEL_GRACE_S)
            if cut_at is None and deadline is not None and now >= deadline:
                timed_out = not cancelled
                kill_group(proc)
                cut_at = now + KILL_GRACE_S
            if cut_at is None and proc.poll() is not None:
                # the child is gone; what it left behind may hold the pipes for ever
                cut_at = now + KILL_GRACE_S
            if cut_at is not None and now >= cut_at:
                break
            ends = [t for t in (deadline, cut_at) if t is not None]
            wait = max(min(min(ends, default=now + 0.2) - now, 0.2), 0.0)
            for key, _ in sel.select(wait):
                fd = int(key.fd)
                if fd not in buffers:  # stdin
                    assert pending is not None
                    try:
                        pending = pending[os.write(fd, pending[:_CHUNK]):]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(fd)
                        _close_stdin(proc)
                    continue
                try:
                    chunk = os.read(fd, _CHUNK)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fd)
                    continue
                buf = buffers[fd]
                room = limit_bytes - len(buf)
                buf += chunk[:max(room, 0)]
                if len(chunk) > room and not truncated:
                    truncated = True
                    kill_group(proc)
                    cut_at = time.monotonic() + KILL_GRACE_S
    _close(proc)
    if not (timed_out or truncated):
        # the pipes are closed (or given up); the child may still be on its way out, or run
        # on without them: wait for it as long as the timeout lets (and `cancel` does)
        cancelled, timed_out = _wait_exit(proc, deadline, cancel, cancelled)
    if timed_out or truncated or (cancelled and proc.poll() is None):
        kill_group(proc)
        wait_for(proc, KILL_GRACE_S)
    code = proc.returncode if proc.returncode is not None else -9
    return Completed(args, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                     timed_out=timed_out, truncated=truncated, cancelled=cancelled)


def _wait_exit(proc: subprocess.Popen[bytes], deadline: float | None,
               cancel: threading.Event | None, cancelled: bool) -> tuple[bool, bool]:
    """Wait for the child until `deadline`; `cancel` set meanwhile: SIGTERM to its group and
    `CANCEL_GRACE_S` more. Returns (cancelled, timed out)."""
    while True:
        now = time.monotonic()
        if not cancelled and cancel is not None and cancel.is_set():
            cancelled = True
            signal_group(proc.pid, signal.SIGTERM)
            deadline = min(deadline or now + CANCEL_GRACE_S, now + CANCEL_GRACE_S)
        step = 0.2 if cancel is not None and not cancelled else None
        left = None if deadline is None else max(deadline - now, 0.0)
        wait_s = left if step is None else min(step, left if left is not None else step)
        if wait_for(proc, wait_s):
            return cancelled, False
        if deadline is not None and time.monotonic() >= deadline:
            return cancelled, not cancelled


def _close_stdin(proc: subprocess.Popen[bytes]) -> None:
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()


def _close(proc: subprocess.Popen[bytes]) -> None:
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
