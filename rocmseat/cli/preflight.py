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

DEFAULT_MAX_AGE_S = 900.0  # three missed runs of a 5-minute timer (docs/fleet.md)

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from rocmseat.preflight.run import PreflightReport


def _pairs(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> list[tuple[str, str]]:
    from rocmseat.preflight.run import parse_pair

    try:
        return [parse_pair(value) for value in values]
    except ConfigError as exc:
        raise click.BadParameter(exc.message) from None


def _write_textfile(directory: Path, registry: CollectorRegistry) -> None:
    from rocmseat.preflight.textfile import TEXTFILE_NAME, write_textfile

    try:
        write_textfile(directory, registry)
    except OSError as exc:
        target = directory / TEXTFILE_NAME
        raise ReadError(target, f"cannot write the textfile: {exc.strerror or exc}") from None


@click.command()
@sysfs_root_option
@state_dir_option
@click.option(
    "--only",
    "only",
    multiple=True,
    type=click.Choice(["pcie", "aer", "ras", "numa", "profile", "amdsmi", "hip"]),
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
    "--format",
    "output_format",
    type=click.Choice(["table", "json", "npd"]),
    default=None,
    help="Output: a table (default), JSON (same as --json), or npd: one line of at most 80 "
    "bytes for a node-problem-detector custom plugin.",
)
@click.option(
    "--cached",
    is_flag=True,
    help="With --format npd: answer from the last full preflight's cached verdict in the state "
    "dir (fast: no sysfs read); missing, older than --max-age, from another boot or host, or "
    "(with --profile) judged against another profile is unknown (exit 2).",
)
@click.option(
    "--max-age",
    "max_age_s",
    type=click.FloatRange(min=1.0, max=7 * 86400.0),
    default=DEFAULT_MAX_AGE_S,
    show_default=True,
    metavar="SECONDS",
    help="With --cached: the oldest verdict still trusted.",
)
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
    output_format: str | None,
    cached: bool,
    max_age_s: float,
    textfile: Path | None,
    sample_s: float | None,
    strict: bool,
    hip: bool,
    hip_timeout_s: float,
    amdsmi: bool | None,
) -> int:
    """Check each AMD GPU's PCIe link, AER errors, NUMA locality and TP2 pairs.

    Exit 0 ok, 1 a problem, 2 could not check (node-problem-detector compatible). Every full
    run (no --only, no --pair) caches its verdict for `--format npd --cached` and
    `rocmseat slurm health`. With --cached, --profile names the profile the cached run must
    have used.
    """
    if as_json and output_format not in (None, "json"):
        raise click.UsageError("--json and --format are two spellings of one option: give one")
    fmt = "json" if as_json else output_format or "table"
    if cached:
        given = [name for name, value in (("--pair", pairs), ("--textfile", textfile),
                                          ("--sample", sample_s), ("--hip", hip),
                                          ("--amdsmi", amdsmi)) if value]
        if fmt != "npd":
            raise click.UsageError("--cached needs --format npd (it answers from a cached verdict)")
        if given:
            raise click.UsageError(
                f"--cached answers from the last full run's verdict: it takes no {given[0]}"
            )
        return _cached_npd(sysfs_root, state_dir, set(only) or None, max_age_s, strict,
                           profile=profile)

    from rocmseat.preflight.run import preflight_report

    root = resolve_sysfs_root(sysfs_root)
    state = resolve_state_dir(state_dir)
    try:
        report = preflight_report(
            root,
            state,
            families=set(only) or None,
            pairs=pairs or None,
            profile=profile,
            hip=hip,
            hip_stage_timeout_s=hip_timeout_s,
            amdsmi=amdsmi,
            sample_s=sample_s,
        )
    except RocmseatError as exc:
        if not only and not pairs:
            # the fast readers must say why the last full run judged nothing, not "stale"
            _save_verdict(root, state, None, error=exc)
        if fmt == "npd":
            from rocmseat.fleet.npd import unusable_line

            # NPD reads stdout only: the condition's message says why (stderr has it too)
            click.echo(unusable_line(exc.message)[0])
        if textfile is not None:
            from rocmseat.preflight.textfile import error_registry

            try:
                _write_textfile(textfile, error_registry(exc.exit_code))
            except ReadError as write_error:
                # both lines: why nothing was checked, and why the textfile still says otherwise
                click.echo(f"rocmseat: error: {write_error.message}", err=True)
        raise
    if report.full:
        _save_verdict(root, state, report)
    code = exit_code_for(report.findings, strict=strict)
    if fmt == "npd" and textfile is not None:
        # One line, one exit code: NPD reads both, so the line must say what the code says. The
        # textfile is written first; if it cannot be, the run could not do its job (2), unless
        # the node has a problem (1), which the line still names.
        failed = _try_textfile(textfile, report, strict=strict)
        if failed is not None and code != exitcodes.PROBLEM:
            from rocmseat.fleet.npd import unusable_line

            click.echo(unusable_line(failed.cause)[0])  # the path is on stderr: 80 bytes
            click.echo(f"rocmseat: error: {failed.message}", err=True)
            return exitcodes.CANNOT_CHECK
        _print_report(report, fmt, strict=strict)
        if failed is not None:
            click.echo(f"rocmseat: error: {failed.message}", err=True)
        return code
    # The report is printed before the textfile is written: a textfile that cannot be written
    # must not swallow what this run found.
    _print_report(report, fmt, strict=strict)
    if textfile is not None:
        failed = _try_textfile(textfile, report, strict=strict)
        if failed is not None:
            # A known problem on the node (1) outranks "could not check" (2), as in
            # exit_code_for; otherwise the unwritable textfile makes the run "could not check".
            click.echo(f"rocmseat: error: {failed.message}", err=True)
            return code if code == exitcodes.PROBLEM else exitcodes.CANNOT_CHECK
    return code


def _try_textfile(textfile: Path, report: PreflightReport, *, strict: bool) -> ReadError | None:
    """Write the node_exporter textfile; the error naming the file, or None."""
    from rocmseat.preflight.textfile import report_registry

    try:
        _write_textfile(textfile, report_registry(report, strict=strict))
    except ReadError as exc:
        return exc
    return None


def _print_report(report: PreflightReport, fmt: str, *, strict: bool) -> None:
    from rocmseat.preflight import render

    if fmt == "json":
        click.echo(render.render_json(report, strict=strict), nl=False)
    elif fmt == "npd":
        from rocmseat.fleet.npd import npd_line

        line, _code = npd_line(report.findings, gpus=len(report.inventory.gpus), strict=strict)
        click.echo(line)
    elif sys.stdout.isatty():
        _print_rich(report, strict=strict)
    else:
        click.echo(render.render_table(report, strict=strict), nl=False)


def _save_verdict(
    root: Path,
    state: Path,
    report: PreflightReport | None,
    *,
    error: RocmseatError | None = None,
) -> None:
    import time

    from rocmseat.findings import Finding, Severity
    from rocmseat.fleet.verdict_cache import make_verdict, save_verdict
    from rocmseat.sysfs.fs import default_proc_root
    from rocmseat.sysfs.host import read_boot_identity

    if report is not None:
        findings, families = report.findings, report.families
        gpus, profile, digest = len(report.inventory.gpus), report.profile, report.profile_sha256
        identity = report.identity
    else:
        message = error.message if error is not None else "no report"
        findings = (Finding("preflight.error", Severity.UNKNOWN, "node", message),)
        families, gpus, profile, digest = (), 0, None, None
        identity = read_boot_identity(default_proc_root(root))
    verdict = make_verdict(
        findings,
        sysfs_root=root,
        families=families,
        gpus=gpus,
        now_unix_s=time.time(),
        profile=profile,
        profile_sha256=digest,
        identity=identity,
    )
    problem = save_verdict(state, verdict)
    if problem:
        # not fatal for this run, but the fast readers will say "unknown" until it is fixed
        click.echo(f"rocmseat: warning: {problem}", err=True)


def _cached_npd(
    sysfs_root: Path | None,
    state_dir: Path | None,
    families: set[str] | None,
    max_age_s: float,
    strict: bool,
    *,
    profile: Path | None = None,
) -> int:
    import time

    from rocmseat.fleet.npd import missing_families, npd_line, unusable_line
    from rocmseat.fleet.verdict_cache import ProfileId, UnusableVerdict, load_verdict

    wanted: ProfileId | None = None
    if profile is not None:
        from rocmseat.preflight.profile import load_profile

        try:
            loaded = load_profile(profile)
        except ConfigError as exc:
            # NPD reads stdout only: the line says why (stderr has it too)
            click.echo(unusable_line(exc.message)[0])
            raise
        wanted = ProfileId(loaded.name, loaded.sha256 or "")
    try:
        verdict = load_verdict(
            resolve_state_dir(state_dir),
            resolve_sysfs_root(sysfs_root),
            max_age_s=max_age_s,
            now_unix_s=time.time(),
            profile=wanted,
        )
    except UnusableVerdict as exc:
        line, code = unusable_line(str(exc))
    else:
        absent = [] if verdict.errored else missing_families(families or (), verdict.families)
        if absent:
            hint = " (add --hip to the periodic run)" if "hip" in absent else ""
            line, code = unusable_line(f"{absent[0]} was not in the cached run{hint}")
        else:
            line, code = npd_line(
                verdict.findings,
                gpus=verdict.gpus,
                families=families,
                strict=strict,
            )
    click.echo(line)
    return code


def _print_rich(report: PreflightReport, *, strict: bool) -> None:
    from rich.console import Console

    from rocmseat.preflight.render import rich_renderables

    console = Console()
    for renderable in rich_renderables(report, strict=strict):
        console.print(renderable)
