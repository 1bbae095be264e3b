"""`rocmseat cache-audit [SEAT...]`: every replica cache, its state and why; prune moved-aside."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from rocmseat import jsonio
from rocmseat.cache.audit import SeatAudit, audit_exit_code, audit_seat_file
from rocmseat.cache.audit_render import audit_json, audit_table
from rocmseat.cache.prune import parse_duration, prune_moved_aside
from rocmseat.cache.usage import scan_processes
from rocmseat.cli.options import json_option, state_dir_option, sysfs_root_option


@click.command("cache-audit")
@click.argument("seat_files", nargs=-1, type=click.Path(path_type=Path, dir_okay=False))
@json_option
@click.option("--prune", is_flag=True, help="Remove old moved-aside caches no process uses.")
@click.option("--older-than", metavar="AGE",
              help="With --prune: moved aside longer ago than AGE, e.g. 14d (required "
              "with --prune; no default).")
@click.option("--yes", is_flag=True, help="With --prune: act (without it, print the plan only).")
@sysfs_root_option
@state_dir_option
def cache_audit(
    *,
    seat_files: tuple[Path, ...],
    as_json: bool,
    prune: bool,
    older_than: str | None,
    yes: bool,
    sysfs_root: Path | None,
    state_dir: Path | None,
) -> int:
    """Audit the compile caches of SEAT files (default: ./launchers/*.toml).

    Exit 0: every live cache matches its current key; 1: a live cache is stale or unkeyed (the
    next launch moves it aside), or a prune failed; 2: a state could not be judged.
    """
    if (older_than or yes) and not prune:
        raise click.UsageError("--older-than and --yes go with --prune")
    if prune and older_than is None:
        raise click.UsageError("--prune needs --older-than (e.g. --older-than 14d)")
    older_than_s = parse_duration(older_than) if older_than is not None else 0.0  # fail early
    files = list(seat_files) or sorted(Path("launchers").glob("*.toml"))
    if not files:
        raise click.UsageError("name a seat file (no ./launchers/*.toml here)")
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    processes = list(scan_processes())
    audits = [audit_seat_file(path, sysfs_root=sysfs_root, state_dir=state_dir, now=now,
                              processes=processes) for path in files]
    document = audit_json(audits, now=now)
    code = audit_exit_code(audits)
    if prune:
        return _prune(
            audits, document, older_than or "", older_than_s, yes=yes, as_json=as_json, code=code
        )
    if as_json:
        click.echo(jsonio.dumps(document))
    else:
        click.echo(audit_table(audits), nl=False)
    return code


def _prune(
    audits: Sequence[SeatAudit],
    document: dict[str, Any],
    older_than: str,
    older_than_s: float,
    *,
    yes: bool,
    as_json: bool,
    code: int,
) -> int:
    """The plan, then (only with --yes) each removal (rocmseat.cache.prune)."""
    outcome = prune_moved_aside(audits, older_than_s=older_than_s, act=yes,
                                scan=scan_processes)
    if not as_json:
        click.echo(audit_table(audits))
        click.echo(f"prune plan (moved aside more than {older_than} ago, used by no process):")
        click.echo("\n".join(f"  {item.describe()}" for item in outcome.plan)
                   or "  nothing moved aside")
        if not yes and any(i.remove for i in outcome.plan):
            click.echo("nothing removed: run again with --yes to remove the dirs marked remove")
    if as_json:
        document["prune"] = outcome.to_json(older_than)
        click.echo(jsonio.dumps(document))
    else:
        for item, error in outcome.done:
            done = "removed" if error is None else f"could not remove ({error})"
            click.echo(f"{done} {item.entry.path}")
    return outcome.exit_code(code)
