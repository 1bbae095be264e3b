"""`rocmseat preflight`: parse -> rocmseat.preflight.run -> render. No logic lives here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from rocmseat import exitcodes
from rocmseat.cli.options import (
    json_option,
    resolve_state_dir,
    resolve_sysfs_root,
    state_dir_option,
    sysfs_root_option,
)
from rocmseat.errors import ConfigError, ReadError, RocmseatError
from rocmseat.findings import exit_code_for

if TYPE_CHECKING:
    from rocmseat.preflight.run import PreflightReport


def _pairs(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> list[tuple[str, str]]:
    from rocmseat.preflight.run import parse_pair

    try:
        return [parse_pair(value) for value in values]
    except ConfigError as exc:
        raise click.BadParameter(exc.message) from None


def _write_textfile(directory: Path, text: str) -> None:
    from rocmseat.atomic import atomic_write_text
    from rocmseat.preflight.textfile import TEXTFILE_NAME

    target = directory / TEXTFILE_NAME
    try:
        atomic_write_text(target, text)
    except OSError as exc:
        raise ReadError(target, f"cannot write the textfile: {exc.strerror or exc}") from None


@click.command()
@sysfs_root_option
@state_dir_option
@click.option(
    "--only",
    "only",
    multiple=True,
    type=click.Choice(["pcie", "aer", "numa", "profile", "amdsmi", "hip"]),
    help="Run only this family of checks (repeatable).",
)
@click.option(
    "--pair",
    "pairs",
    multiple=True,
    callback=_pairs,
    metavar="A,B",
    help="Check only this GPU pair, e.g. 05:00.0,09:00.0 (repeatable); also the "
    "pairs the HIP probe exercises.",
)
@click.option(
    "--profile",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Expectations profile (TOML, see checks/).",
)
@json_option
@click.option(
    "--textfile",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also write rocmseat_preflight.prom here (node_exporter textfile collector).",
)
@click.option(
    "--sample",
    "sample_s",
    type=click.FloatRange(min=0.0, max=3600.0),
    metavar="SECONDS",
    help="Judge AER by two readings this far apart (run a load meanwhile).",
)
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
@click.option(
    "--hip/--no-hip",
    default=False,
    help="Also run the HIP IPC/P2P probe on the pairs (initialises the GPUs in child "
    "processes and takes seconds; off by default).",
)
@click.option(
    "--hip-timeout",
    "hip_timeout_s",
    type=click.FloatRange(min=0.1, max=3600),
    default=30.0,
    show_default=True,
    help="Seconds each HIP probe stage may take before it counts as hung.",
)
@click.option(
    "--amdsmi/--no-amdsmi",
    default=None,
    help="Also cross-check with amdsmi (off by default: amdsmi is optional; when asked and it "
    "cannot run, the finding is unknown with the reason).",
)
def preflight(  # noqa: PLR0917 (click passes every option)
    sysfs_root: Path | None,
    state_dir: Path | None,
    only: tuple[str, ...],
    pairs: list[tuple[str, str]],
    profile: Path | None,
    as_json: bool,
    textfile: Path | None,
    sample_s: float | None,
    strict: bool,
    hip: bool,
    hip_timeout_s: float,
    amdsmi: bool | None,
) -> int:
    """Check each AMD GPU's PCIe link, AER errors, NUMA locality and TP2 pairs.

    Exit 0 ok, 1 a problem, 2 could not check (node-problem-detector compatible).
    """
    from rocmseat.preflight import render
    from rocmseat.preflight.run import preflight_report
    from rocmseat.preflight.textfile import render_textfile, render_textfile_error

    try:
        report = preflight_report(
            resolve_sysfs_root(sysfs_root),
            resolve_state_dir(state_dir),
            families=set(only) or None,
            pairs=pairs or None,
            profile=profile,
            hip=hip,
            hip_stage_timeout_s=hip_timeout_s,
            amdsmi=amdsmi,
            sample_s=sample_s,
        )
    except RocmseatError as exc:
        if textfile is not None:
            try:
                _write_textfile(textfile, render_textfile_error(exc.exit_code))
            except ReadError as write_error:
                # both lines: why nothing was checked, and why the textfile still says otherwise
                click.echo(f"rocmseat: error: {write_error.message}", err=True)
        raise
    # The report is printed before the textfile is written: the AER baseline has already moved
    # on, so a textfile that cannot be written must not swallow what this run found.
    if as_json:
        click.echo(render.render_json(report, strict=strict), nl=False)
    elif sys.stdout.isatty():
        _print_rich(report, strict=strict)
    else:
        click.echo(render.render_table(report, strict=strict), nl=False)
    code = exit_code_for(report.findings, strict=strict)
    if textfile is not None:
        try:
            _write_textfile(textfile, render_textfile(report, strict=strict))
        except ReadError as exc:
            # A known problem on the node (1) outranks "could not check" (2), as in
            # exit_code_for; otherwise the unwritable textfile makes the run "could not check".
            click.echo(f"rocmseat: error: {exc.message}", err=True)
            return code if code == exitcodes.PROBLEM else exitcodes.CANNOT_CHECK
    return code


def _print_rich(report: PreflightReport, *, strict: bool) -> None:
    from rich.console import Console

    from rocmseat.preflight.render import rich_renderables

    console = Console()
    for renderable in rich_renderables(report, strict=strict):
        console.print(renderable)
