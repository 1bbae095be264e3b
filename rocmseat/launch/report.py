"""The startup report: what a replica's start did, saved in the state dir with its config key.

`<state dir>/seats/<seat>/<replica>/startup.json` (schema rocmseat.startup/v1) is the latest
start; every start is also kept as `history/<UTC stamp>-<pid>.json` beside it, so the next start
can compare its KV pool with the previous one. Written atomically under a lock, mode 0600:
both hold the engine's argv (its secret-bearing flag values are redacted, rocmseat.redact, but
the rest of a command line is still nobody else's business).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rocmseat.docmodel import strict
from rocmseat.errors import ReadError
from rocmseat.findings import Finding
from rocmseat.launch.judge import PreviousStart
from rocmseat.launch.plan import ReplicaPlan
from rocmseat.launch.report_doc import SCHEMA, StartupReportDoc
from rocmseat.launch.startuplog import StartupSummary
from rocmseat.located import DocumentInvalid
from rocmseat.placement.rules import replica_state_dir
from rocmseat.redact import redact_argv
from rocmseat.statedir import (
    HISTORY_DIR,
    HISTORY_ENTRY,
    REPORT_LOCK,
    STARTUP,
    Document,
    ReplicaDir,
    StateDir,
)
from rocmseat.text import printable

__all__ = ["SCHEMA", "build_report", "previous_start", "replica_state_dir", "save_report"]

HISTORY_KEEP = 50  # newest starts kept; older ones are evidence nobody reads
REPORT_MODE = 0o600  # the files hold an argv
HISTORY_ENTRY_LIMIT_BYTES = 4 << 20  # a report is a few KiB to a few hundred (the argv, log)
# the latest start, and each start kept in history/: one model (rocmseat.launch.report_doc)
STARTUP_REPORT = Document(STARTUP, SCHEMA, strict(StartupReportDoc),
                          limit_bytes=HISTORY_ENTRY_LIMIT_BYTES, mode=REPORT_MODE)
HISTORY_REPORT = Document(HISTORY_ENTRY, SCHEMA, strict(StartupReportDoc),
                          limit_bytes=HISTORY_ENTRY_LIMIT_BYTES, mode=REPORT_MODE)


def utc_stamp(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_report(
    plan: ReplicaPlan,
    summary: StartupSummary,
    findings: Sequence[Finding],
    *,
    started_at: dt.datetime,
    finished_at: dt.datetime,
    moved_aside: Path | None,
    changed_factors: Sequence[str],
    outcome: dict[str, Any],
    node_policy: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """The report document (pure). `outcome`: ready, ready_after_s, timed_out, exit_code,
    engine_returncode, reason (None while the engine still runs). `node_policy`: the pair's
    partition modes and pm_policy levels as read at the start (rocmseat.sysfs.partition
    .read_node_policy; read-only: rocmseat never writes them), omitted when there are none."""
    policy = {"node_policy": {a: dict(v) for a, v in node_policy.items()}} if node_policy \
        else {}
    return {
        **policy,
        "schema": SCHEMA,
        "seat": plan.seat,
        "replica": plan.replica,
        "started_at": utc_stamp(started_at),
        "written_at": utc_stamp(finished_at),
        "config_key": {"digest": plan.key.digest, "reason": plan.key.reason},
        "cache": {
            "dir": str(plan.cache_dir),
            "moved_aside": str(moved_aside) if moved_aside is not None else None,
            "changed_factors": list(changed_factors),
        },
        "plan": {
            "pci_pair": list(plan.pci_pair),
            "hip_indices": None if plan.hip_indices is None else list(plan.hip_indices),
            "hip_index_source": plan.hip_index_source,
            "numa_node": plan.binding.numa_node,
            "binding": plan.binding.method,
            "port": plan.port,
            "argv": redact_argv(plan.argv),
        },
        "outcome": outcome,
        "log": summary.to_json(),
        "findings": [f.to_json() for f in findings],
    }


def check_replica_tree(state_dir: Path, seat: str, replica: str) -> Path:
    """The replica's state dir after the rule of every dir rocmseat writes, renames or prunes
    in (rocmseat.statedir.check_owned_dir): each of `seats/`, `seats/<seat>/`, the replica's
    dir and its `history/` is, where it exists, a real directory of this user that no other
    user may write to. A `history` link would make pruning unlink files wherever it points."""
    from rocmseat.statedir import check_owned_dir

    directory = replica_state_dir(state_dir, seat, replica)
    path = state_dir
    for part in directory.relative_to(state_dir).parts:
        path = path / part
        check_owned_dir(path, what="state dir")
    check_owned_dir(ReplicaDir(directory).history, what="startup history dir")
    return directory


def save_report(state_dir: Path, report: dict[str, Any]) -> Path:
    """Write startup.json and this start's history entry; returns the startup.json path."""
    seat, replica = report["seat"], report["replica"]
    check_replica_tree(state_dir, seat, replica)
    state = StateDir(state_dir)
    entry = f"{report['started_at'].replace(':', '')}-{os.getpid()}.json"
    with state.lock(REPORT_LOCK, timeout_s=30.0, seat=seat, replica=replica):
        # made never group- or other-writable, whatever the umask (its entries read back)
        state.make_dir(HISTORY_DIR, seat=seat, replica=replica)
        check_replica_tree(state_dir, seat, replica)  # under the lock
        state.write(HISTORY_REPORT, report, seat=seat, replica=replica, entry=entry)
        startup = state.write(STARTUP_REPORT, report, seat=seat, replica=replica)
        for old in _history(state, seat, replica)[:-HISTORY_KEEP]:
            # only our regular files go (a link is unlinked itself, never followed; a dir or a
            # FIFO someone put there is left alone): StateDir.remove
            state.remove(HISTORY_ENTRY, seat=seat, replica=replica, entry=old)
    return startup


def _history(state: StateDir, seat: str, replica: str) -> list[str]:
    """The names of the history entries, oldest first (names start with the UTC stamp)."""
    return state.names(HISTORY_DIR, suffix=".json", seat=seat, replica=replica) or []


def previous_start(
    state_dir: Path, seat: str, replica: str
) -> tuple[PreviousStart | None, list[str]]:
    """The newest earlier start that stated a KV pool, and the history files that could not be
    read (named, so the caller can say so; a corrupt old entry must not block a start). Each
    entry is read as a regular file of at most HISTORY_ENTRY_LIMIT_BYTES (never a FIFO: it
    would hang the start) and validated as a startup report (rocmseat.launch.report_doc): any other
    shape of JSON, however nested, is a skipped entry with one line naming the file and key."""
    state = StateDir(state_dir)
    history = state.replica(seat, replica).history
    problems: list[str] = []
    if history.is_symlink():
        return None, [f"{history}: is a symlink: not read"]
    try:
        names = _history(state, seat, replica)
    except ReadError as exc:  # a link on the way (UntrustedState): not read through it
        return None, [printable(exc.message, 300)]
    for name in reversed(names):
        try:
            doc = state.read(HISTORY_REPORT, seat=seat, replica=replica, entry=name)
        except ReadError as exc:
            problems.append(printable(exc.message, 300))
            continue
        except DocumentInvalid as exc:  # one line naming the file and the key
            problems.append(exc.message)
            continue
        if doc is None:  # gone meanwhile (pruned by another start)
            continue
        tokens = doc.log.kv_cache_tokens
        if tokens is not None and tokens > 0:
            return PreviousStart(tokens, doc.started_at, doc.config_key.digest), problems
    return None, problems
