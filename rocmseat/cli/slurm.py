"""`rocmseat slurm`: Slurm's HealthCheckProgram over the preflight verdict (docs/fleet.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from rocmseat.cli.options import (
    max_age_option,
    resolve_state_dir,
    resolve_sysfs_root,
    state_dir_option,
    sysfs_root_option,
)
from rocmseat.fleet.breaker import DEFAULT_MAX_DRAINED
from rocmseat.fleet.slurm import DEFAULT_BUDGET_S


@dataclass(frozen=True, slots=True)
class HealthOptions:
    """`rocmseat slurm health`'s command line, as click converted it (one field per option)."""

    sysfs_root: Path | None
    state_dir: Path | None
    node: str | None
    max_age_s: float
    budget_s: float
    drain_on_unknown: bool
    hip: bool
    profile: Path | None
    max_drained: str  # N or P%, parsed by rocmseat.fleet.breaker.parse_max_drained
    dry_run: bool


@click.group()
def slurm() -> None:
    """Hooks for Slurm: HealthCheckProgram (and LBNL NHC, see deploy/nhc/)."""


@slurm.command()
@sysfs_root_option
@state_dir_option
@click.option(
    "--node",
    default=None,
    metavar="NAME",
    help="Slurm node name [default: $SLURMD_NODENAME, else the node scontrol lists for this "
    "host]",
)
@max_age_option("Judge from the cached verdict of the last full preflight if it is at most this "
                "old (as preflight --cached --max-age); else run one.")
@click.option(
    "--budget",
    "budget_s",
    type=click.FloatRange(min=1.0, max=3600.0),
    default=DEFAULT_BUDGET_S,
    show_default=True,
    metavar="SECONDS",
    help="The longest the whole command may take: scontrol calls and a preflight run if one is "
    "needed (keep it under HealthCheckTimeout, 60 s).",
)
@click.option(
    "--drain-on-unknown",
    is_flag=True,
    help="Also drain when the node could not be checked (without it, such a node is left as "
    "it is).",
)
@click.option(
    "--hip/--no-hip",
    default=False,
    help="Include the HIP probe if a run is needed (it is, anyway, when rocmseat drained the "
    "node for hip).",
)
@click.option(
    "--profile",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Expectations profile (checks/*.toml): the cached verdict must have been judged "
    "against it, and a run uses it.",
)
@click.option(
    "--max-drained",
    default=DEFAULT_MAX_DRAINED,
    show_default=True,
    metavar="N|P%",
    help="Circuit breaker: when this many of the nodes Slurm lists (a count, or a percentage of "
    "them, at least 1) already carry a rocmseat drain, drain no other node and exit 1.",
)
@click.option("--dry-run", is_flag=True, help="Say what would be done; change nothing.")
def health(**values: Any) -> int:
    """Drain this node on a failing preflight; resume it when rocmseat drained it and it passes.

    For slurm.conf's HealthCheckProgram. A node state or reason rocmseat did not set (an
    administrator's DOWN, FAIL or DRAIN ...) is left alone. Exit 0 pass, 1 a failing finding,
    2 could not check or could not tell Slurm (Slurm ignores the exit code; the action is the
    point).
    """
    from rocmseat.fleet.breaker import parse_max_drained
    from rocmseat.fleet.slurm import HealthRequest
    from rocmseat.fleet.slurm import health as run_health

    opts = HealthOptions(**values)
    try:
        breaker = parse_max_drained(opts.max_drained)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--max-drained'") from None

    outcome = run_health(HealthRequest(
        sysfs_root=resolve_sysfs_root(opts.sysfs_root),
        state_dir=resolve_state_dir(opts.state_dir),
        node=opts.node,
        max_age_s=opts.max_age_s,
        budget_s=opts.budget_s,
        drain_on_unknown=opts.drain_on_unknown,
        hip=opts.hip,
        profile=opts.profile,
        dry_run=opts.dry_run,
        max_drained=breaker,
    ))
    would = "would be " if opts.dry_run and outcome.action.kind != "none" else ""
    click.echo(f"{outcome.node}: {outcome.verdict_line}; {would}{outcome.action.why}")
    return outcome.verdict_code
