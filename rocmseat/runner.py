"""The one subprocess runner: argv lists only, never a shell."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


class Runner(Protocol):
    def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        input_text: str | None = None,
    ) -> Completed: ...


def run(
    argv: Sequence[str],
    *,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    input_text: str | None = None,
) -> Completed:
    """Run argv to completion. A missing program is returncode 127, not an exception.

    The child gets its own session so a timeout kills its whole process group: a hung grandchild
    must not outlive us.
    """
    args = tuple(str(a) for a in argv)
    try:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            text=True,
            start_new_session=True,
        )
    except FileNotFoundError:
        return Completed(args, 127, "", f"{args[0]}: command not found")
    except PermissionError as exc:
        return Completed(args, 126, "", f"{args[0]}: {exc.strerror}")
    try:
        out, err = proc.communicate(input=input_text, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return Completed(args, proc.returncode, out, err, timed_out=True)
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    return Completed(args, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
