"""Slurm as `scontrol` shows and is told it: the node list parsed, this host's node named,
one bounded call each, and the drain or resume written (`apply`).

A node is named as Slurm does: `--node`, else `SLURMD_NODENAME` (slurmd sets it), else the one
line of `scontrol -o show node` whose NodeName or NodeHostName is this host's name; every source
is held to one rule (a plain node name: never a hostlist such as `gpu[01-64]` or `gpu07,gpu08`,
never Slurm's reserved `ALL` or `DEFAULT`, which `scontrol update` would apply to many nodes),
and several lines for this host are refused, naming them. A node whose state or reason rocmseat
did not set is `foreign`. The scontrol calls go through rocmseat.runner, each bounded by what is
left of the command's budget (`Deadline`). The health flow is rocmseat.fleet.slurm.
"""

from __future__ import annotations

import calendar
import os
import re
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from rocmseat import exitcodes
from rocmseat.errors import RocmseatError
from rocmseat.runner import Completed, Runner, run
from rocmseat.text import replace_controls

REASON_PREFIX = "rocmseat:"
SCONTROL_TIMEOUT_S = 10.0  # the most one scontrol call may take
CALL_RESERVE_S = 5.0  # kept back for each scontrol call still to come
MIN_CALL_S = 0.5
# Slurm node names: hostname-like (slurm.conf NodeName); refuse anything else before it reaches
# an argv. A hostlist expression (`gpu[01-64]`, `gpu07,gpu08`) names many nodes to `scontrol
# update`, and so do the reserved words of slurm.conf(5) NodeName: ALL (every node) and DEFAULT.
_NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_RESERVED_NODE_NAMES = frozenset({"all", "default"})
_FIELD_RE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_]*)=")
_STAMP_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}", re.ASCII)
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


class Deadline:
    """What is left of the command's budget (a monotonic clock, injectable)."""

    def __init__(self, budget_s: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.budget_s = budget_s
        self._monotonic = monotonic
        self._end = monotonic() + budget_s

    def remaining(self) -> float:
        return self._end - self._monotonic()


@dataclass(frozen=True, slots=True)
class Clocks:
    """The wall clock (verdict ages, drain stamps), the monotonic one (the budget) and sleep:
    injectable for tests."""

    wall: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


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


def _tail(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:200] if lines else "(no output)"


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
