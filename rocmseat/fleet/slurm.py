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
"""

from __future__ import annotations

import calendar
import dataclasses
import math
import os
import re
import socket
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rocmseat import exitcodes
from rocmseat.errors import RocmseatError
from rocmseat.findings import Severity
from rocmseat.fleet.npd import npd_line
from rocmseat.preflight.order import worst_first
from rocmseat.preflight.verdict_doc import (
    DEFAULT_MAX_AGE_S,
    CachedFinding,
    ProfileId,
    UnusableVerdict,
    Verdict,
    load_verdict,
)
from rocmseat.runner import Completed, Runner, run
from rocmseat.text import replace_controls

if TYPE_CHECKING:
    from rocmseat.preflight.verdict import RecordedRun

REASON_PREFIX = "rocmseat:"
# The whole command, scontrol calls and a preflight run included, inside Slurm's 60 s
# HealthCheckTimeout with room for the interpreter's start (docs/fleet.md, "Slurm")
DEFAULT_BUDGET_S = 50.0
SCONTROL_TIMEOUT_S = 10.0  # the most one scontrol call may take
CALL_RESERVE_S = 5.0  # kept back for each scontrol call still to come
MIN_CALL_S = 0.5
MIN_PREFLIGHT_S = 2.0
HIP_STAGE_SHARE = 8  # a pair's probe is a few children of a few stages each (docs/hip.md)
MAX_REASON = 120
# Slurm node names: hostname-like (slurm.conf NodeName); refuse anything else before it reaches
# an argv. A hostlist expression (`gpu[01-64]`, `gpu07,gpu08`) names many nodes to `scontrol
# update`, and so do the reserved words of slurm.conf(5) NodeName: ALL (every node) and DEFAULT.
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_RESERVED_NODE_NAMES = frozenset({"all", "default"})
DEFAULT_MAX_DRAINED = "10%"
# The breaker's second half (settle_and_rank): how far this host's clock may be from
# slurmctld's (Slurm needs them synchronised anyway: munge credentials carry a time), the
# longest wait for a drain's second to pass, and how many re-reads that may take
CLOCK_SLACK_S = 0.25
MAX_SETTLE_S = 5.0
SETTLE_TRIES = 3
_MAX_DRAINED_RE = re.compile(r"([0-9]{1,7}(?:\.[0-9]{1,6})?)(%?)", re.ASCII)
_FIELD_RE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)=")
# what a reason rocmseat writes may hold: check ids, PCI addresses, counts, the family tag
_REASON_UNSAFE_RE = re.compile(r"[^A-Za-z0-9 .:+_,/-]")
_FAMILIES_TAG_RE = re.compile(r" \[([a-z,]*)\]$")
_STAMP_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}", re.ASCII)
_LEGACY_REASON_RE = re.compile(r"^rocmseat: (?:unknown )?([a-z0-9_]+)(?:\.[a-z0-9_]+)+ \S+$")

# Node states (slurm.h NODE_STATE_*, printed by node_state_string_complete as BASE+FLAG+...):
# the ones a healthy node in service has. Anything else (DOWN, FUTURE, FAIL, MAINT, REBOOT_*,
# POWER*, INVALID_REG, flags of a newer release) is someone else's: rocmseat leaves it alone.
_IN_SERVICE_BASES = frozenset({"IDLE", "ALLOCATED", "ALLOC", "MIXED", "MIX", "COMPLETING",
                               "UNKNOWN"})
_BENIGN_FLAGS = frozenset({"NOT_RESPONDING", "COMPLETING", "RESERVED", "PLANNED", "CLOUD",
                           "DYNAMIC_NORM"})
DRAIN_FLAG = "DRAIN"


class SlurmError(RocmseatError):
    """Slurm could not be asked or told (scontrol failed or timed out): could not act, exit 2."""

    exit_code = exitcodes.CANNOT_CHECK


@dataclass(frozen=True, slots=True)
class NodeState:
    name: str
    hostname: str | None
    state: str  # "IDLE+DRAIN", "DOWN", "IDLE+FAIL", "MIXED" ...
    reason: str | None  # as set, without scontrol's " [user@time]" suffix
    # when the reason was set (slurmctld's clock, whole seconds: update_node() in
    # src/slurmctld/node_mgr.c sets reason_time = now under the node write lock); None when
    # scontrol printed no stamp or one this parser cannot read
    reason_set_unix_s: float | None = None

    @property
    def base(self) -> str:
        tokens = self.state.upper().split("+")
        # older spellings of a drained node's base state (sinfo's, some scontrol versions)
        return {"DRAINED": "IDLE", "DRAINING": "ALLOCATED"}.get(tokens[0], tokens[0])

    @property
    def flags(self) -> frozenset[str]:
        tokens = self.state.upper().split("+")
        extra = {DRAIN_FLAG} if tokens[0] in ("DRAINED", "DRAINING") else set()
        return frozenset(t for t in tokens[1:] if t) | extra

    @property
    def drained(self) -> bool:
        return DRAIN_FLAG in self.flags

    @property
    def ours(self) -> bool:
        return (self.reason or "").startswith(REASON_PREFIX)

    def foreign(self) -> str | None:
        """Why rocmseat must leave this node alone (words for the log), or None."""
        if self.base not in _IN_SERVICE_BASES:
            return f"State={self.state}" + (f" Reason={self.reason}" if self.reason else "")
        odd = sorted(self.flags - _BENIGN_FLAGS - {DRAIN_FLAG})
        if odd:
            return f"State={self.state}" + (f" Reason={self.reason}" if self.reason else "")
        if self.reason is not None and not self.ours:
            return f"State={self.state} Reason={self.reason}"
        if self.drained and not self.ours:
            return f"State={self.state} with no reason"
        return None

    @property
    def drained_by_rocmseat(self) -> bool:
        return self.drained and self.ours and self.foreign() is None


@dataclass(frozen=True, slots=True)
class Action:
    kind: str  # "drain", "resume" or "none"
    reason: str | None  # the drain reason
    why: str  # one line for the log
    # the verdict cannot tell whether the drain's cause is gone (it did not run that family):
    # the run is "could not check" (exit 2) and the drain stays
    unknown: str | None = None
    held: bool = False  # a drain the circuit breaker held back (exit 1)


@dataclass(frozen=True, slots=True)
class Outcome:
    node: str
    verdict_line: str
    verdict_code: int
    action: Action
    applied: bool


class Deadline:
    """What is left of the command's budget (a monotonic clock, injectable)."""

    def __init__(self, budget_s: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.budget_s = budget_s
        self._monotonic = monotonic
        self._end = monotonic() + budget_s

    def remaining(self) -> float:
        return self._end - self._monotonic()


def parse_node_line(line: str) -> NodeState:
    """One line of `scontrol -o show node` (key=value fields; values may hold spaces).

    A value runs to the next ` Key=`; Reason comes last and scontrol appends ` [user@time]`.
    """
    # what reaches our one line of output and the argv is printable: a control character (C0,
    # DEL, C1, a Unicode line separator) in a name, state or reason becomes `?`, which no node
    # name holds, so a forged name stays refused
    line = replace_controls(line.rstrip("\r"))
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
    if not name or not state:
        raise SlurmError(f"scontrol printed no NodeName/State: {line[:120]!r}")
    reason, stamp = _split_stamp(fields.get("Reason"))
    return NodeState(name, fields.get("NodeHostName"), state, reason, stamp)


def _split_stamp(reason: str | None) -> tuple[str | None, float | None]:
    r"""The reason without scontrol's ` [user@time]` suffix, and that time. No regex over the
    reason: `\s*...$` over a reason of many spaces backtracks quadratically (a forged answer
    must not hang the check).

    scontrol prints the stamp with slurm_make_time_str (src/common/parse_time.c): `%FT%T` in
    the local time of scontrol's process unless SLURM_TIME_FORMAT says otherwise; rocmseat runs
    scontrol with `SLURM_TIME_FORMAT=standard` and `TZ=UTC` (SCONTROL_ENV), so the stamp is UTC.
    """
    if reason is None:
        return None, None
    stamp = None
    if reason.endswith("]"):
        opened = reason.rfind("[")
        inner = reason[opened + 1 : -1]
        if opened >= 0 and "@" in inner and "]" not in inner:
            reason = reason[:opened].rstrip()
            stamp = _stamp_unix_s(inner.rpartition("@")[2])
    return reason or None, stamp


def _stamp_unix_s(text: str) -> float | None:
    if _STAMP_RE.fullmatch(text) is None:
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))
    except (ValueError, OverflowError):
        return None


# fields newer Slurm releases print after Reason (23.x: Comment=, Extra=); a reason is cut there
_AFTER_REASON = frozenset({"Comment", "Extra", "ResumeAfterTime", "InstanceId", "InstanceType"})


def parse_nodes(text: str) -> list[NodeState]:
    # lines end at "\n" only: str.splitlines would also cut at \x1c-\x1e, \x85 and U+2028,
    # which a reason may hold, and start a forged "NodeName=" line there
    return [parse_node_line(line) for line in text.split("\n") if line.strip().startswith(
        "NodeName=")]


def valid_node_name(name: str) -> bool:
    """One plain Slurm node name: never a hostlist, never ALL or DEFAULT (they name many)."""
    return (_NODE_NAME_RE.fullmatch(name) is not None
            and name.lower() not in _RESERVED_NODE_NAMES)


def shown_name(name: str) -> str:
    """A name from Slurm's answer, safe for one line of output (control characters escaped)."""
    return ascii(name[:80])[1:-1]


def _scontrol(
    argv: list[str], *, runner: Runner, deadline: Deadline | None, keep_s: float = 0.0
) -> Completed:
    """One scontrol call within what is left of the budget (less `keep_s` for later calls)."""
    shown = " ".join(argv[:4] if argv[1:2] == ["update"] else argv)  # never the reason text
    timeout = SCONTROL_TIMEOUT_S
    if deadline is not None:
        timeout = min(timeout, deadline.remaining() - keep_s)
        if timeout < MIN_CALL_S:
            raise SlurmError(f"{shown}: no time left within the {deadline.budget_s:g}s budget")
    done = runner(argv, timeout_s=timeout, env=scontrol_env())
    if done.timed_out:
        raise SlurmError(f"{shown}: timed out after {timeout:.3g}s (slurmctld not answering?)")
    if done.truncated:
        raise SlurmError(f"{shown}: printed more than {len(done.stdout):,} characters (cut; "
                         "not an answer to read)")
    if not done.ok:
        raise SlurmError(f"{shown}: {_tail(done.stderr or done.stdout)}")
    return done


def scontrol_env() -> dict[str, str]:
    """scontrol's environment: ours, with the reason stamp in one format rocmseat reads
    (slurm_make_time_str in src/common/parse_time.c honours SLURM_TIME_FORMAT and the local
    time zone; `standard` is `%FT%T`)."""
    return {**os.environ, "SLURM_TIME_FORMAT": "standard", "TZ": "UTC"}


def resolve_node_name(
    explicit: str | None,
    env: Mapping[str, str],
    *,
    runner: Runner = run,
    hostnames: Sequence[str] | None = None,
    deadline: Deadline | None = None,
    keep_s: float = 0.0,
) -> str:
    """This host's Slurm node name: --node, SLURMD_NODENAME, else scontrol's node list."""
    for source, value in (("--node", explicit), ("SLURMD_NODENAME", env.get("SLURMD_NODENAME"))):
        if value:
            if not valid_node_name(value):
                raise SlurmError(f"{source} {value!r}: not a Slurm node name")
            return value
    names = list(hostnames) if hostnames is not None else _hostnames()
    nodes = list_nodes(runner=runner, deadline=deadline, keep_s=keep_s)
    mine = list(dict.fromkeys(n.name for n in nodes
                              if n.name in names or (n.hostname or "") in names))
    hint = "pass --node NAME (the NodeName in slurm.conf)"
    if not mine:
        raise SlurmError(f"no Slurm node is this host ({', '.join(names)})", hint=hint)
    if len(mine) > 1:
        shown = ", ".join(shown_name(n) for n in mine[:8]) + (" ..." if len(mine) > 8 else "")
        raise SlurmError(f"{len(mine)} Slurm nodes are this host ({', '.join(names)}): {shown}",
                         hint=hint)
    if not valid_node_name(mine[0]):
        raise SlurmError(f"scontrol lists {shown_name(mine[0])!r} for this host: not a Slurm "
                         "node name (a hostlist, ALL or DEFAULT would drain many nodes)",
                         hint=hint)
    return mine[0]


def list_nodes(*, runner: Runner = run, deadline: Deadline | None = None,
               keep_s: float = 0.0) -> list[NodeState]:
    """Every node Slurm lists (`scontrol -o show node`)."""
    done = _scontrol(["scontrol", "-o", "show", "node"], runner=runner, deadline=deadline,
                     keep_s=keep_s)
    return parse_nodes(done.stdout)


def pick_node(nodes: Sequence[NodeState], name: str, asked: str) -> NodeState:
    """The one node called `name` in an answer of scontrol; SlurmError when none or several."""
    found = [n for n in nodes if n.name == name]
    if not found:
        raise SlurmError(f"{asked}: no such node in its answer")
    if len(found) > 1:
        raise SlurmError(f"{asked}: {len(found)} nodes called {shown_name(name)!r} in its "
                         "answer")
    return found[0]


def _hostnames() -> list[str]:
    # gethostname() only: getfqdn() asks DNS, which can stall a health check for seconds
    full = socket.gethostname()
    return list(dict.fromkeys([full, full.split(".", 1)[0]]))


def node_state(
    name: str,
    *,
    runner: Runner = run,
    deadline: Deadline | None = None,
    keep_s: float = 0.0,
) -> NodeState:
    done = _scontrol(["scontrol", "-o", "show", "node", name], runner=runner,
                     deadline=deadline, keep_s=keep_s)
    return pick_node(parse_nodes(done.stdout), name, f"scontrol -o show node {name}")


@dataclass(frozen=True, slots=True)
class MaxDrained:
    """`--max-drained N|P%`: how many nodes rocmseat may hold drained at once."""

    count: int | None = None
    percent: float | None = None

    def limit(self, nodes: int) -> int:
        """The limit for a cluster of `nodes` (a percentage rounds down, and is at least 1:
        one node of a small cluster can always be drained)."""
        if self.count is not None:
            return self.count
        assert self.percent is not None
        return max(1, math.floor(nodes * self.percent / 100.0 + 1e-9))


def parse_max_drained(text: str) -> MaxDrained:
    """`3` or `10%` (ValueError with the reason otherwise; ASCII digits only). Pure."""
    match = _MAX_DRAINED_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not N (1..1000000) or P% (0 < P <= 100)")
    number, percent = match.groups()
    if percent:
        value = float(number)
        if not 0 < value <= 100:
            raise ValueError(f"{text!r}: a percentage in (0, 100]")
        return MaxDrained(percent=value)
    if "." in number or not 1 <= int(number) <= 1_000_000:
        raise ValueError(f"{text!r} is not N (1..1000000) or P% (0 < P <= 100)")
    return MaxDrained(count=int(number))


def breaker(action: Action, name: str, nodes: Sequence[NodeState],
            max_drained: MaxDrained) -> Action:
    """The circuit breaker on drains (pure): a drain of a node not yet drained is held when
    `max_drained` other nodes already carry a rocmseat drain. Resumes and re-drains (a new
    reason on a node rocmseat drained) pass."""
    if action.kind != "drain":
        return action
    this = [n for n in nodes if n.name == name]
    if this and this[0].drained:
        return action
    ours = sum(1 for n in nodes if n.name != name and n.drained and n.ours)
    limit = max_drained.limit(len(nodes))
    if ours < limit:
        return action
    return Action("none", action.reason,
                  f"circuit breaker: {ours} of {len(nodes)} nodes already drained by rocmseat "
                  f"(limit {limit}): not draining {name}", held=True)


def _tail(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:200] if lines else "(no output)"


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
    checked = frozenset(covered or ())
    carried = sorted((causes or frozenset()) - checked)
    if code == exitcodes.PROBLEM:
        if ours and causes is None:
            return Action("none", node.reason, f"already drained ({node.reason})")
        return _drain(node, drain_reason(findings, Severity.FAIL, carried=carried))
    if code == exitcodes.OK:
        if not ours:
            return Action("none", None, "nothing to do")
        if causes is None:
            return Action("none", node.reason,
                          f"left drained ({node.reason}): cannot tell which checks drained it; "
                          "resume it by hand",
                          unknown="cannot tell which checks drained the node")
        if carried:
            hint = " (add --hip to the periodic run)" if "hip" in carried else ""
            return Action("none", node.reason, f"left drained ({node.reason})",
                          unknown=f"this verdict did not check {','.join(carried)}, which "
                                  f"drained the node{hint}")
        return Action("resume", None, f"resumed (it was drained: {node.reason})")
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


def apply(
    action: Action, name: str, *, runner: Runner = run, deadline: Deadline | None = None
) -> None:
    if action.kind == "none":
        return
    argv = ["scontrol", "update", f"NodeName={name}"]
    if action.kind == "drain":
        argv += ["State=DRAIN", f"Reason={action.reason}"]
    else:
        argv += ["State=RESUME"]
    _scontrol(argv, runner=runner, deadline=deadline)


def hip_stage_timeout(budget_s: float) -> float:
    """Each HIP probe stage's share of the run's budget: the probe's children are killed when a
    stage makes no progress within it (rocmseat.hip.probe), so a hung GPU costs a fraction of
    the budget, not the 30 s default."""
    return max(MIN_CALL_S, min(30.0, budget_s / HIP_STAGE_SHARE))


@dataclass(frozen=True, slots=True)
class Clocks:
    """The wall clock (verdict ages, drain stamps), the monotonic one (the budget) and sleep:
    injectable for tests."""

    wall: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


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
                                  hip_stage_timeout_s=hip_stage_timeout(budget_s)),
                 clock=clocks.wall)
    if clocks.monotonic() - started > budget_s:
        return None, f"preflight did not finish within {budget_s:.3g}s", True
    try:
        return load(), "ran a full preflight", True
    except UnusableVerdict as exc:
        said = run.save_problem or str(exc)
        return None, f"{first}; the preflight it ran: {said}", True


def breaker_after(name: str, nodes: Sequence[NodeState], max_drained: MaxDrained) -> Action | None:
    """The breaker's second half (pure), on a node list read after this node's drain and after
    every drain stamped in the same second as it was committed: the drains rocmseat holds, in
    the order slurmctld stamped them (then by name), keep their place up to the limit; a drain
    beyond it is handed back (an Action to resume), else None.

    Every run that drains ranks the same drains the same way, so however many nodes drain at
    the same instant, the first `limit` stay and the rest resume (docs/fleet.md, "The circuit
    breaker"). A drain whose stamp cannot be read counts as older than any other.
    """
    ours = sorted((n for n in nodes if n.drained_by_rocmseat), key=_drain_order)
    names = [n.name for n in ours]
    if name not in names:
        return None
    limit = max_drained.limit(len(nodes))
    place = names.index(name) + 1
    if place <= limit:
        return None
    return Action("resume", None,
                  f"circuit breaker: {place - 1} of {len(nodes)} nodes were drained by rocmseat "
                  f"before it (limit {limit}): handed back the drain of {name}", held=True)


def _drain_order(node: NodeState) -> tuple[int, float, str]:
    stamp = node.reason_set_unix_s
    return (0 if stamp is None else 1, stamp or 0.0, node.name)


def settle_and_rank(
    name: str,
    reason: str,
    max_drained: MaxDrained,
    *,
    runner: Runner,
    deadline: Deadline,
    clocks: Clocks,
) -> Action | None:
    """After this node's drain: wait until every drain slurmctld stamped in the same second has
    been committed, re-list, and rank (breaker_after). None when the drain stays or is no
    longer rocmseat's to judge (its reason changed since: an administrator stepped in).

    slurmctld stamps a reason with its clock in whole seconds, under the node write lock
    (update_node in src/slurmctld/node_mgr.c; _slurm_rpc_update_node in proc_req.c takes the
    lock), so a list asked for once its clock has passed the stamp's second holds every drain
    of that second. This host's clock stands in for slurmctld's, within CLOCK_SLACK_S.
    """
    for _ in range(SETTLE_TRIES):
        asked = clocks.wall()
        nodes = list_nodes(runner=runner, deadline=deadline, keep_s=CALL_RESERVE_S)
        own = pick_node(nodes, name, "scontrol -o show node")
        if not (own.drained_by_rocmseat and own.reason == reason):
            return None
        stamp = own.reason_set_unix_s
        if stamp is None:
            return Action("resume", None, "circuit breaker: scontrol printed no readable time "
                          f"for the drain of {name}, so it cannot be ordered: handed back",
                          held=True)
        settled = stamp + 1.0 + CLOCK_SLACK_S
        if asked >= settled:
            return breaker_after(name, nodes, max_drained)
        wait = settled - clocks.wall()
        if wait > MAX_SETTLE_S:
            return Action("resume", None, f"circuit breaker: slurmctld stamped the drain of "
                          f"{name} {wait - 1.0 - CLOCK_SLACK_S:.0f}s ahead of this host's "
                          "clock (clocks not synchronised?): handed back", held=True)
        clocks.sleep(max(wait, 0.0))
    return Action("resume", None, f"circuit breaker: the node list did not settle after "
                  f"{SETTLE_TRIES} reads: handed back the drain of {name}", held=True)


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
