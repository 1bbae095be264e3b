"""Remediation's ladder on the real vLLM (CPU build) under a supervisor that stops a replica
with SIGTERM only (issue 28, item 5): no SIGKILL, no process-group kill, as supervisors do.

The `[remediate] restart_command` is that supervisor, a small program written here and run by
`rocmseat watch`: it sends SIGTERM to the `rocmseat launch` it started last (the pid it wrote),
waits for it to go, starts `rocmseat launch SEAT --replica r0 [--no-drafter]` in a session of
its own and returns once launch sent READY=1 to the notify socket it made (as systemd's
`Type=notify` does). Before the fix the watcher's blocked SIGTERM and SIGINT reached every
launch started this way (SigBlk 0x4002): step 2's restart found step 1's engine deaf to
SIGTERM and the ladder halted there. Here: step 1, step 2, serving without the drafter; the
SigBlk of every launch the watcher's supervisor started is 0, and each stops on SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.harness import Traffic, note, wait_for
from tests.e2e.test_ready_engine import (  # ready_world: the fixture, shared
    ready,
    ready_world,  # noqa: F401
    use_drafter,
)
from tests.e2e.world import REPLICA, SERVED, World, dump_toml

pytestmark = pytest.mark.engine

SCENARIO = "the_ladder_under_a_sigterm_only_supervisor"  # the test's name (e2e conftest)
SUPERVISOR = r'''
import os, signal, socket, subprocess, sys, time
control, seat = sys.argv[1], sys.argv[2]
mode = os.environ.get("ROCMSEAT_REMEDIATE_MODE", "drafter")
replica = os.environ.get("ROCMSEAT_REPLICA", "r0")
pidfile = os.path.join(control, "launch.pid")

def log(text):
    with open(os.path.join(control, "supervisor.log"), "a") as f:
        f.write(f"{time.time():.1f} {text}\n")

def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True

# stop the running replica: SIGTERM to its pid, nothing else
if os.path.exists(pidfile):
    pid = int(open(pidfile).read())
    if not gone(pid):
        os.kill(pid, signal.SIGTERM)
        log(f"SIGTERM {pid}")
        deadline = time.monotonic() + 180
        while not gone(pid):
            if time.monotonic() > deadline:
                log(f"{pid} ignored SIGTERM for 180 s")
                sys.exit(f"the replica ({pid}) ignored SIGTERM for 180 s")
            time.sleep(0.2)
        log(f"{pid} stopped")
n = len([x for x in os.listdir(control) if x.startswith("launch-")])
sock_path = os.path.join(control, f"notify-{n}.sock")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(sock_path)
sock.settimeout(1.0)
env = dict(os.environ, NOTIFY_SOCKET=sock_path)
argv = [sys.executable, "-m", "rocmseat", "launch", seat, "--replica", replica]
if mode == "no-drafter":
    argv.append("--no-drafter")
with open(os.path.join(control, f"launch-{n}.log"), "ab") as out:
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
with open(pidfile + ".tmp", "w") as f:
    f.write(str(child.pid))
os.replace(pidfile + ".tmp", pidfile)
with open(os.path.join(control, "pids"), "a") as f:
    f.write(f"{child.pid} {mode}\n")
log(f"started {child.pid} mode={mode}")
deadline = time.monotonic() + 900
while True:
    if child.poll() is not None:
        sys.exit(f"rocmseat launch exited {child.returncode} before READY=1")
    if time.monotonic() > deadline:
        sys.exit("no READY=1 within 900 s")
    try:
        if b"READY=1" in sock.recv(4096):
            break
    except socket.timeout:
        pass
status = open(f"/proc/{child.pid}/status").read()
sigblk = next(x for x in status.splitlines() if x.startswith("SigBlk:")).split()[1]
with open(os.path.join(control, f"sigblk-{n}"), "w") as f:
    f.write(sigblk)
log(f"{child.pid} READY SigBlk={sigblk}")
'''


def journal(world: World) -> list[dict]:
    folder = world.state_dir / "remediation" / "e2e-cpu" / "journal"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] \
        if folder.is_dir() else []


def outcome(world: World, step: int, text: str):
    def check():
        return next((r for r in journal(world) if r["step"] == step and r["outcome"] == text),
                    None)
    return check


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _pids(control: Path) -> list[tuple[int, str]]:
    path = control / "pids"
    if not path.exists():
        return []
    return [(int(a), b) for a, b in (line.split() for line in path.read_text().splitlines())]


def test_the_ladder_under_a_sigterm_only_supervisor(ready_world: World) -> None:  # noqa: F811
    world = ready_world
    control = world.root / "sigterm-control"
    control.mkdir()
    script = world.root / "sigterm-supervisor.py"
    script.write_text(SUPERVISOR)
    seat = world.root / "seat-sigterm.toml"
    use_drafter(world, "good.safetensors")
    doc = world.seat_doc()
    # a shared 2-core machine: a cold compile beside another engine took over 300 s once
    doc["readiness"]["timeout_s"] = 900.0
    doc["remediate"] = {"mode": "on",
                        "restart_command": [sys.executable, str(script), str(control), str(seat)],
                        "verify_drafts": 100, "verify_s": 20.0, "ready_timeout_s": 900.0,
                        "verify_timeout_s": 600.0}
    seat.write_text(dump_toml(doc))

    def supervise(mode: str) -> float:
        """The supervisor run by hand (the first start, the weights swap)."""
        start = time.monotonic()
        done = subprocess.run(command := doc["remediate"]["restart_command"], env=world.env(
            ROCMSEAT_SEAT="e2e-cpu", ROCMSEAT_REPLICA=REPLICA, ROCMSEAT_REMEDIATE_MODE=mode),
            capture_output=True, text=True, timeout=1000)
        assert done.returncode == 0, (command, done.stderr,
                                      (control / "supervisor.log").read_text())
        return time.monotonic() - start

    try:
        cold_s = supervise("drafter")
        world.start_watch(seat)
        use_drafter(world, "bad.safetensors")  # other weights behind the same key
        swap_s = supervise("drafter")
        by_hand = len(_pids(control))
        t_swap = time.time()

        def until(what: str, check, timeout_s: float):
            with Traffic(world.engine_port, SERVED):
                return wait_for(what, check, timeout_s, lambda: (
                    f"journal: {[r['outcome'] for r in journal(world)]}\nsupervisor:\n"
                    f"{(control / 'supervisor.log').read_text()}\n{world.seen()}"))

        started = until("step 1 starts", outcome(world, 1, "started"), 300)
        assert started["why"]["alert"] in ("spec_drafter_dead", "spec_acceptance_drop")
        not_cache = until("step 1: still collapsed after a fresh compile",
                          outcome(world, 1, "still collapsed after a fresh compile"), 900)
        step2 = until("step 2: serving without the drafter",
                      outcome(world, 2, "serving without the drafter"), 900)
        assert not [r for r in journal(world) if r["outcome"].startswith("failed")], \
            journal(world)
        served = until("/ready/r0 200 without the drafter",
                       lambda: ready(world)[1] if ready(world)[0] == 200 else None, 120)
        t_done = time.time()
        launches = _pids(control)
        by_watcher = launches[by_hand:]
        assert [m for _, m in by_watcher] == ["drafter", "no-drafter"], launches
        masks = {n: (control / f"sigblk-{n}").read_text() for n in range(len(launches))}
        assert all(int(m, 16) == 0 for m in masks.values()), masks
        # every launch but the last was stopped by the supervisor's SIGTERM alone
        assert [p for p, _ in launches[:-1] if _alive(p)] == []
        last = launches[-1][0]
        asked = time.monotonic()
        os.kill(last, signal.SIGTERM)
        wait_for("the last launch stops on SIGTERM", lambda: not _alive(last), 180,
                 lambda: (control / f"launch-{len(launches) - 1}.log").read_text()[-3000:])
        stop_s = time.monotonic() - asked
        log = (control / "supervisor.log").read_text()
        note(SCENARIO, f"{len(launches)} launches by the SIGTERM-only supervisor ({by_hand} by "
             f"hand: cold {cold_s:.0f} s, swapped weights {swap_s:.0f} s; "
             f"{len(by_watcher)} by the watcher's restart_command); SigBlk of each: "
             f"{sorted(set(masks.values()))}")
        note(SCENARIO, f"swap -> step 1 started {at(started['when']) - t_swap:.1f} s; step 1 -> "
             f"'not the cache' (p0 {not_cache['figures']['p0']}) "
             f"{at(not_cache['when']) - at(started['when']):.1f} s; -> step 2 'serving without "
             f"the drafter' {at(step2['when']) - at(not_cache['when']):.1f} s "
             f"({step2['figures']['tokens_per_s']} tok/s against "
             f"{step2['figures']['collapsed_tokens_per_s']} collapsed); /ready '{served}' at "
             f"+{t_done - t_swap:.0f} s")
        note(SCENARIO, f"SIGTERM -> stopped, per launch the supervisor stopped: "
             f"{_stop_seconds(log)} s; the last launch stopped {stop_s:.1f} s after the test's "
             "SIGTERM")
    finally:
        for pid, _ in _pids(control):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # the test's own cleanup, not the supervisor


def _stop_seconds(log: str) -> list[float]:
    """Seconds from the supervisor's SIGTERM to the launch gone, from its log lines."""
    sent: dict[str, float] = {}
    out = []
    for line in log.splitlines():
        when, *words = line.split()
        if words[0] == "SIGTERM":
            sent[words[1]] = float(when)
        elif words[1:] == ["stopped"] and words[0] in sent:
            out.append(round(float(when) - sent[words[0]], 1))
    return out


def at(iso: str) -> float:
    """Unix time of a journal record's `when` (UTC, ...Z)."""
    import datetime as dt

    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
