"""`rocmseat launch` end to end (the edge: reads /sys, asks the engine's Python, runs it).

seat -> inventory and pairs -> replica plan -> config key -> the pair's preflight gate ->
cache store (keep or move aside) -> supervised engine -> startup report in the state dir.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.atomic import LockTimeout, exclusive_lock
from rocmseat.errors import ConfigError, NoDeviceError, RocmseatError
from rocmseat.findings import Finding, Severity
from rocmseat.launch.gate import PreflightRefused, launch_gate, sysfs_gate
from rocmseat.launch.judge import ExpectRule, JudgeContext, judge_startup
from rocmseat.launch.plan import (
    KeyStatus,
    ReplicaPlan,
    plan_replicas,
    probed_hip_order,
    with_probed_hip_indices,
)
from rocmseat.launch.readiness import Canary, Fetch, http_fetch
from rocmseat.launch.report import build_report, previous_start, replica_state_dir, save_report
from rocmseat.launch.sdnotify import NOTIFY_ENV, Notifier
from rocmseat.launch.startuplog import StartupLogReader, StartupSummary, classify_text
from rocmseat.launch.supervise import EngineSpec, SupervisionResult, supervise
from rocmseat.node.inventory import Inventory
from rocmseat.seat.model import Seat

Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Placement:
    inventory: Inventory | None
    plans: tuple[ReplicaPlan, ...]


def place(seat: Seat, sysfs_root: Path | None, *, numactl: str | None = None,
          keys: Mapping[str, KeyStatus] | None = None) -> Placement:
    """Read the inventory (rocm only) and plan every replica."""
    if seat.backend == "cpu" or sysfs_root is None:
        return Placement(None, plan_replicas(seat, None, (), numactl=None, keys=keys))
    from rocmseat.node.inventory import read_inventory
    from rocmseat.preflight.pairs import propose_pairs

    inventory = read_inventory(sysfs_root)
    if not inventory.gpus:
        found = f" (found {', '.join(inventory.other_cards)})" if inventory.other_cards else ""
        raise NoDeviceError(f"no AMD GPU under {sysfs_root / 'class' / 'drm'}{found}: "
                            f"rocm seat {seat.name} has nothing to run on",
                            hint="check --sysfs-root, or `rocmseat preflight` on this node")
    proposed = propose_pairs(inventory) if seat.replicas.mode == "auto" else ()
    plans = plan_replicas(seat, inventory, proposed, numactl=numactl, keys=keys)
    return Placement(inventory, plans)


def find_numactl() -> str | None:
    return shutil.which("numactl")


def gpu_arch(placement: Placement, plan: ReplicaPlan) -> list[str] | None:
    if placement.inventory is None:
        return None
    arches = []
    for address in plan.pci_pair:
        gpu = placement.inventory.gpu(address)
        if gpu is None or gpu.gfx_target is None:
            return None
        arches.append(gpu.gfx_target)
    return arches


def key_status(seat: Seat, placement: Placement, plan: ReplicaPlan) -> KeyStatus:
    """The replica's key, or unknown with the reason (a dry run needs no engine Python)."""
    from rocmseat.cache.key import replica_key

    try:
        key = replica_key(seat, plan.replica, gpu_arch(placement, plan))
    except ConfigError:
        raise
    except RocmseatError as exc:
        return KeyStatus(None, f"unknown: {exc.message}")
    return KeyStatus(key.digest, "")


def dry_run(seat: Seat, sysfs_root: Path | None) -> tuple[ReplicaPlan, ...]:
    placement = place(seat, sysfs_root, numactl=find_numactl())
    keys = {p.replica: key_status(seat, placement, p) for p in placement.plans}
    return tuple(dataclasses.replace(p, key=keys[p.replica]) for p in placement.plans)


def pick(plans: Sequence[ReplicaPlan], replica: str) -> ReplicaPlan:
    for plan in plans:
        if plan.replica == replica:
            return plan
    names = ", ".join(p.replica for p in plans)
    raise ConfigError(f"--replica {replica!r}: no such replica in this seat (replicas: {names})")


def expect_rules(seat: Seat) -> list[ExpectRule]:
    return [ExpectRule(e.pattern, e.when, Severity(e.severity)) for e in seat.expect_log]


def usable_state_dir(state_dir: Path, seat: Seat, replica: str) -> Path:
    """The replica's state dir, made; a config error naming it when it cannot be."""
    path = replica_state_dir(state_dir, seat.name, replica)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"state dir {state_dir}: cannot make {path}: {exc.strerror or exc}",
                          hint="check state_dir in the seat file, or pass --state-dir") from None
    return path


def check_engine_command(plan: ReplicaPlan, python: Path, env: Mapping[str, str]) -> None:
    """Before any side effect: an engine command or Python that is not there is a seat error
    (the Python is asked for the versions of the config key)."""
    for key, command in (("command", plan.engine_argv[0]), ("python", str(python))):
        if shutil.which(command, path=env.get("PATH", os.defpath)) is None:
            raise ConfigError(f"engine.{key}: {command!r} is not an executable "
                              f"{'file' if os.sep in command else 'on PATH'}",
                              hint=f"check [engine] {key} in the seat file")


def preflight_only(seat: Seat, replica: str, *, sysfs_root: Path | None, state_dir: Path,
                   say: Say, environ: Mapping[str, str] | None = None) -> list[Finding]:
    """`launch --preflight-only` (the replica unit's ExecStartPre=): see launch/gate.py."""
    plan = pick(place(seat, sysfs_root, numactl=None).plans, replica)
    usable_state_dir(state_dir, seat, plan.replica)
    return sysfs_gate(seat, plan, sysfs_root, state_dir,
                      environ=os.environ if environ is None else environ, say=say)


@dataclass(frozen=True, slots=True)
class LaunchResult:
    exit_code: int
    reason: str
    report_path: Path
    findings: tuple[Finding, ...]


def launch_replica(
    seat: Seat, replica: str, *, sysfs_root: Path | None, state_dir: Path, echo: Say, say: Say,
    environ: Mapping[str, str] | None = None, stop_grace_s: float = 30.0,
    probe_interval_s: float = 2.0, fetch: Fetch = http_fetch,
) -> LaunchResult:
    placement = place(seat, sysfs_root, numactl=find_numactl())
    plan = pick(placement.plans, replica)
    # One launch per replica: a second one would move the cache of a running engine aside and
    # race it for the port. The kernel drops the lock when we die; the engine does not inherit
    # it (PEP 446: our descriptors are not inheritable).
    lock = usable_state_dir(state_dir, seat, plan.replica) / ".launch.lock"
    try:
        with exclusive_lock(lock, timeout_s=0.0):
            return _launch_locked(seat, placement, plan, sysfs_root=sysfs_root,
                                  state_dir=state_dir, echo=echo, say=say, environ=environ,
                                  stop_grace_s=stop_grace_s, probe_interval_s=probe_interval_s,
                                  fetch=fetch)
    except LockTimeout:
        raise RocmseatError(f"replica {plan.replica} of seat {seat.name} is already being "
                            f"launched by another process (lock {lock})",
                            hint="stop that one first (systemctl stop, or SIGTERM)") from None


def _launch_locked(
    seat: Seat, placement: Placement, plan: ReplicaPlan, *, sysfs_root: Path | None,
    state_dir: Path, echo: Say, say: Say, environ: Mapping[str, str] | None,
    stop_grace_s: float, probe_interval_s: float, fetch: Fetch,
) -> LaunchResult:
    from rocmseat.cache.key import replica_key
    from rocmseat.cache.store import prepare

    environ = dict(os.environ if environ is None else environ)
    child_env = {k: v for k, v in environ.items() if k != NOTIFY_ENV}
    child_env.update(plan.env)
    check_engine_command(plan, seat.engine.python, child_env)
    notifier = Notifier.from_environ(environ)
    started = dt.datetime.now(dt.UTC)
    # Order: key (cheap, no side effect) -> preflight gate -> cache prepare (the side effect:
    # a move-aside) -> engine, so a refused start leaves the cache as it was.
    notifier.status("computing the config key")
    key = replica_key(seat, plan.replica, gpu_arch(placement, plan))
    notifier.status("preflight of the pair")
    try:
        preflight = launch_gate(seat, plan, sysfs_root, state_dir, environ=environ, say=say)
    except PreflightRefused as refused:
        # startup.json must not keep showing the last good start while the unit fails
        save_report(state_dir, build_report(
            dataclasses.replace(plan, key=KeyStatus(key.digest, "")), classify_text(""),
            refused.findings, started_at=started, finished_at=dt.datetime.now(dt.UTC),
            moved_aside=None, changed_factors=[],
            outcome={"ready": False, "ready_after_s": None, "timed_out": False,
                     "exit_code": refused.exit_code, "engine_returncode": None,
                     "signal_received": None, "refused": True, "reason": refused.message}))
        raise
    try:
        prepared = prepare(seat.cache_root, plan.replica, key, seat_name=seat.name)
    except OSError as exc:  # e.g. cache_root is a file
        why = ("not a directory" if seat.cache_root.exists() and not seat.cache_root.is_dir()
               else exc.strerror or str(exc))
        raise ConfigError(f"cache_root {seat.cache_root}: {why}",
                          hint="check cache_root in the seat file") from None
    say(prepared.message)
    plan = dataclasses.replace(plan, key=KeyStatus(key.digest, ""),
                               env={**plan.env, **prepared.env})
    order = probed_hip_order(preflight)
    if order is not None:
        probed = with_probed_hip_indices(plan, order)
        if probed.hip_indices != plan.hip_indices:
            say(f"HIP numbers {', '.join(plan.pci_pair)} as {probed.hip_indices}, not "
                f"{plan.hip_indices} (PCI bus order): using the probe's indices")
        plan = probed
    previous, problems = previous_start(state_dir, seat.name, plan.replica)
    for problem in problems:
        say(f"startup history entry skipped: {problem}")
    rules = expect_rules(seat)
    reader = StartupLogReader([r.pattern for r in rules])
    ctx = JudgeContext(
        replica=plan.replica, moved_aside=prepared.moved_aside, cache_dir=prepared.replica_dir,
        drafter_configured=seat.drafter is not None, previous=previous, expect=rules,
    )
    changed = [c.describe() for c in prepared.changed]

    def write(summary: StartupSummary, complete: bool, outcome: dict[str, Any]) -> tuple[
            Path, list[Finding]]:
        findings = [*preflight, *judge_startup(summary, dataclasses.replace(ctx,
                                                                            complete=complete))]
        doc = build_report(plan, summary, findings, started_at=started,
                           finished_at=dt.datetime.now(dt.UTC), moved_aside=prepared.moved_aside,
                           changed_factors=changed, outcome=outcome)
        return save_report(state_dir, doc), findings

    def on_ready(summary: StartupSummary, after_s: float) -> None:
        path, findings = write(summary, True, {
            "ready": True, "ready_after_s": round(after_s, 1), "timed_out": False,
            "exit_code": None, "engine_returncode": None, "signal_received": None,
            "refused": False, "reason": None})
        for finding in findings:
            if finding.severity is not Severity.OK and finding.family != "preflight":
                say(f"{finding.severity.value}: {finding.check_id}: {finding.message}")
        say(f"replica {plan.replica} ready in {after_s:.0f} s; startup report {path}")

    child_env.update(plan.env)  # now with the cache variables and the probed HIP indices
    spec = EngineSpec(
        argv=plan.argv, env=child_env,
        cpus=frozenset(plan.binding.cpus) if plan.binding.method == "cpu-affinity" else None,
        canary=Canary(plan.probe_url, seat.model.served_name or seat.name,
                      seat.readiness.canary_prompt, seat.readiness.canary_max_tokens),
        readiness_timeout_s=seat.readiness.timeout_s, probe_interval_s=probe_interval_s,
        stop_grace_s=stop_grace_s,
    )
    say(f"starting replica {plan.replica}: {shlex.join(plan.argv)}")
    result = supervise(spec, reader=reader, notifier=notifier, echo=echo, on_ready=on_ready,
                       fetch=fetch)
    path, findings = write(result.summary, result.ready, _outcome(result))
    if not result.ready:  # when ready, on_ready has said them already
        for finding in findings:
            if finding.severity is not Severity.OK and finding.family != "preflight":
                say(f"{finding.severity.value}: {finding.check_id}: {finding.message}")
    say(f"replica {plan.replica}: {result.reason}; startup report {path}")
    return LaunchResult(result.exit_code, result.reason, path, tuple(findings))


def _outcome(result: SupervisionResult) -> dict[str, Any]:
    return {
        "ready": result.ready,
        "ready_after_s": round(result.ready_after_s, 1) if result.ready_after_s else None,
        "timed_out": result.timed_out,
        "exit_code": result.exit_code,
        "engine_returncode": result.engine_returncode,
        "signal_received": result.signal_received,
        "refused": False,
        "reason": result.reason,
    }
