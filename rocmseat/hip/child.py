"""The probe's child program: `python -m rocmseat.hip.child ROLE ...`, run in a fresh process.

Roles (one HIP process each, as vLLM's and RCCL's workers are):
  order   the PCI address of every HIP device index, nothing else (launch runs it with no
          HIP-level mask: the node's global numbering, docs/hip.md "Numbering")
  info    map HIP device indices to PCI addresses, hipDeviceCanAccessPeer both ways
  owner   allocate on a device, fill a pattern (timed pinned H2D/D2H), export the IPC handle,
          keep the buffer until the parent says "done" on stdin
  opener  open the handle on another device, copy it into local memory (timed D2D), verify
          every byte

It speaks JSON lines on stdout: {"stage": S} before each stage (the parent times each stage),
then one of {"result": ...}, {"error": {"stage", "call", "code", "name"}}, {"handle": ...}.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rocmseat.hip import api, library
from rocmseat.hip.api import Hip
from rocmseat.sysfs.parse import normalize_pci_address

PR_SET_PDEATHSIG = 1  # linux/prctl.h
BANDWIDTH_REPEATS = 3


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when its parent dies (prctl(2)), and exit if it already has.

    PR_SET_PDEATHSIG fires when the parent *thread* that spawned us exits: the probe must be
    driven from a thread that outlives it (the preflight and launch callers use the main thread).
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died between fork and prctl: then we were reparented already.
    if os.getppid() != parent_pid:
        os._exit(1)


class Reporter:
    """The JSON-lines channel to the parent, on a private copy of the original stdout.

    fd 1 itself is pointed at stderr: a runtime that prints to stdout (a debug build, a log
    level) must not splice its text into a protocol line and lose the result.
    """

    def __init__(self) -> None:
        self.stage = "start"
        sys.stdout.flush()
        self._out = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)

    def send(self, message: dict[str, Any]) -> None:
        self._out.write(json.dumps(message) + "\n")
        self._out.flush()

    def enter(self, stage: str) -> None:
        self.stage = stage
        self.send({"stage": stage})


def pattern(size_bytes: int, seed: int) -> bytes:
    # Pseudo-random bytes: a shifted or partial copy cannot verify by accident.
    return random.Random(seed).randbytes(size_bytes)


def gbps(size_bytes: int, seconds: float) -> float | None:
    return size_bytes / seconds / 1e9 if seconds > 0 else None


def best_gbps(timed: Callable[[], float], size_bytes: int) -> float | None:
    """The best of BANDWIDTH_REPEATS timed copies; None (not 0) when no timing was usable."""
    rates = [gbps(size_bytes, timed()) for _ in range(BANDWIDTH_REPEATS)]
    return max((r for r in rates if r is not None), default=None)


def bus_ids(hip: Hip, count: int) -> list[str]:
    """Every visible HIP index's PCI address, in the parent's form (0000:05:00.0, lower case)."""
    ids = (hip.pci_bus_id(i) for i in range(count))
    return [normalize_pci_address(raw) or raw for raw in ids]


def _device_index(hip: Hip, rep: Reporter, pci: str) -> int:
    rep.enter("device_count")
    count = hip.device_count()
    rep.enter("pci_bus_id")
    seen = bus_ids(hip, count)
    if pci.lower() not in seen:
        rep.send({"not_visible": {"pci": pci, "visible": seen}})
        raise SystemExit(0)
    return seen.index(pci.lower())


def run_info(hip: Hip, rep: Reporter, args: argparse.Namespace) -> dict[str, Any]:
    rep.enter("runtime_version")
    version = hip.runtime_version()
    rep.enter("device_count")
    count = hip.device_count()
    rep.enter("pci_bus_id")
    devices = bus_ids(hip, count)
    missing = [p for p in args.pci if p.lower() not in devices]
    if missing:
        rep.send({"not_visible": {"pci": missing[0], "visible": devices}})
        raise SystemExit(0)
    a, b = (devices.index(p.lower()) for p in args.pci)
    rep.enter("can_access_peer")
    peer = {"a_to_b": hip.can_access_peer(a, b), "b_to_a": hip.can_access_peer(b, a)}
    enable: dict[str, str | None] = {}
    rep.enter("enable_peer")
    for key, (dev, other) in (("a_to_b", (a, b)), ("b_to_a", (b, a))):
        if not peer[key]:
            continue
        hip.set_device(dev)
        try:
            hip.enable_peer_access(other)
            enable[key] = None
        except api.HipCallError as exc:  # recorded, judged as a p2p warning
            enable[key] = f"{exc.name} ({exc.code})"
    return {"runtime_version": version, "devices": devices, "peer": peer, "enable_peer": enable}


def run_order(hip: Hip, rep: Reporter, args: argparse.Namespace) -> dict[str, Any]:
    rep.enter("runtime_version")
    version = hip.runtime_version()
    rep.enter("device_count")
    count = hip.device_count()
    rep.enter("pci_bus_id")
    return {"runtime_version": version, "devices": bus_ids(hip, count)}


def run_owner(hip: Hip, rep: Reporter, args: argparse.Namespace) -> dict[str, Any]:
    device = _device_index(hip, rep, args.pci[0])
    n = args.bytes
    rep.enter("set_device")
    hip.set_device(device)
    rep.enter("malloc")
    dev = hip.malloc(n)
    src = hip.host_malloc(n)
    back = hip.host_malloc(n)
    rep.enter("fill")
    ctypes.memmove(src, pattern(n, args.seed), n)
    rep.enter("h2d")
    h2d = best_gbps(lambda: hip.timed_memcpy_s(dev, src, n, api.MEMCPY_HOST_TO_DEVICE), n)
    rep.enter("d2h")
    d2h = best_gbps(lambda: hip.timed_memcpy_s(back, dev, n, api.MEMCPY_DEVICE_TO_HOST), n)
    hip.synchronize()
    if ctypes.string_at(back, n) != ctypes.string_at(src, n):
        rep.enter("verify_local")
        raise VerifyError("the owner's own device buffer does not read back its pattern")
    rep.enter("get_handle")
    handle = hip.ipc_get_handle(dev)
    rep.send({"handle": handle.hex(), "h2d_gbps": h2d, "d2h_gbps": d2h})
    rep.enter("wait_opener")
    sys.stdin.readline()
    rep.enter("free")
    hip.host_free(src)
    hip.host_free(back)
    hip.free(dev)
    return {"h2d_gbps": h2d, "d2h_gbps": d2h}


class VerifyError(Exception):
    pass


def run_opener(hip: Hip, rep: Reporter, args: argparse.Namespace) -> dict[str, Any]:
    device = _device_index(hip, rep, args.pci[0])
    n = args.bytes
    rep.enter("set_device")
    hip.set_device(device)
    rep.enter("malloc")
    local = hip.malloc(n)
    host = hip.host_malloc(n)
    rep.enter("memset")
    hip.memset(local, 0, n)  # a copy that silently does nothing must not verify
    hip.synchronize()
    rep.enter("open")
    remote = hip.ipc_open(bytes.fromhex(args.handle))
    rep.enter("copy")
    d2d = best_gbps(lambda: hip.timed_memcpy_s(local, remote, n, api.MEMCPY_DEVICE_TO_DEVICE), n)
    hip.synchronize()
    rep.enter("d2h")
    hip.memcpy(host, local, n, api.MEMCPY_DEVICE_TO_HOST)
    hip.synchronize()
    rep.enter("verify")
    got = ctypes.string_at(host, n)
    want = pattern(n, args.seed)
    if got != want:
        first = next(i for i in range(n) if got[i] != want[i])
        bad = sum(1 for x, y in zip(got, want, strict=True) if x != y)
        raise VerifyError(f"{bad} of {n} bytes differ, first at offset {first}")
    rep.enter("close")
    hip.ipc_close(remote)
    rep.enter("free")
    hip.host_free(host)
    hip.free(local)
    return {"d2d_gbps": d2d, "verified_bytes": n}


ROLES = {"order": run_order, "info": run_info, "owner": run_owner, "opener": run_opener}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rocmseat.hip.child")
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--pci", action="append", default=[])
    parser.add_argument("--library", type=Path)
    parser.add_argument("--bytes", type=int, default=1 << 20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--handle", default="")
    args = parser.parse_args(argv)
    if args.role != "order" and not args.pci:
        parser.error(f"role {args.role} needs --pci")
    die_with_parent(args.parent_pid)

    rep = Reporter()
    rep.enter("load")
    try:
        loaded = library.load(os.environ, args.library)
        hip = api.Hip(loaded.lib)
    except (library.LibraryNotFoundError, api.MissingSymbolError) as exc:
        rep.send({"no_runtime": str(exc)})
        return 0
    started = time.monotonic()
    try:
        result = ROLES[args.role](hip, rep, args)
    except api.HipCallError as exc:
        rep.send({"error": {"stage": rep.stage, "call": exc.call, "code": exc.code,
                            "name": exc.name, "library": loaded.source}})
        return 0
    except VerifyError as exc:
        rep.send({"error": {"stage": rep.stage, "call": "", "code": None, "name": str(exc),
                            "library": loaded.source}})
        return 0
    result["library"] = loaded.source
    result["child_wall_s"] = time.monotonic() - started
    rep.send({"result": result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
