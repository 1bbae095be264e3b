"""Remediation on the real vLLM (CPU build), issues 20, 27 and 28, one scenario on five engine
starts: the drafter's weights are swapped behind the same config key (the field's stale-drafter
incident), no request flows, and `rocmseat watch` with `[remediate]` and `[canary]` on climbs the
ladder by itself; then the good weights are back and `rocmseat remediate reset r0` brings the
drafter back.

- The canary (issue 27 item 5): launch starts the engine with per-request spec-decode metrics;
  the watcher learns each prompt's acceptance for the key on the good drafter, with no traffic;
  on the swapped drafter `drafter_canary_failed` fires with no traffic (seconds after READY
  printed) and starts step 1; step 1 (caches moved aside, a fresh compile) is judged by the
  canary's first round on the new engine, no traffic needed: "not the cache" (seconds after the
  new engine was seen printed). Step 2 (serving without the drafter) is judged on traffic: its
  tokens/s against the collapsed rate.
- The supervisor (issue 28 item 5): the `[remediate] restart_command` is a small program written
  here that stops a replica with SIGTERM only (no SIGKILL, no group kill, as supervisors do),
  starts `rocmseat launch SEAT --replica r0 [--no-drafter]` in a session of its own and returns
  once launch sent READY=1 to the notify socket it made (as systemd's `Type=notify` does). Before
  the fix the watcher's blocked SIGTERM and SIGINT reached every launch started this way (SigBlk
  0x4002) and step 2's restart found step 1's engine deaf to SIGTERM. Here the SigBlk of every
  launch is 0 and each one stops on SIGTERM.

Engine starts: the first and the swap by hand through the supervisor; step 1's fresh compile,
step 2 without the drafter and the reset by the watcher (and `remediate reset`) through it. The
first starts on the whole loop's compiled cache when the session has it (WarmCache,
tests/e2e/world.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import PROMPTS, Traffic, cli, count_start, gauge, note, wait_for
from tests.e2e.test_ready_engine import (  # ready_world: the fixture, shared
    ready,
    ready_world,  # noqa: F401
    use_drafter,
)
from tests.e2e.world import REPLICA, SERVED, World, dump_toml

pytestmark = pytest.mark.engine

SCENARIO = "remediate_ladder"  # the test's name (e2e conftest)
CANARY_INTERVAL_S = 10.0
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


def journal(world: World) -> list[dict[str, Any]]:
    folder = world.state_dir / "remediation" / "e2e-cpu" / "journal"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] \
        if folder.is_dir() else []


def outcome(world: World, step: int, text: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        return next((r for r in journal(world) if r["step"] == step and r["outcome"] == text),
                    None)
    return check


def watch_line(world: World, text: str) -> str | None:
    assert world.watch is not None
    return next((line for line in world.watch.log.read_text(errors="replace").splitlines()
                 if text in line), None)


def ready_line(world: World, min_al: float | None = None) -> str | None:
    """/ready/r0's line when it answers 200 (and, with `min_al`, the judged acceptance length
    is at least that: drafts of the drafter were judged), else None."""
    code, body = ready(world)
    if code != 200:
        return None
    if min_al is not None:
        al = gauge(world.exporter(), "rocmseat_spec_acceptance_length", replica=REPLICA)
        if al is None or al < min_al:
            return None
    return body


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


def test_remediate_ladder(ready_world: World) -> None:  # noqa: F811 (the fixture)
    world = ready_world
    control = world.root / "sigterm-control"
    control.mkdir()
    script = world.root / "sigterm-supervisor.py"
    script.write_text(SUPERVISOR)
    seat = world.root / "seat-remediate.toml"
    use_drafter(world, "good.safetensors")
    doc = world.seat_doc()
    # a shared 2-core machine: a cold compile beside another engine took over 300 s once
    doc["readiness"]["timeout_s"] = 900.0
    doc["canary"] = {"enabled": True, "interval_s": CANARY_INTERVAL_S, "prompts": list(PROMPTS),
                     "max_tokens": 24}
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

    def seen() -> str:
        return (f"journal: {[(r['step'], r['outcome']) for r in journal(world)]}\nsupervisor:\n"
                f"{(control / 'supervisor.log').read_text()}\n{world.seen()}")

    def until(what: str, check: Callable[[], Any], timeout_s: float, *, traffic: bool) -> Any:
        if not traffic:
            return wait_for(what, check, timeout_s, seen)
        with Traffic(world.engine_port, SERVED):
            return wait_for(what, check, timeout_s, seen)

    try:
        cold_s = supervise("drafter")
        world.start_watch(seat)
        learned = until("the canary's baseline for the key",
                        lambda: watch_line(world, "canary-baseline-learned"), 300, traffic=False)
        assert watch_line(world, "alert=drafter_canary_failed state=firing") is None
        # the swap: other weights behind the same header, the key unchanged; a restart on the
        # cache (the field's incident); no request is sent until step 2
        use_drafter(world, "bad.safetensors")
        swap_s = supervise("drafter")
        by_hand = len(_pids(control))
        t_swap = time.time()
        fired = until("drafter_canary_failed with no traffic", lambda: watch_line(
            world, "alert=drafter_canary_failed state=firing"), 300, traffic=False)
        t_fired = time.time()
        started = until("step 1 starts", outcome(world, 1, "started"), 300, traffic=False)
        assert started["why"]["alert"] == "drafter_canary_failed", started
        # the step is journalled before its action runs (a crash mid-action is on record), so
        # the move is awaited in the watcher's own words, then seen on disk
        until("step 1 moves the cache aside",
              lambda: watch_line(world, f"replica={REPLICA} cache-moved-aside"), 120, traffic=False)
        assert list(world.cache_root.glob("r0.stale-*")), "the cache was moved aside"
        not_cache = until("step 1 judged by the canary",
                          outcome(world, 1, "still collapsed after a fresh compile"), 900,
                          traffic=False)
        figures = not_cache["figures"]
        assert not_cache["diagnosis"] == "not the cache"
        assert figures["verified_by"] == "canary", not_cache
        assert figures["canary_rates"].startswith("0.0"), not_cache
        step2 = until("step 2: serving without the drafter",
                      outcome(world, 2, "serving without the drafter"), 900, traffic=True)
        tps, collapsed = step2["figures"]["tokens_per_s"], step2["figures"].get(
            "collapsed_tokens_per_s")
        assert "r0 runs without its drafter since" in step2["diagnosis"]
        assert not [r for r in journal(world) if r["outcome"].startswith("failed")], \
            journal(world)
        no_drafter = until("/ready/r0 200 without the drafter", lambda: ready_line(world), 120,
                           traffic=True)
        until("replica_no_drafter on the exporter",
              lambda: gauge(world.exporter(), "rocmseat_alert_active", replica=REPLICA,
                            alert="replica_no_drafter") == 1.0, 60, traffic=True)

        # the good weights back; the operator resets: the drafter returns
        use_drafter(world, "good.safetensors")
        t_reset = time.time()
        result: list[subprocess.CompletedProcess[str]] = []
        resetter = threading.Thread(target=lambda: result.append(cli(
            "remediate", "reset", REPLICA, "--seat", seat, "--state-dir", world.state_dir,
            timeout_s=900)), daemon=True)
        resetter.start()
        until("the reset's restart", lambda: result or None, 900, traffic=False)
        assert result[0].returncode == 0, result[0].stderr
        back = until("/ready/r0 200 with the drafter back", lambda: ready_line(world, 3.0), 300,
                     traffic=True)
        t_back = time.time()

        launches = _pids(control)
        by_watcher = launches[by_hand:]
        assert [m for _, m in by_watcher] == ["drafter", "no-drafter", "drafter"], launches
        masks = {n: (control / f"sigblk-{n}").read_text() for n in range(len(launches))}
        assert all(int(m, 16) == 0 for m in masks.values()), masks
        # every launch but the last was stopped by the supervisor's SIGTERM alone
        assert [p for p, _ in launches[:-1] if _alive(p)] == []
        # launch passed the canary's flag: vLLM logs its non-default args at startup
        # (vllm/entrypoints/serve/utils/api_utils.py: "non-default args: ...")
        assert "'per_request_spec_decode_metrics': 'summary'" in (
            control / "launch-0.log").read_text(errors="replace")
        last = launches[-1][0]
        asked = time.monotonic()
        os.kill(last, signal.SIGTERM)
        wait_for("the last launch stops on SIGTERM", lambda: not _alive(last), 180,
                 lambda: (control / f"launch-{len(launches) - 1}.log").read_text()[-3000:])
        stop_s = time.monotonic() - asked

        starts = [count_start(control / f"launch-{n}.log", SCENARIO)
                  for n in range(len(launches))]
        # step 1 moved the cache aside: its start compiled into an empty cache
        assert starts[by_hand] == "fresh", starts
        t1, t1_done = at(started["when"]), at(not_cache["when"])
        seen_new = t1 + figures["ready_after_s"]  # the watcher saw step 1's new engine
        t2_done = at(step2["when"])
        log = (control / "supervisor.log").read_text()
        first = (f"{starts[0]}, on the cache of {world.warm_from}" if world.warm_from
                 else starts[0])
        note(SCENARIO, f"first start ({first}) READY after {cold_s:.0f} s; canary "
             f"{learned.split('rocmseat-watch ')[-1]}")
        note(SCENARIO, f"drafter swapped behind the key (restart on the cache READY after "
             f"{swap_s:.0f} s), no traffic: drafter_canary_failed {t_fired - t_swap:.0f} s after "
             f"READY (canary interval {CANARY_INTERVAL_S:g} s): {fired.split('alert=')[-1]}")
        note(SCENARIO, f"step 1 started {t1 - t_swap:.1f} s after READY (alert "
             f"{started['why']['alert']}, cache moved aside); its fresh compile seen after "
             f"{figures['ready_after_s']:.0f} s; judged by the canary {t1_done - seen_new:.1f} s "
             f"after the new engine was seen, no traffic: 'not the cache' (rates "
             f"{figures['canary_rates']} against {figures['canary_baselines']})")
        against = ("no collapsed rate: the collapse was seen with no traffic"
                   if collapsed is None else f"against {collapsed} collapsed")
        note(SCENARIO, f"step 2 -> serving without the drafter: {t2_done - t1_done:.1f} s "
             f"({tps} tok/s, {against}); /ready '{no_drafter}'")
        note(SCENARIO, f"reset with the good weights back -> /ready '{back}' with judged drafts: "
             f"{t_back - t_reset:.1f} s")
        note(SCENARIO, f"{len(launches)} launches by the SIGTERM-only supervisor ({by_hand} by "
             f"hand, {len(by_watcher)} by the watcher's restart_command and the reset); SigBlk "
             f"of each: {sorted(set(masks.values()))}; SIGTERM -> stopped per launch: "
             f"{_stop_seconds(log)} s; the last stopped {stop_s:.1f} s after the test's SIGTERM")
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
