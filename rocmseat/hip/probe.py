"""Run the probe of one GPU pair in fresh child processes, each stage under a hard timeout.

The preflight process never loads HIP: every HIP call happens in `python -m rocmseat.hip.child`.
Each child runs in its own process group, which this module kills on a timeout, an exception or
the end of the pair; each child also asks the kernel to SIGKILL it when this process dies
(prctl PR_SET_PDEATHSIG), so a killed preflight leaves no child behind. This is the one module of
the room that starts a child (rocmseat.procgroup.spawn; it supervises children that speak a
line protocol).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import rocmseat
from rocmseat.procgroup import kill_group, spawn

PROBE_BYTES = 32 << 20  # per direction; large enough for a meaningful GB/s over PCIe
EXIT_GRACE_S = 5.0  # a finished child gets this long to exit by itself before SIGKILL


@dataclass(frozen=True, slots=True)
class StageFailure:
    """Why a child did not finish: the stage, and HIP's error or the hang/exit."""

    role: str  # info | owner | opener
    stage: str
    reason: str  # "hipErrorInvalidDevicePointer (17)", "hung: no progress within 30 s", ...
    call: str = ""
    error_name: str | None = None
    error_code: int | None = None
    hung: bool = False


@dataclass(frozen=True, slots=True)
class Direction:
    owner: str
    opener: str
    failure: StageFailure | None
    owner_h2d_gbps: float | None = None
    owner_d2h_gbps: float | None = None
    d2d_gbps: float | None = None
    verified_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class PairProbe:
    a: str
    b: str
    wall_s: float
    no_runtime: str | None = None  # the loader's reason: no libamdhip64
    runtime_failure: StageFailure | None = None  # HIP's own error before any pair work
    not_visible: str | None = None  # "0000:86:00.0 (HIP sees: ...)"
    library: str | None = None
    runtime_version: int | None = None
    devices: tuple[str, ...] = ()
    peer: Mapping[str, bool] = field(default_factory=dict)
    enable_peer: Mapping[str, str | None] = field(default_factory=dict)
    directions: tuple[Direction, ...] = ()


class _Outcome(Exception):
    """A child stopped the pair's probe early (raised inside, turned into a PairProbe)."""

    def __init__(self, **fields: Any) -> None:
        super().__init__(fields)
        self.fields = fields


class Child:
    """One child process and its JSON-lines stdout, read under a per-stage deadline."""

    proc: subprocess.Popen[bytes]  # set by spawn before it forks (`_hold`)

    def __init__(self, role: str, argv: list[str], env: Mapping[str, str],
                 spawned: list[Child]) -> None:
        self.role = role
        self.stage = "start"
        self._buffer = b""
        self.hung = False
        # A file, not a pipe: a chatty runtime (AMD_LOG_LEVEL) must not block on a full pipe.
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in kill)
        # Held by `_children` before the fork, the Popen the moment it exists: an exception
        # between the fork and the caller's next line (a ^C, a signal handler's) must not
        # leave a child running that nobody kills (rocmseat.procgroup.spawn, `created`).
        spawned.append(self)
        spawn(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            own_session=False,  # its own group: killed as a whole on timeout
            created=self._hold,
        )

    def _hold(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def message(self, stage_timeout_s: float) -> dict[str, Any]:
        """The next non-stage message; stage lines reset the deadline. Raises _Outcome."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + stage_timeout_s
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue  # a library printing to stdout; not ours
                if not isinstance(msg, dict):
                    continue
                if "stage" in msg:
                    self.stage = str(msg["stage"])
                    deadline = time.monotonic() + stage_timeout_s
                    continue
                return msg
            left = deadline - time.monotonic()
            ready = select.select([fd], [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                self.hung = True
                raise _Outcome(failure=StageFailure(
                    self.role, self.stage, f"no progress within {stage_timeout_s:g} s",
                    hung=True))
            chunk = os.read(fd, 65536)
            if not chunk:
                raise _Outcome(failure=self._exited())
            self._buffer += chunk

    def _exited(self) -> StageFailure:
        code = self.proc.wait()
        self._stderr.seek(0)
        tail = self._stderr.read()[-2000:].decode(errors="replace").strip().splitlines()
        why = f"child exited {code}" if code >= 0 else f"child killed by signal {-code}"
        return StageFailure(self.role, self.stage, f"{why}: {tail[-1] if tail else 'no output'}")

    def send(self, line: str) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()

    def finish(self, grace_s: float) -> None:
        """Let a child that is not hung exit on its own (a runtime frees its memory on exit),
        then kill its group whatever it did."""
        if not self.hung:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace_s)
        self.kill()

    def kill(self) -> None:
        """SIGKILL the child's group and reap it; a child whose fork never happened (the
        exception came before it) has nothing to kill."""
        proc = getattr(self, "proc", None)
        if getattr(proc, "pid", None) is not None:
            assert proc is not None
            kill_group(proc)
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
        self._stderr.close()


@contextlib.contextmanager
def _children() -> Iterator[list[Child]]:
    spawned: list[Child] = []
    try:
        yield spawned
    except BaseException:
        for child in spawned:  # an exception or ^C here: kill at once
            child.kill()
        raise
    for child in spawned:  # no child survives the pair
        child.finish(EXIT_GRACE_S)


def child_env(env: Mapping[str, str] | None, *, inherit: bool = True) -> dict[str, str]:
    """This process's environment overlaid with the replica's (`inherit`), or `env` alone, and
    our package importable."""
    merged = {**(os.environ if inherit else {}), **(env or {})}
    package_parent = str(Path(rocmseat.__file__).resolve().parent.parent)
    merged["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_parent, merged.get("PYTHONPATH", "")) if p)
    return merged


def probe_pair(
    a: str,
    b: str,
    *,
    env: Mapping[str, str] | None,
    stage_timeout_s: float,
    library: Path | None,
    size_bytes: int = PROBE_BYTES,
) -> PairProbe:
    started = time.monotonic()
    environ = child_env(env)
    base = [sys.executable, "-m", "rocmseat.hip.child"]
    common = ["--parent-pid", str(os.getpid())]
    if library is not None:
        common += ["--library", str(library)]

    fields: dict[str, Any] = {}
    with _children() as spawned:

        def spawn(role: str, *extra: str) -> Child:
            return Child(role, [*base, role, *common, *extra], environ, spawned)

        try:
            info_child = spawn("info", "--pci", a, "--pci", b)
            info = _final(info_child, stage_timeout_s)
            info_child.finish(EXIT_GRACE_S)
            fields.update(
                library=info.get("library"), runtime_version=info.get("runtime_version"),
                devices=tuple(info.get("devices", ())), peer=dict(info.get("peer", {})),
                enable_peer=dict(info.get("enable_peer", {})))
            directions = []
            for seed, (owner_pci, opener_pci) in enumerate(((a, b), (b, a)), start=1):
                directions.append(_direction(
                    spawn, owner_pci, opener_pci, seed=seed, size_bytes=size_bytes,
                    stage_timeout_s=stage_timeout_s))
                if directions[-1].failure is not None and directions[-1].failure.hung:
                    break  # a hung runtime would hang the reverse too: report within the timeout
            fields["directions"] = tuple(directions)
        except _Outcome as outcome:
            fields.update(outcome.fields)
            if "failure" in fields:  # a failure before any pair work: the runtime itself
                fields["runtime_failure"] = fields.pop("failure")
    return PairProbe(a=a, b=b, wall_s=time.monotonic() - started, **fields)


@dataclass(frozen=True, slots=True)
class HipOrder:
    """What HIP numbers as device 0, 1, ... in one environment, or why it could not be read."""

    devices: tuple[str, ...]  # PCI address of each HIP index (empty when `failure` is set)
    failure: str | None  # "no libamdhip64 ...", "hipGetDeviceCount: hipErrorNoDevice (100)", ...
    library: str | None = None
    runtime_version: int | None = None


def probe_order(environ: Mapping[str, str], *, stage_timeout_s: float,
                library: Path | None) -> HipOrder:
    """HIP's device numbering in exactly `environ` (not overlaid on ours): one `order` child.
    launch passes the replica's environment without HIP-level masks (docs/hip.md)."""
    argv = [sys.executable, "-m", "rocmseat.hip.child", "order", "--parent-pid", str(os.getpid())]
    if library is not None:
        argv += ["--library", str(library)]
    with _children() as spawned:
        child = Child("order", argv, child_env(environ, inherit=False), spawned)
        try:
            result = _final(child, stage_timeout_s)
        except _Outcome as outcome:
            fields = outcome.fields
            if "no_runtime" in fields:
                return HipOrder((), str(fields["no_runtime"]))
            failure = fields.get("failure")
            why = (f"{failure.call or failure.stage}: {failure.reason}"
                   if isinstance(failure, StageFailure) else str(fields))
            return HipOrder((), why, library=fields.get("library"))
    devices = result.get("devices")
    if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
        return HipOrder((), f"the order child answered no device list: {result!r:.80}")
    version = result.get("runtime_version")
    return HipOrder(tuple(devices), None, library=str(result.get("library") or "") or None,
                    runtime_version=version if isinstance(version, int) else None)


def _final(child: Child, stage_timeout_s: float) -> dict[str, Any]:
    """The child's result, or raise _Outcome for no runtime / not visible / an error."""
    msg = child.message(stage_timeout_s)
    if "result" in msg:
        return dict(msg["result"])
    raise _Outcome(**_stop_fields(child, msg))


def _stop_fields(child: Child, msg: dict[str, Any]) -> dict[str, Any]:
    if "no_runtime" in msg:
        return {"no_runtime": str(msg["no_runtime"])}
    if "not_visible" in msg:
        visible = [str(d) for d in msg["not_visible"].get("visible", [])]
        seen = ", ".join(visible) or "none"
        return {"not_visible": f"{msg['not_visible'].get('pci')} (HIP sees: {seen})",
                "devices": tuple(visible)}
    err = msg.get("error", {})
    code = err.get("code")
    name = err.get("name", "")
    reason = f"{name} ({code})" if code is not None else str(name)
    library = {"library": str(err["library"])} if err.get("library") else {}
    failure = StageFailure(child.role, str(err.get("stage", child.stage)), reason,
                           call=str(err.get("call", "")),
                           error_name=name if code is not None else None, error_code=code)
    return {**library, "failure": failure}


def _direction(spawn: Any, owner_pci: str, opener_pci: str, *, seed: int, size_bytes: int,
               stage_timeout_s: float) -> Direction:
    sizing = ["--bytes", str(size_bytes), "--seed", str(seed)]
    owner = spawn("owner", "--pci", owner_pci, *sizing)
    try:
        msg = owner.message(stage_timeout_s)
        if "handle" not in msg:
            fields = _stop_fields(owner, msg)
            if "failure" not in fields:
                raise _Outcome(**fields)
            return Direction(owner_pci, opener_pci, fields["failure"])
        h2d, d2h = msg.get("h2d_gbps"), msg.get("d2h_gbps")
        opener = spawn("opener", "--pci", opener_pci, "--handle", str(msg["handle"]), *sizing)
        try:
            result = _final(opener, stage_timeout_s)
        except _Outcome as outcome:
            if "failure" not in outcome.fields:
                raise
            opener.finish(EXIT_GRACE_S)
            owner.send("done")  # let the owner free its buffer; a second failure changes nothing
            with contextlib.suppress(_Outcome):
                _final(owner, stage_timeout_s)
            return Direction(owner_pci, opener_pci, outcome.fields["failure"], h2d, d2h)
        owner.send("done")
        _final(owner, stage_timeout_s)
    except _Outcome as outcome:
        if "failure" not in outcome.fields:
            raise
        return Direction(owner_pci, opener_pci, outcome.fields["failure"])
    return Direction(owner_pci, opener_pci, None, h2d, d2h, result.get("d2d_gbps"),
                     result.get("verified_bytes"))
