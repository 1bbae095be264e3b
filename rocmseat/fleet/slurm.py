"""Slurm's HealthCheckProgram over the node's preflight verdict: drain on a failure, resume only
what rocmseat drained, touch nothing else.

slurm.conf(5), HealthCheckProgram: "Any action to be taken must be explicitly performed by the
program (e.g. execute `scontrol update NodeName=foo State=drain Reason=...`)"; the program runs as
root, with SLURMD_NODENAME set, and is killed after 60 s (`HealthCheckTimeout` from Slurm 23.11
on). So `rocmseat slurm health`, all of it within one budget (default 50 s):

1. names the node as Slurm does: `--node`, else `SLURMD_NODENAME` (slurmd sets it), else the
   one line of `scontrol -o show node` whose NodeName or NodeHostName is this host's name; every
   source is held to one rule (a plain node name: never a hostlist such as `gpu[01-64]` or
   `gpu07,gpu08`, never Slurm's reserved `ALL` or `DEFAULT`, which `scontrol update` would apply
   to many nodes), and several lines for this host are refused, naming them;
2. reads the node's state; a node whose state or reason rocmseat did not set (an administrator's
   DOWN, FAIL, DRAIN, a reboot or power-save state, a maintenance reservation) is left alone:
   no drain, no resume (LBNL NHC likewise only re-onlines nodes whose note starts with "NHC:",
   helpers/node-mark-online);
3. reads the node's last full preflight verdict (preflight/verdict_doc.py) and, when it is missing,
   untrusted or older than `--max-age`, runs one full preflight in this process
   (rocmseat.preflight.verdict, which records it) within what is left of the budget;
4. drains on a failing finding, `Reason="rocmseat: <check> <subject> [+N more] [<families>]"`,
   unless the circuit breaker holds: when `--max-drained` nodes of those Slurm lists (default
   10 %) already carry a rocmseat drain, a wrong profile or release must not empty a partition,
   so no further node is drained (exit 1, saying so); a resume is never held. The decision is
   taken on the node's entry in that fresh list (an administrator's drain made since the first
   read is left alone), and since slurmctld starts every node's check at once, a drain is
   followed by a second read once its second has passed: a drain beyond the limit in
   slurmctld's stamp order is handed back (settle_and_rank, docs/fleet.md);
   resumes a node rocmseat drained only when the verdict covers every check family named in
   that reason (a drain for hip.ipc is not cleared by a run that never probed HIP: unknown, the
   drain stays); an unknown verdict changes nothing unless `--drain-on-unknown`.

`decide` is pure; the scontrol calls go through rocmseat.runner, each bounded by what is left.
The subjects apart: scontrol's answers and calls (naming, node state, `apply`) are
rocmseat.fleet.scontrol, the circuit breaker rocmseat.fleet.breaker; this module is the flow.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmseat import exitcodes
from rocmseat.findings import Severity
from rocmseat.fleet.breaker import (
    DEFAULT_MAX_DRAINED,
    MaxDrained,
    breaker,
    parse_max_drained,
    settle_and_rank,
)
from rocmseat.fleet.npd import npd_line
from rocmseat.fleet.scontrol import (
    CALL_RESERVE_S,
    MIN_CALL_S,
    REASON_PREFIX,
    Action,
    Clocks,
    Deadline,
    NodeState,
    apply,
    list_nodes,
    node_state,
    pick_node,
    resolve_node_name,
)
from rocmseat.preflight.order import worst_first
from rocmseat.preflight.verdict_doc import (
    DEFAULT_MAX_AGE_S,
    CachedFinding,
    ProfileId,
    UnusableVerdict,
    Verdict,
    load_verdict,
)
from rocmseat.runner import Runner, run

if TYPE_CHECKING:
    from rocmseat.preflight.verdict import RecordedRun

# The whole command, scontrol calls and a preflight run included, inside Slurm's 60 s
# HealthCheckTimeout with room for the interpreter's start (docs/fleet.md, "Slurm")
DEFAULT_BUDGET_S = 50.0
MIN_PREFLIGHT_S = 2.0
HIP_STAGE_SHARE = 8  # a pair's probe is a few children of a few stages each (docs/hip.md)
MAX_REASON = 120
# what a reason rocmseat writes may hold: check ids, PCI addresses, counts, the family tag
_REASON_UNSAFE_RE = re.compile(r"[^A-Za-z0-9 .:+_,/-]")
_FAMILIES_TAG_RE = re.compile(r" \[([a-z,]*)\]$")
_LEGACY_REASON_RE = re.compile(r"^rocmseat: (?:unknown )?([a-z0-9_]+)(?:\.[a-z0-9_]+)+ \S+$")

def reason_families(reason: str | None) -> frozenset[str] | None:
    """The check families a rocmseat drain reason names; None when it cannot tell. Pure.

    Written as `rocmseat: <check> <subject> [+N more] [fam,fam]`; an older reason without the
    tag names one family only when it names one finding.
    """
    if reason is None or not reason.startswith(REASON_PREFIX):
        return None
    tagged = _FAMILIES_TAG_RE.search(reason)
    if tagged:
        return frozenset(f for f in tagged.group(1).split(",") if f)
    legacy = _LEGACY_REASON_RE.fullmatch(reason)
    return frozenset({legacy.group(1)}) if legacy else None


def drain_reason(
    findings: Sequence[CachedFinding], severity: Severity, *, carried: Collection[str] = ()
) -> str:
    """`rocmseat: <check> <subject> [+N more[: other checks]] [families]` for the findings of
    `severity` (at most MAX_REASON characters: the other checks named while they fit).

    The tag lists the family of every such finding and `carried` (causes of an earlier drain
    this verdict did not re-check), so a later pass resumes only when it covers them all.
    """
    # the worst first (rocmseat.preflight.order): a degraded link before an AER count
    chosen = worst_first([f for f in findings if f.severity == severity])
    word = "" if severity == Severity.FAIL else f"{severity.value} "
    families = sorted({f.family for f in chosen} | set(carried))
    tag = f" [{','.join(families)}]"
    if chosen:
        first = chosen[0]
        more = f" +{len(chosen) - 1} more" if len(chosen) > 1 else ""
        head = f"{REASON_PREFIX} {word}{first.check_id} {first.subject}{more}"
    else:
        head = f"{REASON_PREFIX} preflight {severity.value}"
    head = _REASON_UNSAFE_RE.sub("?", head)[: MAX_REASON - len(tag)].rstrip()
    # the other checks by name, worst first, as many as fit: an operator reading `sinfo -R`
    # sees a kernel event class (events.gpu_reset) behind a degraded link, not only "+3 more"
    others = list(dict.fromkeys(f.check_id for f in chosen[1:] if f.check_id != chosen[0].check_id))
    named = ""
    for check in others:
        candidate = f"{named},{check}" if named else f": {check}"
        if len(head) + len(_REASON_UNSAFE_RE.sub("?", candidate)) + len(tag) > MAX_REASON:
            break
        named = _REASON_UNSAFE_RE.sub("?", candidate)
    return head + named + tag


def decide(
    code: int,
    findings: Sequence[CachedFinding],
    node: NodeState,
    *,
    covered: Collection[str] | None = None,
    drain_on_unknown: bool = False,
    unknown_reason: str | None = None,
) -> Action:
    """What to tell Slurm, from the verdict's exit code, the families it covers and the node's
    state. Pure."""
    foreign = node.foreign()
    if foreign is not None:
        return Action("none", None, f"left alone: {foreign} was not set by rocmseat")
    ours = node.drained_by_rocmseat
    causes = reason_families(node.reason) if ours else frozenset()
    blind = blind_families(findings)
    # a family that could not see all it judges has not re-judged what drained the node: its
    # drain is carried like an unchecked family's (the tag keeps it, no resume)
    checked = frozenset(covered or ()) - set(blind)
    carried = sorted((causes or frozenset()) - checked)
    if code == exitcodes.PROBLEM:
        if ours and causes is None:
            return Action("none", node.reason, f"already drained ({node.reason})")
        return _drain(node, drain_reason(findings, Severity.FAIL, carried=carried))
    if code == exitcodes.OK:
        return _decide_ok(node, causes, carried, blind)
    judged = judged_families(findings, checked)
    if (ours and causes and causes <= judged
            and not any(f.severity == Severity.FAIL for f in findings)):
        # the families that drained the node passed; what could not be checked (a host with the
        # amdgpu driver and no HIP runtime: hip.runtime unknown) did not drain it
        missing = ",".join(sorted(checked - judged)) or "some checks"
        return Action("resume", None, f"resumed (it was drained: {node.reason}; this verdict "
                                      f"could not check {missing}, which did not drain it)")
    if not drain_on_unknown:
        return Action("none", None, "could not check: left as it is")
    if ours and causes is None:
        return Action("none", node.reason, f"already drained ({node.reason})")
    unknown = [f for f in findings if f.severity == Severity.UNKNOWN]
    if unknown:
        reason = drain_reason(findings, Severity.UNKNOWN, carried=carried)
    else:
        what = _REASON_UNSAFE_RE.sub("?", unknown_reason or "verdict")
        tag = f" [{','.join(carried)}]"
        reason = f"{REASON_PREFIX} unknown {what}"[: MAX_REASON - len(tag)] + tag
    return _drain(node, reason)


def _decide_ok(node: NodeState, causes: frozenset[str] | None, carried: Sequence[str],
               blind: Mapping[str, str]) -> Action:
    """decide() on a verdict without a problem: resume only what it re-judged. Pure."""
    if not node.drained_by_rocmseat:
        return Action("none", None, "nothing to do")
    if causes is None:
        return Action("none", node.reason,
                      f"left drained ({node.reason}): cannot tell which checks drained it; "
                      "resume it by hand",
                      unknown="cannot tell which checks drained the node")
    blinded = [f for f in carried if f in blind]
    if blinded:
        return Action("none", node.reason, f"left drained ({node.reason})",
                      unknown=f"{blind[blinded[0]]}: {','.join(blinded)}, which drained the "
                              "node, cannot be re-judged")
    if carried:
        hint = " (add --hip to the periodic run)" if "hip" in carried else ""
        return Action("none", node.reason, f"left drained ({node.reason})",
                      unknown=f"this verdict did not check {','.join(carried)}, which "
                              f"drained the node{hint}")
    return Action("resume", None, f"resumed (it was drained: {node.reason})")


# findings that say their family could not see all it judges (docs/fleet.md, "Slurm"): records
# of this boot's kernel log that no run read (rocmseat.preflight.boot_events keeps the rest)
_BLIND = {"events.lost": ("events", "this verdict could not see the whole boot's kernel log "
                                    "(records lost before any run read them)")}


def blind_families(findings: Sequence[CachedFinding]) -> dict[str, str]:
    """The families the verdict ran but could not see whole, and why. Pure."""
    return {_BLIND[f.check_id][0]: _BLIND[f.check_id][1] for f in findings
            if f.check_id in _BLIND}


# findings of these families speak for every family (a card nobody could read, a run that could
# not judge at all: docs/fleet.md, node-problem-detector)
_EVERY_FAMILY = frozenset({"inventory", "preflight"})


def judged_families(findings: Sequence[CachedFinding], covered: Collection[str]) -> frozenset[str]:
    """The families the verdict judged: those it ran, less any with an unknown finding (none
    when an unknown speaks for every family). Pure."""
    unknown = {f.family for f in findings if f.severity == Severity.UNKNOWN}
    if unknown & _EVERY_FAMILY:
        return frozenset()
    return frozenset(covered) - unknown


def _drain(node: NodeState, reason: str) -> Action:
    if node.drained and node.reason == reason:
        return Action("none", reason, f"already drained ({reason})")
    return Action("drain", reason, f"drained ({reason})")


@dataclass(frozen=True, slots=True)
class Outcome:
    node: str
    verdict_line: str
    verdict_code: int
    action: Action
    applied: bool


def hip_stage_timeout(budget_s: float) -> float:
    """Each HIP probe stage's share of the run's budget: the probe's children are killed when a
    stage makes no progress within it (rocmseat.hip.probe), so a hung GPU costs a fraction of
    the budget, not the 30 s default."""
    return max(MIN_CALL_S, min(30.0, budget_s / HIP_STAGE_SHARE))


@dataclass(frozen=True, slots=True)
class HealthRequest:
    """What one health check is asked (`rocmseat slurm health`; each default is the CLI's).

    `node` None: named as Slurm does (resolve_node_name); `max_drained` None: the default
    circuit breaker (DEFAULT_MAX_DRAINED)."""

    sysfs_root: Path
    state_dir: Path
    node: str | None = None
    max_age_s: float = DEFAULT_MAX_AGE_S
    budget_s: float = DEFAULT_BUDGET_S
    drain_on_unknown: bool = False
    hip: bool = False
    profile: Path | None = None
    dry_run: bool = False
    max_drained: MaxDrained | None = None


def obtain_verdict(
    request: HealthRequest,
    *,
    profile_id: ProfileId | None = None,
    record: Callable[..., RecordedRun] | None = None,
    clocks: Clocks | None = None,
) -> tuple[Verdict | None, str, bool]:
    """(verdict, how it was had, whether a preflight ran) or (None, why there is none, ran).

    When the cached verdict (at most `request.max_age_s` old, judged against `profile_id`) is
    unusable, one full preflight runs in this process (rocmseat.preflight.verdict.run_and_record,
    which records the verdict as every full run does; `record` stands in for it in tests); a
    run that outlived `request.budget_s` is not acted on (Slurm may kill us any moment)."""
    clocks = clocks if clocks is not None else Clocks()
    budget_s = request.budget_s

    def load() -> Verdict:
        return load_verdict(request.state_dir, request.sysfs_root, max_age_s=request.max_age_s,
                            now_unix_s=clocks.wall(), profile=profile_id)

    try:
        return load(), "cached", False
    except UnusableVerdict as exc:
        first = str(exc)
    if budget_s < MIN_PREFLIGHT_S:
        return None, f"{first}; no time left for a preflight within the budget", False
    from rocmseat.preflight.run import PreflightOptions

    if record is None:
        from rocmseat.preflight.verdict import run_and_record

        record = run_and_record
    started = clocks.monotonic()
    run = record(request.sysfs_root, request.state_dir,
                 PreflightOptions(profile=request.profile, hip=request.hip,
                                  hip_stage_timeout_s=hip_stage_timeout(budget_s),
                                  # a kernel log that never ends (a FIFO named by
                                  # ROCMSEAT_KMSG) is unknown well inside the budget
                                  kernel_log_timeout_s=max(MIN_CALL_S, budget_s / 4)),
                 clock=clocks.wall)
    if clocks.monotonic() - started > budget_s:
        return None, f"preflight did not finish within {budget_s:.3g}s", True
    try:
        return load(), "ran a full preflight", True
    except UnusableVerdict as exc:
        said = run.save_problem or str(exc)
        return None, f"{first}; the preflight it ran: {said}", True


@dataclass(frozen=True, slots=True)
class Judged:
    action: Action
    line: str
    code: int


def _judge(
    verdict: Verdict | None, how: str, state: NodeState, *, drain_on_unknown: bool,
    now_unix_s: float,
) -> Judged:
    """The verdict's line and exit code, and the action on this entry of the node. Pure."""
    if verdict is None:
        findings: tuple[CachedFinding, ...] = ()
        line, code = f"UNKNOWN: {how}", exitcodes.CANNOT_CHECK
    else:
        findings = verdict.findings
        line, code = npd_line(findings, gpus=verdict.gpus)
        line += f" ({max(verdict.age_s(now_unix_s), 0.0):.0f}s ago)"
    action = decide(code, findings, state, covered=verdict.covered if verdict else None,
                    drain_on_unknown=drain_on_unknown,
                    unknown_reason=None if verdict else "no verdict")
    if action.unknown is not None:
        line, code = f"UNKNOWN: {action.unknown}", exitcodes.CANNOT_CHECK
    return Judged(action, line, code)


def health(
    request: HealthRequest,
    *,
    env: Mapping[str, str] | None = None,
    runner: Runner = run,
    record: Callable[..., RecordedRun] | None = None,
    clocks: Clocks | None = None,
) -> Outcome:
    """The whole health check within `request.budget_s`: name, state, verdict, action (`env`
    stands in for os.environ; `runner`, `record` and `clocks` for scontrol, the preflight run
    and time in tests)."""
    clocks = clocks if clocks is not None else Clocks()
    node, dry_run = request.node, request.dry_run
    deadline = Deadline(request.budget_s, clocks.monotonic)
    limit = request.max_drained or parse_max_drained(DEFAULT_MAX_DRAINED)
    profile_id = None
    if request.profile is not None:
        from rocmseat.preflight.profile import load_profile

        loaded = load_profile(request.profile)  # a bad profile: ConfigError, one line, exit 2
        profile_id = ProfileId(loaded.name, loaded.sha256 or "")
    # each call before the preflight keeps room for the two after it (re-read, update)
    name = resolve_node_name(node, os.environ if env is None else env, runner=runner,
                             deadline=deadline, keep_s=2 * CALL_RESERVE_S)
    state = node_state(name, runner=runner, deadline=deadline, keep_s=2 * CALL_RESERVE_S)
    causes = reason_families(state.reason) if state.drained_by_rocmseat else None
    verdict, how, ran = obtain_verdict(
        dataclasses.replace(
            request, budget_s=deadline.remaining() - 2 * CALL_RESERVE_S,
            # a node drained for HIP is only cleared by a run that probed HIP
            hip=request.hip or "hip" in (causes or ())),
        profile_id=profile_id, record=record, clocks=clocks,
    )
    nodes: list[NodeState] | None = None
    if ran:
        # the run took a while: act on the node as it is now (an administrator may have
        # stepped in meanwhile); the whole list, which the circuit breaker counts
        nodes = list_nodes(runner=runner, deadline=deadline, keep_s=CALL_RESERVE_S)
        state = pick_node(nodes, name, "scontrol -o show node")

    def judge(entry: NodeState) -> Judged:
        return _judge(verdict, how, entry, drain_on_unknown=request.drain_on_unknown,
                      now_unix_s=clocks.wall())

    judged = judge(state)
    if judged.action.kind == "drain":
        if nodes is None:
            # decide on the fresh list entry: an administrator's drain made since the first
            # read (`Reason=RMA ticket 42 do not resume`) is left alone, never taken over
            nodes = list_nodes(runner=runner, deadline=deadline, keep_s=CALL_RESERVE_S)
            judged = judge(pick_node(nodes, name, "scontrol -o show node"))
        held = breaker(judged.action, name, nodes, limit)
        if held.held:
            judged = Judged(held, judged.line, exitcodes.PROBLEM)
    action = judged.action
    if dry_run:
        return Outcome(name, judged.line, judged.code, action, applied=False)
    apply(action, name, runner=runner, deadline=deadline)
    if action.kind == "drain" and action.reason is not None:
        back = settle_and_rank(name, action.reason, limit, runner=runner, deadline=deadline,
                               clocks=clocks)
        if back is not None:
            apply(back, name, runner=runner, deadline=deadline)
            return Outcome(name, judged.line, exitcodes.PROBLEM, back, applied=True)
    return Outcome(name, judged.line, judged.code, action, applied=action.kind != "none")
