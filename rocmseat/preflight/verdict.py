"""A preflight run that records the node's verdict: the one library call behind `rocmseat
preflight` and the run `rocmseat slurm health` makes in-process when the cached verdict is too
old (docs/fleet.md).

Every full run (all default families, every GPU) writes `<state dir>/preflight/verdict.json`
(rocmseat.preflight.verdict_doc); a run that could judge nothing (no amdgpu device, a bad profile)
writes a verdict whose one `preflight.error` finding says why, so the fast readers report that
instead of "stale". A partial run (`families`, `pairs`) never writes it: it would say "fine" for
checks it did not run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rocmseat.errors import RocmseatError
from rocmseat.findings import NODE
from rocmseat.preflight.run import PreflightOptions, PreflightReport, preflight_report
from rocmseat.preflight.verdict_doc import ERROR_CHECK, make_verdict, save_verdict
from rocmseat.sysfs.fs import default_proc_root
from rocmseat.sysfs.host import read_boot_identity


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """One run: its report, or the error that stopped it; and why the verdict was not saved."""

    report: PreflightReport | None  # None: the run judged nothing (`error` says why)
    error: RocmseatError | None
    save_problem: str | None = None  # one line when the verdict could not be written


def run_and_record(
    sysfs_root: Path,
    state_dir: Path,
    options: PreflightOptions | None = None,
    *,
    clock: Callable[[], float] = time.time,
) -> RecordedRun:
    """Run preflight (rocmseat.preflight.run.preflight_report) with `options` and record a full
    run's verdict, stamped with `clock`.

    Errors the run raises (RocmseatError: no device, a bad profile) are returned, not raised,
    after a full run recorded them; anything else propagates (a bug, exit 3)."""
    opts = options if options is not None else PreflightOptions()
    full = not opts.families and not opts.pairs
    try:
        report = preflight_report(sysfs_root, state_dir, opts)
    except RocmseatError as exc:
        problem = record_error(sysfs_root, state_dir, exc, now_unix_s=clock()) if full else None
        return RecordedRun(None, exc, problem)
    problem = record_report(sysfs_root, state_dir, report, now_unix_s=clock()) if report.full \
        else None
    return RecordedRun(report, None, problem)


def record_report(
    sysfs_root: Path, state_dir: Path, report: PreflightReport, *, now_unix_s: float
) -> str | None:
    """Write a full run's verdict; a one-line problem, or None."""
    verdict = make_verdict(
        report.findings,
        sysfs_root=sysfs_root,
        families=report.families,
        gpus=len(report.inventory.gpus),
        now_unix_s=now_unix_s,
        profile=report.profile,
        profile_sha256=report.profile_sha256,
        identity=report.identity,
    )
    return save_verdict(state_dir, verdict)


def record_error(
    sysfs_root: Path, state_dir: Path, error: RocmseatError, *, now_unix_s: float
) -> str | None:
    """Write the verdict of a full run that judged nothing: one unknown saying why."""
    verdict = make_verdict(
        (NODE.unknown(ERROR_CHECK, error.message),),
        sysfs_root=sysfs_root,
        families=(),
        gpus=0,
        now_unix_s=now_unix_s,
        identity=read_boot_identity(default_proc_root(sysfs_root)),
    )
    return save_verdict(state_dir, verdict)
