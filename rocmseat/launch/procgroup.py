"""The engine's process group once it runs: wait, stop (SIGTERM, grace, SIGKILL), sweep what
it left behind, and the CPU affinity it inherits at fork. The Popen itself is in supervise.py,
the one module of this room that starts a process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Callable, Iterator

from rocmseat.errors import RocmseatError


def exit_code_of(rc: int) -> int:
    return 128 - rc if rc < 0 else rc


def describe_returncode(rc: int) -> str:
    if rc < 0:
        return f"on signal {signal.Signals(-rc).name}"
    return f"with status {rc}"


def wait_for(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=timeout_s)


def stop_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM the engine's group, SIGKILL after the grace, then sweep what is left of it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
        wait_for(proc, grace_s)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    # Children the engine left behind keep its process group id after it is gone.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def sweep_group(proc: subprocess.Popen[bytes], join: Callable[[float], None],
                grace_s: float) -> None:
    """The engine has exited; what it left in its group (a worker, a compiler child) still
    holds its output pipe. SIGTERM them, give them `grace_s` to go, then SIGKILL."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    join(grace_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    join(10.0)


@contextlib.contextmanager
def affinity(cpus: frozenset[int] | None) -> Iterator[None]:
    """Bind the calling thread while it forks: the engine inherits the CPU set at fork.

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
