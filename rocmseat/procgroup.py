"""The one way rocmseat starts a child and ends it: every child leads a process group of its
own, and every kill goes to that group (docs/architecture.md, "Processes").

A child's descendants stay in its group unless they leave it (`setsid`), so one `killpg` ends
a hung compiler, a vLLM worker or a shell pipeline together with the child; what a child left
behind after it exited keeps the group id and is swept the same way. rocmseat.runner (short
commands), launch's supervisor (the engine), the speculation gate's children and the HIP probe
all start through `spawn` and stop through the functions below.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from rocmseat.errors import RocmseatError

# what `stdin=`/`stdout=`/`stderr=` of subprocess.Popen take
Stream = int | IO[Any] | None


def spawn(
    argv: Sequence[str],
    *,
    stdin: Stream = subprocess.DEVNULL,
    stdout: Stream = None,
    stderr: Stream = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    own_session: bool = True,
    created: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> subprocess.Popen[bytes]:
    """Start argv (a list, never a shell) as the leader of a new process group.

    `own_session` (the default): a new session too, so no terminal's signals reach it and it
    cannot take a terminal; False: a new group in our session (the HIP probe's children, which
    ask the kernel for PR_SET_PDEATHSIG themselves). OSError (no such program) is the caller's.

    The child starts with an empty signal mask whatever the calling thread blocks: a blocked
    signal stays blocked across fork and execve (signal(7), "Signal mask and pending
    signals"), and the watcher blocks SIGTERM and SIGINT in every thread to take them with
    sigtimedwait (rocmseat.cli.watch). Without this a restart command, and the engine it
    starts, ignored SIGTERM from systemd, `timeout` and launch's own forwarding.

    `created` is handed the Popen object before the fork, so a caller that must kill the child
    whatever happens holds it even when an exception (^C, a signal handler's) lands after the
    fork and before this returns: CPython sets `pid` right after the fork and then reads the
    exec status, and an exception there neither kills the child nor returns it
    (Lib/subprocess.py, `Popen._execute_child`). One bytecode remains, between the fork's
    return and the store of `pid`.
    """
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, ())
    return _Popen(
        tuple(str(a) for a in argv),
        created=created,
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        start_new_session=own_session,
        process_group=None if own_session else 0,
        # CPython's subprocess has no signal-mask argument (Lib/subprocess.py, Popen): the
        # mask is emptied in the child between fork and exec. Only when something is blocked:
        # without a preexec_fn CPython keeps its faster vfork path (Modules/_posixsubprocess.c).
        # The function is a single call into C that takes no lock another thread could hold
        # at fork (the hazard the subprocess docs warn of for preexec_fn with threads).
        preexec_fn=_empty_signal_mask if blocked else None,
    )


class _Popen(subprocess.Popen[bytes]):
    """subprocess.Popen that hands itself to `created` before it forks (see `spawn`)."""

    def __init__(self, args: tuple[str, ...], *,
                 created: Callable[[subprocess.Popen[bytes]], None] | None,
                 **kwargs: Any) -> None:
        if created is not None:
            created(self)
        super().__init__(args, **kwargs)


def _empty_signal_mask() -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def signal_group(pgid: int, signum: int) -> bool:
    """Send `signum` to process group `pgid`; False when the group is gone (or not ours)."""
    if pgid <= 1 or pgid == os.getpgrp():
        return False  # never our own group, never init's: a caller's bug must not kill us
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def kill_group(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL the child's whole group (the child included); a gone group is fine."""
    signal_group(proc.pid, signal.SIGKILL)


def exit_code_of(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


def describe_returncode(rc: int) -> str:
    if rc < 0:
        try:
            return f"on signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"on signal {-rc}"
    return f"with status {rc}"


def wait_for(proc: subprocess.Popen[Any], timeout_s: float | None) -> bool:
    """Wait up to `timeout_s` (None: as long as it takes) for the child to exit; True when it
    has."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout_s)
    return proc.poll() is not None


def stop_group(proc: subprocess.Popen[Any], grace_s: float, *,
               reap_s: float | None = None) -> None:
    """SIGTERM the child's group, SIGKILL after the grace, then sweep what is left of it.

    `reap_s`: the longest to wait for the killed child (None: until it is gone; a process in
    uninterruptible sleep takes as long as its I/O)."""
    if proc.poll() is None:
        signal_group(proc.pid, signal.SIGTERM)
        wait_for(proc, grace_s)
    if proc.poll() is None:
        kill_group(proc)
        if reap_s is None:
            proc.wait()
        else:
            wait_for(proc, reap_s)
    # Children the engine left behind keep its process group id after it is gone.
    kill_group(proc)


def sweep_group(proc: subprocess.Popen[Any], join: Callable[[float], None],
                grace_s: float) -> None:
    """The child has exited; what it left in its group (a worker, a compiler child) still
    holds its output pipe. SIGTERM them, give them `grace_s` to go, then SIGKILL."""
    signal_group(proc.pid, signal.SIGTERM)
    join(grace_s)
    kill_group(proc)
    join(10.0)


@contextlib.contextmanager
def affinity(cpus: frozenset[int] | None) -> Iterator[None]:
    """Bind the calling thread while it forks: the child inherits the CPU set at fork.

    Without numactl this is the CPU half of the NUMA binding (memory then follows first touch
    on those CPUs). Done here rather than in a preexec_fn, which is unsafe with threads.
    """
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as exc:
        raise RocmseatError(f"cannot bind to CPUs {sorted(cpus)}: {exc.strerror}") from None
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
