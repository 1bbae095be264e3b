"""`rocmseat preflight`: options -> rocmseat.preflight.verdict.run_and_record -> render."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from rocmseat.cli.options import (
    json_option,
    max_age_option,
    resolve_state_dir,
    resolve_sysfs_root,
    state_dir_option,
    sysfs_root_option,
    want_json,
)
from rocmseat.errors import ConfigError, RocmseatError
from rocmseat.findings import exit_code_for

if TYPE_CHECKING:
    from rich.console import Console

    from rocmseat.preflight.run import PreflightReport
    from rocmseat.preflight.textfile import Published

WIDE_COLUMNS = 100  # the full table's rows fit from here on (docs/preflight.md, "Output")


@dataclass(frozen=True, slots=True)
class PreflightArgs:
    """`rocmseat preflight`'s command line, as click converted it (one field per option; the
    run's own options are rocmseat.preflight.run.PreflightOptions, built from these)."""

    sysfs_root: Path | None
    state_dir: Path | None
    only: tuple[str, ...]
    pairs: list[tuple[str, str]]
    profile: Path | None
    as_json: bool
    output_format: str | None
    problems: bool
    cached: bool
    max_age_s: float
    textfile: Path | None
    sample_s: float | None
    strict: bool
    kernel_log: Path | None
    kernel_log_timeout_s: float
    hip: bool
    hip_timeout_s: float
    amdsmi: bool
    write_profile: Path | None = None


def _pairs(
    _ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]
) -> list[tuple[str, str]]:
    if not values:  # click calls back for an absent option too: no import on that path
        return []
    from rocmseat.placement.rules import parse_pair

    try:
        return [parse_pair(value) for value in values]
    except ConfigError as exc:
        raise click.BadParameter(exc.message) from None


@click.command()
@sysfs_root_option
@state_dir_option
@click.option(
    "--only",
    "only",
    multiple=True,
    type=click.Choice(["pcie", "aer", "ras", "numa", "profile", "amdsmi", "hip", "events",
                       "xgmi"]),
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
    help="Output: the full table (the default, except on a terminal narrower than 100 "
    "columns, which gets --problems), JSON (same as --json), or npd: one line of at most 80 "
    "bytes for a node-problem-detector custom plugin.",
)
@click.option(
    "--problems",
    is_flag=True,
    help="Only what is not ok, one line per problem cut to the terminal's width; the ok "
    "findings folded into a count.",
)
@click.option(
    "--cached",
    is_flag=True,
    help="With --format npd: answer from the last full preflight's cached verdict in the state "
    "dir (fast: no sysfs read); missing, older than --max-age, from another boot or host, "
    "untrusted (a link, another owner, group/other-writable) or (with --profile) judged "
    "against another profile is unknown (exit 2).",
)
@max_age_option("With --cached: the oldest cached verdict still trusted.")
@click.option(
    "--textfile",
    type=click.Path(path_type=Path, file_okay=False),
    metavar="DIR",
    help="Also write DIR/rocmseat_preflight.prom for node_exporter's textfile collector "
    "(Debian/Ubuntu read /var/lib/prometheus/node-exporter; a DIR that did not exist is a "
    "warning).",
)
@click.option(
    "--sample",
    "sample_s",
    type=click.FloatRange(min=0.0, max=3600.0),
    metavar="SECONDS",
    help="Judge AER by two readings this far apart (run a load meanwhile; progress on a "
    "terminal).",
)
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
@click.option(
    "--kernel-log",
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="FILE",
    help="Judge this saved kernel log (as /dev/kmsg, dmesg or journalctl -k print it; gzip, "
    "xz or bzip2 compressed; a pipe such as /dev/stdin or <(journalctl -k -b), read until its "
    "writer closes it) instead of this boot's /dev/kmsg (the events family).",
)
@click.option(
    "--kernel-log-timeout",
    "kernel_log_timeout_s",
    type=click.FloatRange(min=0.1, max=3600),
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="The longest the kernel log may take to read to its end; a log still unread then "
    "(a pipe whose writer never closes) makes the events family unknown.",
)
@click.option(
    "--hip/--no-hip",
    default=False,
    show_default=True,
    help="Also run the HIP IPC/P2P probe on the pairs (initialises the GPUs in child "
    "processes and takes seconds).",
)
@click.option(
    "--hip-timeout",
    "hip_timeout_s",
    type=click.FloatRange(min=0.1, max=3600),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="The longest each HIP probe stage may take before it counts as hung.",
)
@click.option(
    "--write-profile",
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="FILE",
    help="Write the expectation profile of this node (its GPUs' links and sockets, the XGMI "
    "hive, the partition modes) to FILE when the run finds it healthy, as NHC's nhc-genconf "
    "does; refused (exit 2) on a node with a failing or unknown finding.",
)
@click.option(
    "--amdsmi/--no-amdsmi",
    default=False,
    show_default=True,
    help="Also cross-check with amdsmi (an optional dependency; when asked and it cannot run, "
    "the finding is unknown with the reason).",
)
def preflight(**values: Any) -> int:
    """Check each AMD GPU's PCIe link, AER errors, NUMA locality and TP2 pairs.

    Exit 0 ok, 1 a problem, 2 could not check (node-problem-detector compatible). Every full
    run (no --only, no --pair) records its verdict for `--format npd --cached` and
    `rocmseat slurm health`. With --cached, --profile names the profile the cached run must
    have used.
    """
    opts = PreflightArgs(**values)
    fmt = _format(opts.as_json, opts.output_format, opts.problems)
    if opts.cached:
        given = [name for name, value in (("--pair", opts.pairs), ("--textfile", opts.textfile),
                                          ("--sample", opts.sample_s), ("--hip", opts.hip),
                                          ("--amdsmi", opts.amdsmi),
                                          ("--kernel-log", opts.kernel_log)) if value]
        if fmt != "npd":
            raise click.UsageError("--cached needs --format npd (it answers from a cached verdict)")
        if given:
            raise click.UsageError(
                f"--cached answers from the last full run's verdict: it takes no {given[0]}"
            )
        return _cached_npd(opts)

    from rocmseat.preflight.run import PreflightOptions
    from rocmseat.preflight.verdict import run_and_record

    run = run_and_record(
        resolve_sysfs_root(opts.sysfs_root),
        resolve_state_dir(opts.state_dir),
        PreflightOptions(
            families=set(opts.only) or None,
            pairs=opts.pairs or None,
            profile=opts.profile,
            hip=opts.hip,
            hip_stage_timeout_s=opts.hip_timeout_s,
            amdsmi=opts.amdsmi,
            sample_s=opts.sample_s,
            sleep=_sleep_with_progress if sys.stderr.isatty() else time.sleep,
            kernel_log=opts.kernel_log,
            kernel_log_timeout_s=opts.kernel_log_timeout_s,
        ),
    )
    if run.save_problem:
        # not fatal for this run, but the fast readers will say "unknown" until it is fixed
        click.echo(f"rocmseat: warning: {run.save_problem}", err=True)
    if run.report is None:
        assert run.error is not None
        return _could_not_check(run.error, fmt, opts.textfile)
    if opts.write_profile is not None:
        _write_profile(run.report, opts.write_profile)
    return _render(run.report, fmt, opts.textfile, strict=opts.strict)


def _write_profile(report: PreflightReport, path: Path) -> None:
    from rocmseat.atomic import atomic_write_text
    from rocmseat.preflight.genprofile import profile_text

    atomic_write_text(path, profile_text(report, path.stem))
    click.echo(f"rocmseat: wrote the profile {path}", err=True)


def _format(as_json: bool, output_format: str | None, problems: bool) -> str:
    if as_json and output_format not in (None, "json"):
        raise click.UsageError("--json and --format are two spellings of one option: give one")
    fmt = "json" if as_json else output_format or "default"
    if fmt == "json":
        want_json(click.get_current_context())
    if problems and fmt not in ("table", "default"):
        raise click.UsageError(f"--problems is a table of the problems: it takes no --format {fmt}")
    return "problems" if problems else fmt


def _render(report: PreflightReport, fmt: str, textfile: Path | None, *, strict: bool) -> int:
    code = exit_code_for(report.findings, strict=strict)
    if textfile is None:
        _print_report(report, fmt, strict=strict)
        return code
    # prometheus_client only when a textfile is asked for (import time: ExecStartPre)
    from rocmseat.preflight.textfile import exit_code_with

    if fmt == "npd":
        # One line, one exit code: NPD reads both, so the line must say what the code says. The
        # textfile is written first; if it cannot be, the run could not do its job (2), unless
        # the node has a problem (1), which the line still names.
        published = _publish_report(textfile, report, strict=strict)
        if published.error is not None and exit_code_with(code, published) != code:
            from rocmseat.fleet.npd import unusable_line

            click.echo(unusable_line(published.error.cause)[0])  # the path is on stderr
        else:
            _print_report(report, fmt, strict=strict)
    else:
        # The report is printed before the textfile is written: a textfile that cannot be
        # written must not swallow what this run found.
        _print_report(report, fmt, strict=strict)
        published = _publish_report(textfile, report, strict=strict)
    _tell(published)
    return exit_code_with(code, published)


def _could_not_check(error: RocmseatError, fmt: str, textfile: Path | None) -> NoReturn:
    """A run that judged nothing: NPD still prints its line (NPD reads stdout only), the
    textfile is rewritten with the exit code alone; then the error itself (one line on stderr,
    its exit code; with JSON, the error boundary prints the document with `error`)."""
    if fmt == "npd":
        from rocmseat.fleet.npd import unusable_line

        click.echo(unusable_line(error.message)[0])
    if textfile is not None:
        from rocmseat.preflight.textfile import error_registry, publish

        # both lines when it cannot be written: why nothing was checked, and why the textfile
        # still says otherwise
        _tell(publish(textfile, error_registry(error.exit_code)))
    raise error


def _publish_report(textfile: Path, report: PreflightReport, *, strict: bool) -> Published:
    from rocmseat.preflight.textfile import publish, report_registry

    return publish(textfile, report_registry(report, strict=strict))


def _tell(published: Published) -> None:
    if published.warning is not None:
        click.echo(f"rocmseat: warning: {published.warning}", err=True)
    if published.error is not None:
        click.echo(f"rocmseat: error: {published.error.message}", err=True)


def _print_report(report: PreflightReport, fmt: str, *, strict: bool) -> None:
    from rocmseat.preflight import render

    if fmt == "json":
        click.echo(render.render_json(report, strict=strict), nl=False)
    elif fmt == "npd":
        from rocmseat.fleet.npd import npd_line

        line, _code = npd_line(report.findings, gpus=len(report.inventory.gpus), strict=strict)
        click.echo(line)
    elif fmt == "problems" or (fmt == "default" and sys.stdout.isatty() and _columns() <
                               WIDE_COLUMNS):
        # a narrow terminal wraps every row of the full table over 2-5 lines (115 lines at 80
        # columns for 4 GPUs): it gets the problems, and is told how to see the rest
        click.echo(render.render_problems(report, strict=strict, width=_columns()), nl=False)
        if fmt == "default":
            click.echo("(a narrow terminal: --format table for the full table)")
    elif sys.stdout.isatty():
        _print_rich(report, strict=strict)
    else:
        click.echo(render.render_table(report, strict=strict), nl=False)


def _columns() -> int:
    import shutil

    return shutil.get_terminal_size(fallback=(80, 24)).columns


def _cached_npd(opts: PreflightArgs) -> int:
    """`--format npd --cached`: the line of the last full run's verdict (--only: those
    families), judged against --profile when given."""
    from rocmseat.fleet.npd import cached_line, unusable_line
    from rocmseat.preflight.verdict_doc import ProfileId

    wanted: ProfileId | None = None
    if opts.profile is not None:
        from rocmseat.preflight.profile import load_profile

        try:
            loaded = load_profile(opts.profile)
        except ConfigError as exc:
            # NPD reads stdout only: the line says why (stderr has it too)
            click.echo(unusable_line(exc.message)[0])
            raise
        wanted = ProfileId(loaded.name, loaded.sha256 or "")
    line, code = cached_line(
        resolve_state_dir(opts.state_dir), resolve_sysfs_root(opts.sysfs_root),
        families=set(opts.only) or None, max_age_s=opts.max_age_s, now_unix_s=time.time(),
        strict=opts.strict, profile=wanted,
    )
    click.echo(line)
    return code


def _print_rich(report: PreflightReport, *, strict: bool) -> None:
    from rich.console import Console

    from rocmseat.preflight.render import rich_renderables

    console = Console()
    for renderable in rich_renderables(report, strict=strict):
        console.print(renderable)


def _sleep_with_progress(seconds: float, *, console: Console | None = None) -> None:
    """`time.sleep(seconds)` with a progress bar on stderr (the AER sample of `--sample`)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("AER sample: run a load now"), BarColumn(), TimeRemainingColumn(),
                  console=console or Console(stderr=True), transient=True) as progress:
        task = progress.add_task("sample", total=seconds)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(0.25, left))
            progress.update(task, completed=seconds - max(end - time.monotonic(), 0.0))
