"""`rocmseat launch` end to end (the edge: reads /sys, asks the engine's Python, runs it).

seat -> placement (rocmseat.placement.place) -> config key -> HIP's own numbering -> replica
plan -> the pair's preflight gate -> placement.json saved -> cache store (keep or move aside)
-> supervised engine -> startup report in the state dir. A start the gate refuses leaves the
recorded placement and the cache as they were.
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
from typing import TYPE_CHECKING, Any

from rocmseat import exitcodes
from rocmseat.atomic import LockTimeout
from rocmseat.engines import seat_engine
from rocmseat.engines.command import kind_problem
from rocmseat.errors import ConfigError, NoDeviceError, RocmseatError
from rocmseat.findings import Finding, Severity
from rocmseat.hip.numbering import ROCR_MASK, without_hip_masks
from rocmseat.launch.container import container_refusal, containerized, look_through
from rocmseat.launch.gate import (
    PreflightRefused,
    launch_gate,
    needs_hip,
    profile_problem,
    sysfs_gate,
)
from rocmseat.launch.judge import ExpectRule, JudgeContext, judge_startup
from rocmseat.launch.plan import KeyStatus, ReplicaPlan, engine_env, plan_replica, plan_replicas
from rocmseat.launch.readiness import Canary, Fetch, http_fetch, served_api_key
from rocmseat.launch.report import (
    build_report,
    check_replica_tree,
    previous_start,
    save_report,
)
from rocmseat.launch.sdnotify import Notifier
from rocmseat.launch.startuplog import StartupLogReader, StartupSummary, classify_text
from rocmseat.launch.supervise import EngineSpec, SupervisionResult, supervise
from rocmseat.placement.place import Placement, place
from rocmseat.placement.record import HipNumbering, ReplicaPlacement
from rocmseat.placement.recorded import write_recorded
from rocmseat.placement.resolve import probed_numbering
from rocmseat.placement.rules import replica_index
from rocmseat.redact import redact_argv
from rocmseat.seat.model import Seat
from rocmseat.statedir import LAUNCH_LOCK, REPLICA_DIR, StateDir

if TYPE_CHECKING:
    from rocmseat.cache.key import ConfigKey

Say = Callable[[str], None]
HIP_ORDER_TIMEOUT_S = 30.0


def place_for_launch(seat: Seat, sysfs_root: Path | None, *, state_dir: Path,
                     environ: Mapping[str, str] | None = None,
                     pin: tuple[str, ...] | None = None,
                     replica: str | None = None) -> Placement:
    """The seat's placement as launch starts from it: the node must be readable (a rocm seat),
    `pin` is `replica`'s identity (rocmseat.placement.place)."""
    return place(seat, sysfs_root=sysfs_root, state_root=state_dir, environ=environ, pin=pin,
                 replica=replica, require_node=True)


def placed_replica(seat: Seat, placed: Placement, replica: str, *,
                   pin: tuple[str, ...] | None = None, say: Say) -> ReplicaPlacement:
    """The record of `replica`, or why it must not start (exit 1): its pair is not what the unit
    pinned (an explicit seat edited since the units were rendered), or its pair, a stable
    identity, is no longer there (docs/launch.md, "A replica's pair is its identity")."""
    for name, problem in sorted(placed.problems.items()):
        if name == replica:
            say(f"{problem}: not used as replica {replica}'s identity")
    index = replica_index(seat, replica)
    known = seat.replicas.names is not None or any(r.index > (index or 0)
                                                   for r in placed.records)
    if index is not None and known and all(r.replica != replica for r in placed.records):
        # a replica of the seat (named by it, or below one that is placed), but the node has
        # no pair left for it: the others keep theirs (their identities), so it fails instead
        # of taking one of them
        held = "; ".join(f"{r.replica} on {', '.join(r.pci_pair)}" for r in placed.records)
        raise RocmseatError(f"replica {replica} of seat {seat.name}: start refused: this node "
                            "has no socket-local GPU pair for it"
                            + (f" (the node's pairs: {held})" if held else ""),
                            hint="`rocmseat preflight` shows the node's GPUs and pairs")
    record = placed.pick(replica)
    if record.lost:
        raise RocmseatError(f"replica {replica} of seat {seat.name}: start refused: "
                            f"{record.lost}",
                            hint="a replica never moves to another replica's GPUs: bring the "
                            "GPU back, or re-render the units (`rocmseat systemd render`) and "
                            "remove the replica's placement.json if the node changed for good")
    if pin is not None and tuple(sorted(record.pci_pair)) != pin:
        raise RocmseatError(f"replica {replica} of seat {seat.name}: start refused: its unit "
                            f"pins the pair {', '.join(pin)} but the seat places it on "
                            f"{', '.join(record.pci_pair) or 'no GPU'}",
                            hint="re-render the units after editing [replicas] "
                            "(`rocmseat systemd render` or `install`)")
    return record


def hip_numbering(plan: ReplicaPlan, environ: Mapping[str, str], *, say: Say,
                  library: Path | None = None,
                  stage_timeout_s: float = HIP_ORDER_TIMEOUT_S) -> HipNumbering | None:
    """The node's HIP numbering read by HIP itself: the probe's `order` child runs in the
    engine's environment *without* any HIP-level mask, so its device i is the global index i
    (docs/hip.md, "Numbering"). None, said on stderr, when HIP cannot be asked (no runtime, no
    device): then the PCI-bus-order assumption stays."""
    from rocmseat.hip.probe import probe_order

    env = without_hip_masks(engine_env(environ, plan))
    order = probe_order(env, stage_timeout_s=stage_timeout_s, library=library)
    if order.failure is not None:
        say(f"HIP numbering not read ({order.failure}): {plan.placement.hip_note}")
        return None
    return probed_numbering(order.devices, env.get(ROCR_MASK))


def find_numactl() -> str | None:
    return shutil.which("numactl")


def launch_key(seat: Seat, placed: Placement, replica: str) -> ConfigKey:
    """The config key `replica` starts under: its arch from the placement (key_arch, the rule
    `rocmseat key` and `cache-audit` use too), every other factor gathered now."""
    from rocmseat.cache.key import replica_key

    arch, why = placed.arch(replica)
    if arch is None:
        raise RocmseatError(f"replica {replica}: its config key cannot be computed: {why}")
    return replica_key(seat, replica, arch)


class KeyUnknown(RocmseatError):
    """The replica's config key cannot be computed: launch cannot check its cache (exit 2)."""

    exit_code = exitcodes.CANNOT_CHECK


def key_status(seat: Seat, placed: Placement, record: ReplicaPlacement) -> KeyStatus:
    """The replica's key, or unknown with the reason (a dry run needs no engine Python)."""
    try:
        key = launch_key(seat, placed, record.replica)
    except ConfigError:
        raise
    except RocmseatError as exc:
        return KeyStatus(None, f"unknown: {exc.message}")
    return KeyStatus(key.digest, "")


def dry_run(seat: Seat, sysfs_root: Path | None, *, state_dir: Path,
            environ: Mapping[str, str] | None = None,
            say: Say | None = None) -> tuple[ReplicaPlan, ...]:
    """Every replica's plan (a lost or HIP-invisible replica too: the plan says launch refuses
    it, and `refused_exit` gives the exit status launch would have)."""
    placed = place_for_launch(seat, sysfs_root, state_dir=state_dir, environ=environ)
    if say is not None:
        for name, problem in sorted(placed.problems.items()):
            say(f"{problem}: not used as replica {name}'s identity" if name else problem)
    keys = {r.replica: key_status(seat, placed, r) for r in placed.records if not r.lost}
    plans = plan_replicas(seat, placed.records, numactl=find_numactl(), keys=keys)
    return tuple(containerized(seat, p, sysfs_root) if not p.placement.lost else p
                 for p in plans)


def dry_run_problems(seat: Seat, plans: Sequence[ReplicaPlan],
                     environ: Mapping[str, str]) -> list[str]:
    """Every reason launch would exit 2 before starting, for the dry run to name (each once):
    start_problems, and a config key that cannot be computed."""
    out: list[str] = []
    for plan in plans:
        if plan.placement.lost:
            continue
        found = start_problems(seat, plan, engine_env(environ, plan))
        if plan.key.digest is None and plan.key.reason:
            found.append(f"replica {plan.replica}: config key {plan.key.reason}")
        out += [p for p in found if p not in out]
    return out


def refused_exit(plans: Sequence[ReplicaPlan], problems: Sequence[str] = ()) -> int:
    """The dry run's exit status: 0 when launch would start every replica, else the worst of
    their refusals (1 outranks 2, as a failing finding outranks an unknown one); `problems`
    (dry_run_problems) are exit 2 each."""
    codes = {r[0] for p in plans if (r := p.refusal()) is not None}
    if problems:
        codes.add(exitcodes.CANNOT_CHECK)
    if exitcodes.PROBLEM in codes:
        return exitcodes.PROBLEM
    return exitcodes.CANNOT_CHECK if codes else exitcodes.OK


def expect_rules(seat: Seat) -> list[ExpectRule]:
    return [ExpectRule(e.pattern, e.when, Severity(e.severity)) for e in seat.expect_log]


def usable_state_dir(record: ReplicaPlacement, state_dir: Path) -> Path:
    """The replica's state dir, made, after the rule of every dir launch writes and prunes in
    (no link, this user's, not writable by all: rocmseat.launch.report.check_replica_tree); a
    config error naming it when it cannot be, before any side effect."""
    check_replica_tree(state_dir, record.seat, record.replica)
    try:  # made never group- or other-writable, whatever the umask: placement.json reads back
        StateDir(state_dir).make_dir(REPLICA_DIR, seat=record.seat, replica=record.replica)
    except RocmseatError as exc:  # WriteRefused, UntrustedState
        raise ConfigError(f"state dir {state_dir}: cannot make {record.state_dir}: {exc.message}",
                          hint="check state_dir in the seat file, or pass --state-dir") from None
    return check_replica_tree(state_dir, record.seat, record.replica)


def start_problems(seat: Seat, plan: ReplicaPlan, env: Mapping[str, str]) -> list[str]:
    """What makes launch refuse to start the seat's replicas before any side effect, each a
    config error (exit 2): a container engine command, an engine command or Python that is not
    there (the Python is asked for the versions of the config key), a model or drafter path
    that does not exist, a `[preflight] profile` that does not load."""
    refusal = container_refusal(plan.engine_argv)
    problems = [refusal] if refusal else []
    mismatch = kind_problem(seat)  # a command that is not the [engine] kind's engine
    if mismatch is not None:
        problems.insert(0, mismatch)
    # in a container the command and the Python are the image's; the runtime is the host's
    program = look_through(plan.engine_argv).program[:1]
    checked = ((("runtime", seat.engine.runtime),) if seat.engine.runtime != "host" else
               (("command", plan.engine_argv[0]), *(("command", p) for p in program
                                                   if p != plan.engine_argv[0]),
                ("python", str(seat.engine.python))))
    for key, command in checked:
        if shutil.which(command, path=env.get("PATH", os.defpath)) is None:
            problems.append(f"engine.{key}: {command!r} is not an executable "
                            f"{'file' if os.sep in command else 'on PATH'}")
    paths = [("model.path", seat.model.path)]
    if seat.drafter is not None and seat.drafter.path is not None:
        paths.append(("drafter.path", seat.drafter.path))
    for key, path in paths:
        if not path.exists():
            problems.append(f"{key}: {path} does not exist")
    profile = profile_problem(seat)  # the ExecStartPre= preflight reads it at every start
    return [*problems, profile] if profile else problems


def check_engine_command(seat: Seat, plan: ReplicaPlan, env: Mapping[str, str]) -> None:
    """Before any side effect: the first of start_problems as a config error."""
    problems = start_problems(seat, plan, env)
    if problems:
        key = problems[0].split(":", 1)[0].split(" ", 1)[0]
        raise ConfigError(problems[0], hint=f"check [{key.split('.')[0]}] in the seat file")


def preflight_only(seat: Seat, replica: str, *, sysfs_root: Path | None, state_dir: Path,
                   say: Say, environ: Mapping[str, str] | None = None,
                   pin: tuple[str, ...] | None = None) -> list[Finding]:
    """`launch --preflight-only` (the replica unit's ExecStartPre=): see launch/gate.py."""
    environ = os.environ if environ is None else environ
    placed = place_for_launch(seat, sysfs_root, state_dir=state_dir, environ=environ, pin=pin,
                              replica=replica)
    record = placed_replica(seat, placed, replica, pin=pin, say=say)
    usable_state_dir(record, state_dir)
    return sysfs_gate(seat, plan_replica(seat, record, numactl=None), sysfs_root, state_dir,
                      environ=environ, say=say)


@dataclass(frozen=True, slots=True)
class LaunchResult:
    exit_code: int
    reason: str
    report_path: Path
    findings: tuple[Finding, ...]


@dataclass(frozen=True, slots=True)
class LaunchRun:
    """How one replica's launch runs: the roots it reads and keeps, where the engine's output
    (`echo`) and rocmseat's own lines (`say`) go, the environment (None: os.environ), the stop
    grace, the readiness probe's interval and client, the pair the unit was rendered with
    (`pin`), and who is told every sd_notify message (`on_status`: STATUS=, READY=1,
    STOPPING=1, as it is sent, with or without a systemd socket)."""

    sysfs_root: Path | None
    state_dir: Path
    echo: Say
    say: Say
    environ: Mapping[str, str] | None = None
    stop_grace_s: float = 30.0
    probe_interval_s: float = 2.0
    fetch: Fetch = http_fetch
    pin: tuple[str, ...] | None = None
    on_status: Callable[[str], None] | None = None


def launch_replica(seat: Seat, replica: str, run: LaunchRun) -> LaunchResult:
    """Start one replica in the foreground."""
    environ = dict(os.environ if run.environ is None else run.environ)
    placed = place_for_launch(seat, run.sysfs_root, state_dir=run.state_dir, environ=environ,
                              pin=run.pin, replica=replica)
    record = placed_replica(seat, placed, replica, pin=run.pin, say=run.say)
    # One launch per replica: a second one would move the cache of a running engine aside and
    # race it for the port. The kernel drops the lock when we die; the engine does not inherit
    # it (PEP 446: our descriptors are not inheritable).
    usable_state_dir(record, run.state_dir)
    state = StateDir(run.state_dir)
    lock = state.path(LAUNCH_LOCK, seat=record.seat, replica=record.replica)
    try:
        with state.lock(LAUNCH_LOCK, timeout_s=0.0, seat=record.seat, replica=record.replica):
            return _launch_locked(seat, placed, record, run, environ)
    except LockTimeout:
        raise RocmseatError(f"replica {record.replica} of seat {seat.name} is already being "
                            f"launched by another process (lock {lock})",
                            hint="stop that one first (systemctl stop, or SIGTERM)") from None


def placed_plan(seat: Seat, placed: Placement, record: ReplicaPlacement, *,
                sysfs_root: Path | None, environ: Mapping[str, str],
                say: Say, key: KeyStatus | None = None) -> ReplicaPlan:
    """The plan the engine starts with: the placement renumbered by HIP itself when the seat
    runs the HIP probe, refused when HIP cannot see the pair. Nothing is saved here: launch
    records the plan's placement only once the gate passed."""
    numactl = find_numactl()
    plan = plan_replica(seat, record, numactl=numactl, key=key)
    if needs_hip(seat, plan, sysfs_root):
        numbering = hip_numbering(plan, environ, say=say)
        if numbering is not None:
            probed = placed.renumbered(numbering).pick(record.replica)
            if probed.hip_indices != record.hip_indices and probed.hip_indices is not None:
                assumed = ",".join(map(str, record.hip_indices or ())) or "none"
                say(f"HIP numbers {', '.join(record.pci_pair)} as "
                    f"{','.join(map(str, probed.hip_indices))}, not {assumed} "
                    f"({record.hip_note}): using HIP's numbering")
            record = probed
            plan = plan_replica(seat, record, numactl=numactl, key=key)
    if plan.pci_pair and plan.hip_indices is None:
        raise NoDeviceError(f"replica {record.replica}: {record.hip_note}",
                            hint="check ROCR_VISIBLE_DEVICES in the environment launch runs "
                            "in, and `rocmseat preflight --only hip`")
    return plan


def _launch_locked(  # noqa: PLR0915
    seat: Seat, placed: Placement, record: ReplicaPlacement, run: LaunchRun,
    environ: dict[str, str],
) -> LaunchResult:
    """launch_replica under the replica's launch lock; `environ` is `run.environ` resolved."""
    sysfs_root, state_dir, say = run.sysfs_root, run.state_dir, run.say
    from rocmseat.cache.store import prepare
    from rocmseat.launch.memplan import checkpoint_total_from_factors

    initial = plan_replica(seat, record, numactl=None)
    check_engine_command(seat, initial, engine_env(environ, initial))
    notifier = Notifier.from_environ(environ, run.on_status)
    started = dt.datetime.now(dt.UTC)
    # Order: key (cheap, no side effect) -> HIP numbering -> plan -> preflight gate ->
    # placement.json -> cache prepare (the side effect: a move-aside) -> engine, so a refused
    # start leaves the recorded placement and the cache as they were (docs/launch.md).
    notifier.status("computing the config key")
    try:
        key = launch_key(seat, placed, record.replica)
    except ConfigError:
        raise
    except RocmseatError as exc:  # could not check: the dry run says "config key unknown"
        raise KeyUnknown(f"replica {record.replica}: config key unknown: {exc.message}",
                         hint=exc.hint) from None
    notifier.status("preflight of the pair")
    from rocmseat.sysfs.partition import read_node_policy

    policy = read_node_policy(sysfs_root, record.pci_pair) if sysfs_root is not None else None
    plan = placed_plan(seat, placed, record, sysfs_root=sysfs_root, environ=environ, say=say,
                       key=KeyStatus(key.digest, ""))
    try:
        preflight = launch_gate(seat, plan, sysfs_root, state_dir, environ=environ, say=say)
    except PreflightRefused as refused:
        # startup.json must not keep showing the last good start while the unit fails
        save_report(state_dir, build_report(
            plan, classify_text(""),
            refused.findings, started_at=started, finished_at=dt.datetime.now(dt.UTC),
            moved_aside=None, changed_factors=[],
            outcome={"ready": False, "ready_after_s": None, "timed_out": False,
                     "exit_code": refused.exit_code, "engine_returncode": None,
                     "signal_received": None, "refused": True, "reason": refused.message},
            node_policy=policy))
        raise
    write_recorded(plan.placement)
    try:
        prepared = prepare(plan.cache_dir, key, seat_name=seat.name,
                           subdirs=seat_engine(seat).cache_subdirs)
    except OSError as exc:  # e.g. cache_root is a file
        why = ("not a directory" if seat.cache_root.exists() and not seat.cache_root.is_dir()
               else exc.strerror or str(exc))
        raise ConfigError(f"cache_root {seat.cache_root}: {why}",
                          hint="check cache_root in the seat file") from None
    say(prepared.message)
    plan = containerized(seat, dataclasses.replace(plan, env={**plan.env, **prepared.env}),
                         sysfs_root)
    previous, problems = previous_start(state_dir, seat.name, plan.replica)
    for problem in problems:
        say(f"startup history entry skipped: {problem}")
    rules = expect_rules(seat)
    reader = StartupLogReader([r.pattern for r in rules], seat_engine(seat))
    ctx = JudgeContext(
        replica=plan.replica, moved_aside=prepared.moved_aside, cache_dir=prepared.replica_dir,
        drafter_configured=seat.drafter is not None, previous=previous, expect=rules,
        key_digest=key.digest, checkpoint_bytes=checkpoint_total_from_factors(key.factors),
        tp=seat.tp,
    )
    changed = [c.describe() for c in prepared.changed]

    def write(summary: StartupSummary, complete: bool, outcome: dict[str, Any]) -> tuple[
            Path, list[Finding]]:
        findings = [*preflight, *judge_startup(summary, dataclasses.replace(ctx,
                                                                            complete=complete))]
        doc = build_report(plan, summary, findings, started_at=started,
                           finished_at=dt.datetime.now(dt.UTC), moved_aside=prepared.moved_aside,
                           changed_factors=changed, outcome=outcome, node_policy=policy)
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

    env = engine_env(environ, plan)
    spec = EngineSpec(
        argv=plan.argv, env=env,
        cpus=frozenset(plan.binding.cpus) if plan.binding.method == "cpu-affinity" else None,
        canary=Canary(plan.probe_url, seat.model.served_name or seat.name,
                      seat.readiness.canary_prompt, seat.readiness.canary_max_tokens,
                      api_key=served_api_key(plan.argv, env),
                      loading=seat_engine(seat).readiness.loading_statuses,
                      engine=seat_engine(seat).label),
        readiness_timeout_s=seat.readiness.timeout_s, probe_interval_s=run.probe_interval_s,
        stop_grace_s=run.stop_grace_s,
    )
    say(f"starting replica {plan.replica}: {shlex.join(redact_argv(plan.argv))}")
    result = supervise(spec, reader=reader, notifier=notifier, echo=run.echo, on_ready=on_ready,
                       fetch=run.fetch)
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
