"""Slurm's HealthCheckProgram over the node's preflight verdict: drain on a failure, resume only
what rocmseat drained.

slurm.conf(5), HealthCheckProgram: "Any action to be taken must be explicitly performed by the
program (e.g. execute `scontrol update NodeName=foo State=drain Reason=...`)"; the program runs as
root, with SLURMD_NODENAME set, and is killed after 60 s (`HealthCheckTimeout` from Slurm 23.11
on). So `rocmseat slurm health`:

1. names the node as Slurm does: `--node`, else `SLURMD_NODENAME` (slurmd sets it), else the
   line of `scontrol -o show node` whose NodeName or NodeHostName is this host's name;
2. reads the node's last full preflight verdict (fleet/verdict_cache.py) and, when it is missing
   or older than `--max-age`, runs one full preflight in a child process bounded by the budget;
3. drains on a failing finding, `Reason="rocmseat: <check> <subject>"`; resumes on a pass only a
   node whose drain reason starts with `rocmseat:` (an administrator's drain stays, as LBNL
   NHC only re-onlines nodes whose note starts with "NHC:", helpers/node-mark-online); an unknown
   verdict changes nothing unless `--drain-on-unknown`.

`decide` is pure; the scontrol calls go through rocmseat.runner.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmseat import exitcodes
from rocmseat.errors import RocmseatError
from rocmseat.findings import SEVERITY_ORDER, Severity
from rocmseat.fleet.npd import npd_line
from rocmseat.fleet.verdict_cache import CachedFinding, UnusableVerdict, Verdict, load_verdict
from rocmseat.runner import Runner, run

REASON_PREFIX = "rocmseat:"
DEFAULT_MAX_AGE_S = 600.0  # two missed runs of the 5-minute preflight timer (docs/fleet.md)
DEFAULT_BUDGET_S = 50.0  # inside Slurm's 60 s HealthCheckTimeout, with room for scontrol
SCONTROL_TIMEOUT_S = 10.0
MAX_REASON = 120
# Slurm node names: hostname-like (slurm.conf NodeName); refuse anything else before it reaches
# an argv
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_FIELD_RE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)=")


class SlurmError(RocmseatError):
    """Slurm could not be asked or told (scontrol failed): could not act, exit 2."""

    exit_code = exitcodes.CANNOT_CHECK


@dataclass(frozen=True, slots=True)
class NodeState:
    name: str
    hostname: str | None
    state: str  # "IDLE+DRAIN", "DRAINED", "MIXED" ...
    reason: str | None  # as set, without scontrol's " [user@time]" suffix

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state.upper()

    @property
    def drained_by_rocmseat(self) -> bool:
        return self.drained and (self.reason or "").startswith(REASON_PREFIX)


@dataclass(frozen=True, slots=True)
class Action:
    kind: str  # "drain", "resume" or "none"
    reason: str | None  # the drain reason
    why: str  # one line for the log


@dataclass(frozen=True, slots=True)
class Outcome:
    node: str
    verdict_line: str
    verdict_code: int
    action: Action
    applied: bool


def parse_node_line(line: str) -> NodeState:
    """One line of `scontrol -o show node` (key=value fields; values may hold spaces).

    A value runs to the next ` Key=`; Reason comes last and scontrol appends ` [user@time]`.
    """
    fields: dict[str, str] = {}
    matches = list(_FIELD_RE.finditer(line))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        key = match.group(1)
        if key == "Reason":
            # the reason is free text: it runs to the end (or to a later known field)
            later = [m for m in matches[index + 1 :] if m.group(1) in _AFTER_REASON]
            end = later[0].start() if later else len(line)
            fields[key] = line[match.end() : end].strip()
            break
        fields.setdefault(key, line[match.end() : end].strip())
    name = fields.get("NodeName")
    state = fields.get("State")
    if not name or state is None:
        raise SlurmError(f"scontrol printed no NodeName/State: {line[:120]!r}")
    reason = fields.get("Reason")
    if reason is not None:
        reason = re.sub(r"\s*\[[^\[\]]*@[^\[\]]*\]$", "", reason) or None
    return NodeState(name, fields.get("NodeHostName"), state, reason)


# fields newer Slurm releases print after Reason (23.x: Comment=, Extra=); a reason is cut there
_AFTER_REASON = frozenset({"Comment", "Extra", "ResumeAfterTime", "InstanceId", "InstanceType"})


def parse_nodes(text: str) -> list[NodeState]:
    return [parse_node_line(line) for line in text.splitlines() if line.strip().startswith(
        "NodeName=")]


def valid_node_name(name: str) -> bool:
    return _NODE_NAME_RE.fullmatch(name) is not None


def resolve_node_name(
    explicit: str | None,
    env: Mapping[str, str],
    *,
    runner: Runner = run,
    hostnames: Sequence[str] | None = None,
) -> str:
    """This host's Slurm node name: --node, SLURMD_NODENAME, else scontrol's node list."""
    for source, value in (("--node", explicit), ("SLURMD_NODENAME", env.get("SLURMD_NODENAME"))):
        if value:
            if not valid_node_name(value):
                raise SlurmError(f"{source} {value!r}: not a Slurm node name")
            return value
    names = list(hostnames) if hostnames is not None else _hostnames()
    done = runner(["scontrol", "-o", "show", "node"], timeout_s=SCONTROL_TIMEOUT_S)
    if not done.ok:
        raise SlurmError(f"scontrol -o show node: {_tail(done.stderr or done.stdout)}")
    for node in parse_nodes(done.stdout):
        if node.name in names or (node.hostname or "") in names:
            return node.name
    raise SlurmError(
        f"no Slurm node is this host ({', '.join(names)})",
        hint="pass --node NAME (the NodeName in slurm.conf)",
    )


def _hostnames() -> list[str]:
    # gethostname() only: getfqdn() asks DNS, which can stall a health check for seconds
    full = socket.gethostname()
    return list(dict.fromkeys([full, full.split(".", 1)[0]]))


def node_state(name: str, *, runner: Runner = run) -> NodeState:
    done = runner(["scontrol", "-o", "show", "node", name], timeout_s=SCONTROL_TIMEOUT_S)
    if not done.ok:
        raise SlurmError(f"scontrol -o show node {name}: {_tail(done.stderr or done.stdout)}")
    nodes = [n for n in parse_nodes(done.stdout) if n.name == name]
    if not nodes:
        raise SlurmError(f"scontrol -o show node {name}: no such node in its answer")
    return nodes[0]


def _tail(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:200] if lines else "(no output)"


def drain_reason(findings: Sequence[CachedFinding], severity: Severity) -> str:
    """`rocmseat: <check> <subject>` of the first finding of `severity` (+N more)."""
    chosen = sorted(
        (f for f in findings if f.severity == severity),
        key=lambda f: (-SEVERITY_ORDER[f.severity], f.check_id, f.subject),
    )
    if not chosen:
        return f"{REASON_PREFIX} preflight {severity.value}"
    first = chosen[0]
    word = "" if severity == Severity.FAIL else f"{severity.value} "
    more = f" +{len(chosen) - 1} more" if len(chosen) > 1 else ""
    return f"{REASON_PREFIX} {word}{first.check_id} {first.subject}{more}"[:MAX_REASON]


def decide(
    code: int,
    findings: Sequence[CachedFinding],
    node: NodeState,
    *,
    drain_on_unknown: bool = False,
    unknown_reason: str | None = None,
) -> Action:
    """What to tell Slurm, from the verdict's exit code and the node's state. Pure."""
    if code == exitcodes.PROBLEM:
        reason = drain_reason(findings, Severity.FAIL)
        return _drain(node, reason)
    if code == exitcodes.OK:
        if node.drained_by_rocmseat:
            return Action("resume", None, f"resumed (it was drained: {node.reason})")
        if node.drained:
            return Action("none", None, f"left drained: not rocmseat's reason ({node.reason})")
        return Action("none", None, "nothing to do")
    if not drain_on_unknown:
        return Action("none", None, "could not check: left as it is")
    reason = (
        drain_reason(findings, Severity.UNKNOWN)
        if findings
        else f"{REASON_PREFIX} unknown {unknown_reason or 'verdict'}"[:MAX_REASON]
    )
    return _drain(node, reason)


def _drain(node: NodeState, reason: str) -> Action:
    if node.drained and not node.drained_by_rocmseat:
        return Action("none", None, f"already drained by someone else ({node.reason}): left so")
    if node.drained and node.reason == reason:
        return Action("none", reason, f"already drained ({reason})")
    return Action("drain", reason, f"drained ({reason})")


def apply(action: Action, name: str, *, runner: Runner = run) -> None:
    if action.kind == "none":
        return
    argv = ["scontrol", "update", f"NodeName={name}"]
    if action.kind == "drain":
        argv += ["State=DRAIN", f"Reason={action.reason}"]
    else:
        argv += ["State=RESUME"]
    done = runner(argv, timeout_s=SCONTROL_TIMEOUT_S)
    if not done.ok:
        raise SlurmError(f"{' '.join(argv[:4])}: {_tail(done.stderr or done.stdout)}")


def preflight_argv(
    sysfs_root: Path, state_dir: Path, *, hip: bool, profile: Path | None
) -> list[str]:
    """The full preflight the health check runs when the cached verdict is too old."""
    argv = [sys.executable, "-m", "rocmseat", "preflight", "--sysfs-root", str(sysfs_root),
            "--state-dir", str(state_dir), "--format", "json"]
    if hip:
        argv.append("--hip")
    if profile is not None:
        argv += ["--profile", str(profile)]
    return argv


def obtain_verdict(
    sysfs_root: Path,
    state_dir: Path,
    *,
    max_age_s: float,
    budget_s: float,
    hip: bool = False,
    profile: Path | None = None,
    runner: Runner = run,
    clock: Callable[[], float] = time.time,
) -> tuple[Verdict | None, str]:
    """(verdict, how it was had) or (None, why there is none)."""
    try:
        return load_verdict(state_dir, sysfs_root, max_age_s=max_age_s, now_unix_s=clock()), (
            "cached"
        )
    except UnusableVerdict as exc:
        first = str(exc)
    done = runner(preflight_argv(sysfs_root, state_dir, hip=hip, profile=profile),
                  timeout_s=budget_s)
    if done.timed_out:
        return None, f"preflight did not finish within {budget_s:g}s"
    try:
        return load_verdict(state_dir, sysfs_root, max_age_s=max_age_s, now_unix_s=clock()), (
            "ran a full preflight"
        )
    except UnusableVerdict as exc:
        said = _tail(done.stderr) if done.stderr.strip() else str(exc)
        return None, f"{first}; preflight exited {done.returncode}: {said}"


def health(
    *,
    sysfs_root: Path,
    state_dir: Path,
    node: str | None,
    max_age_s: float = DEFAULT_MAX_AGE_S,
    budget_s: float = DEFAULT_BUDGET_S,
    drain_on_unknown: bool = False,
    hip: bool = False,
    profile: Path | None = None,
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
    runner: Runner = run,
    clock: Callable[[], float] = time.time,
) -> Outcome:
    name = resolve_node_name(node, os.environ if env is None else env, runner=runner)
    verdict, how = obtain_verdict(
        sysfs_root, state_dir, max_age_s=max_age_s, budget_s=budget_s, hip=hip,
        profile=profile, runner=runner, clock=clock,
    )
    if verdict is None:
        findings: tuple[CachedFinding, ...] = ()
        line, code = f"UNKNOWN: {how}", exitcodes.CANNOT_CHECK
    else:
        findings = verdict.findings
        line, code = npd_line(findings, gpus=verdict.gpus, age_s=verdict.age_s(clock()))
    state = node_state(name, runner=runner)
    action = decide(code, findings, state, drain_on_unknown=drain_on_unknown,
                    unknown_reason=None if verdict else "no verdict")
    if not dry_run:
        apply(action, name, runner=runner)
    return Outcome(name, line, code, action, applied=not dry_run and action.kind != "none")
