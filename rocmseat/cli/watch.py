"""`rocmseat watch`: scrape replicas, detect acceptance drops, stalls and outages; alert."""

from __future__ import annotations

import math
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from rocmseat import exitcodes
from rocmseat.cli.options import (
    json_option,
    resolve_state_dir,
    resolve_sysfs_root,
    state_dir_option,
    sysfs_root_option,
)
from rocmseat.errors import ConfigError
from rocmseat.jsonio import dumps
from rocmseat.redact import redact_text, redact_url
from rocmseat.watch.baseline import check_state_dir_writable
from rocmseat.watch.detector import DetectorParams
from rocmseat.watch.exporter import parse_listen
from rocmseat.watch.filesd import TargetsFile
from rocmseat.watch.loop import LIMITS, WatchConfig
from rocmseat.watch.render import render_table
from rocmseat.watch.scrape import Target, check_http_url, parse_target
from rocmseat.watch.service import (
    Parts,
    Sinks,
    check_targets,
    once_exit_code,
    run_once,
    run_service,
    stamped,
    this_node,
    under_journald,
)
from rocmseat.watch.status import report_json

DEFAULT_LISTEN = "127.0.0.1:9464"


class Finite(click.ParamType[float]):
    """A float in [lo, hi]: NaN and infinities are refused (click's FloatRange takes NaN)."""

    name = "float"

    def __init__(self, key: str) -> None:
        self.lo, self.hi = LIMITS[key]

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number) or not self.lo <= number <= self.hi:
            self.fail(f"{value!r} is not a number in {self.lo:g}..{self.hi:g}", param, ctx)
        return number


@dataclass(frozen=True, slots=True)
class WatchOptions:
    """`rocmseat watch`'s command line, as click converted it (one field per option); built
    once in `watch` and handed down (docs/architecture.md, "Function size")."""

    seat_file: Path | None
    targets: tuple[str, ...]
    targets_file: Path | None
    interval_s: float | None  # None: the seat's watch.interval_s, else 10
    timeout_s: float
    down_after: int
    stall_after_s: float
    once: bool
    as_json: bool
    exporter_listen: str | None
    webhook: str | None
    command_hook: str | None
    baseline_al: float | None
    no_spec: bool
    remediate: str | None
    min_ready: int | None  # None: the seat's watch.min_ready, else 1
    state_dir: Path | None
    sysfs_root: Path | None


@dataclass(frozen=True, slots=True)
class _Watched:
    """What the watcher runs on: the command line merged with a seat's [watch] table (the
    command line first), or with the --target/--targets-file replicas."""

    targets: list[Target]
    state_dir: Path
    interval_s: float | None
    pinned_al: float | None
    expect_spec: bool
    exporter_listen: str | None
    webhook: str | None
    webhook_what: str  # where the webhook URL came from, for its error
    hook_argv: tuple[str, ...] | None
    min_ready: int
    seat_name: str | None = None
    node: str | None = None
    source: TargetsFile | None = None  # the --targets-file, re-read when it changes
    extra: list[Target] = field(default_factory=list)  # the --target replicas
    remediator: Any = None  # the remediator factory (remediation on)
    kernel_log: Path | None = None
    canary: Any = None  # the drafter canary factory ([canary] enabled)
    sysfs_root: Path | None = None  # a rocm seat's node (the kernel log's GPU paths)


@click.command("watch")
@click.argument("seat_file", metavar="[SEAT]", required=False,
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--target", "targets", multiple=True, metavar="[NAME=]URL",
              help="Watch this /metrics URL (repeatable) instead of a seat's replicas.")
@click.option("--targets-file", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Prometheus file_sd targets (JSON or YAML), re-read when it changes.")
@click.option("--interval", "interval_s", type=Finite("interval_s"), default=None,
              help="Seconds between scrapes, 0.05..3600 [default: the seat's watch.interval_s, "
                   "else 10].")
@click.option("--timeout", "timeout_s", type=Finite("timeout_s"), default=5.0, show_default=True,
              help="Seconds a scrape may take, the whole response (0.05..300).")
@click.option("--down-after", type=click.IntRange(1, 10_000), default=3, show_default=True,
              help="Failed scrapes in a row before replica_down fires.")
@click.option("--stall-after", "stall_after_s", type=Finite("stall_after_s"), default=60.0,
              show_default=True,
              help="Seconds of running requests with no generated token before replica_stalled.")
@click.option("--once", is_flag=True,
              help="Two scrapes --interval apart, print the window, exit 0/1/2.")
@json_option
@click.option("--exporter-listen", default=None, metavar="HOST:PORT",
              help=f"Serve rocmseat_* metrics, /ready/<replica> and /healthz here ('off' to "
                   f"disable) [default: {DEFAULT_LISTEN}].")
@click.option("--webhook", default=None, metavar="URL",
              help="Alertmanager v2 endpoint, e.g. http://127.0.0.1:9093/api/v2/alerts.")
@click.option("--command-hook", default=None, metavar="ARGV",
              help="Program run on each alert change with the alert JSON on stdin (split like "
                   "a shell would, run without one).")
@click.option("--baseline-al", type=Finite("pinned_al"), default=None,
              help="Pin the expected acceptance length (else the seat's, else learned).")
@click.option("--no-spec", is_flag=True,
              help="The replicas do not speculate: no spec_blind, /ready is not held at 503 for "
                   "missing spec-decode series (a targets file can say it per target with the "
                   "label rocmseat_spec: \"false\").")
@click.option("--remediate", type=click.Choice(["on", "off", "dry-run"]), is_flag=False,
              flag_value="on", default=None,
              help="Heal a seat's replicas (docs/remediate.md): move caches aside and restart, "
                   "then run without the drafter; 'dry-run' journals what it would do [default: "
                   "the seat's remediate.mode, else off].")
@click.option("--min-ready", type=click.IntRange(0, 4096), default=None,
              help="The seat's floor for /ready: a dead drafter or a blind replica stays in "
                   "rotation while fewer replicas are ready; 0 takes out even the last one "
                   "(one watcher per pod) [default: the seat's watch.min_ready, else 1].")
@state_dir_option
@sysfs_root_option
def watch(**values: Any) -> int:
    """Watch a SEAT's replicas (or --target URLs, or a --targets-file) for acceptance drops,
    stalls and outages."""
    opts = WatchOptions(**values)
    if (opts.seat_file is None) == (not opts.targets and opts.targets_file is None):
        raise click.UsageError(
            "give either a SEAT file or one or more --target URLs (or a --targets-file)")
    hook_argv = _hook_argv(opts.command_hook)
    if opts.seat_file is None and opts.remediate not in (None, "off"):
        raise ConfigError("--remediate acts only on the replicas of a SEAT that rocmseat "
                          "launched (their placement record): --target and --targets-file "
                          "replicas are never acted on")
    watched = (_from_seat(opts, opts.seat_file, hook_argv) if opts.seat_file is not None
               else _from_targets(opts, hook_argv))
    check_targets(watched.targets,
                  str(opts.targets_file) if opts.targets_file is not None else "")
    if watched.webhook:
        check_http_url(watched.webhook, f"{watched.webhook_what} {redact_url(watched.webhook)!r}")
    listen = watched.exporter_listen or DEFAULT_LISTEN
    if listen != "off":
        try:
            parse_listen(listen)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    config = WatchConfig(
        interval_s=watched.interval_s or 10.0, timeout_s=opts.timeout_s,
        down_after=opts.down_after, stall_after_s=opts.stall_after_s,
        pinned_al=watched.pinned_al, expect_spec=watched.expect_spec,
        state_dir=watched.state_dir, key_prefix=watched.seat_name or "",
        params=DetectorParams(), min_ready=watched.min_ready,
    )
    if opts.once:
        return _once(watched.targets, config, opts.as_json)
    check_state_dir_writable(watched.state_dir)  # a learned baseline is saved after ~15 min
    sinks = Sinks(listen, watched.webhook, watched.hook_argv, watched.seat_name, watched.node)
    return _service(watched, config, sinks)


def _from_seat(opts: WatchOptions, seat_file: Path,
               hook_argv: tuple[str, ...] | None) -> _Watched:
    from rocmseat.seat.load import load_seat
    from rocmseat.watch.targets import seat_targets

    seat = load_seat(seat_file)
    node = this_node()
    state = resolve_state_dir(opts.state_dir, seat)
    # A rocm seat's replicas come from the node (its sysfs) merged with the placements
    # launch recorded; a cpu seat reads no sysfs (docs/launch.md, placement).
    node_root = resolve_sysfs_root(opts.sysfs_root) if seat.backend == "rocm" else None
    watch_targets = seat_targets(
        seat, state, sysfs_root=node_root,
        say=lambda line: click.echo(f"rocmseat: warning: {line}", err=True))
    webhook, webhook_what = opts.webhook, "--webhook"
    if not webhook and seat.watch.webhook_url:
        webhook = seat.watch.webhook_url
        webhook_what = f"{seat_file}: key 'watch.webhook_url'"
    kernel_log = _kernel_log(seat.backend, opts.sysfs_root)
    remediator = _remediator(seat, seat_file, state, opts.remediate, node=node or this_node(),
                             once=opts.once, sysfs_root=resolve_sysfs_root(opts.sysfs_root)
                             if seat.backend == "rocm" else None)
    canary = None
    if seat.canary.enabled and not opts.once:
        from rocmseat.watch.canary_service import canary_factory

        canary = canary_factory(seat, state, watch_targets)
    return _Watched(
        targets=watch_targets, state_dir=state,
        interval_s=opts.interval_s or seat.watch.interval_s,
        pinned_al=opts.baseline_al or seat.watch.expected_acceptance_length,
        expect_spec=seat.drafter is not None and not opts.no_spec,
        exporter_listen=opts.exporter_listen or seat.watch.exporter_listen,
        webhook=webhook, webhook_what=webhook_what,
        hook_argv=hook_argv or seat.watch.command_hook,
        min_ready=seat.watch.min_ready if opts.min_ready is None else opts.min_ready,
        seat_name=seat.name, node=node, remediator=remediator, kernel_log=kernel_log,
        canary=canary, sysfs_root=node_root,
    )


def _from_targets(opts: WatchOptions, hook_argv: tuple[str, ...] | None) -> _Watched:
    state = resolve_state_dir(opts.state_dir)
    extra = [parse_target(spec, i) for i, spec in enumerate(opts.targets)]
    watch_targets = list(extra)
    source = None
    if opts.targets_file is not None:
        source = TargetsFile(opts.targets_file)
        watch_targets += source.load()
    _unique([t.name for t in watch_targets], opts.targets_file)
    return _Watched(
        targets=watch_targets, state_dir=state, interval_s=opts.interval_s,
        pinned_al=opts.baseline_al, expect_spec=not opts.no_spec,
        exporter_listen=opts.exporter_listen, webhook=opts.webhook, webhook_what="--webhook",
        hook_argv=hook_argv, min_ready=1 if opts.min_ready is None else opts.min_ready,
        source=source, extra=extra,
    )


def _kernel_log(backend: str, sysfs_root: Path | None) -> Path | None:
    """The kernel log of the node whose GPUs the seat's replicas hold: $ROCMSEAT_KMSG, else
    /dev/kmsg when the seat's GPUs are this host's (rocmseat.sysfs.fs.default_kmsg_path)."""
    from rocmseat.sysfs.fs import KMSG_ENV, default_kmsg_path

    if env := os.environ.get(KMSG_ENV):
        return Path(env)
    if backend != "rocm":
        return None  # a cpu seat's replicas hold no GPU
    return default_kmsg_path(resolve_sysfs_root(sysfs_root))


def _remediator(seat: Any, seat_file: Path, state: Path, option: str | None, *, node: str,
                once: bool, sysfs_root: Path | None) -> Any:
    """The remediator factory for the service, or None when remediation is off."""
    mode = option or seat.remediate.mode
    if mode == "off":
        return None
    if once:
        raise click.UsageError("--remediate goes with the service, not --once")
    from rocmseat.watch.remediate.setup import remediator_factory

    return remediator_factory(seat, seat_file, state, mode, node=node, sysfs_root=sysfs_root)


def _hook_argv(command_hook: str | None) -> tuple[str, ...] | None:
    if not command_hook:
        return None
    shown = redact_text(command_hook)
    try:
        argv = tuple(shlex.split(command_hook))
    except ValueError as exc:  # "No closing quotation"
        raise ConfigError(f"--command-hook {shown!r}: {exc}") from None
    if not argv:
        raise ConfigError(f"--command-hook {shown!r}: no program to run")
    return argv


def _unique(names: list[str], targets_file: Path | None) -> None:
    seen = _dupes(names)
    if seen:
        where = f" (or in {targets_file})" if targets_file is not None else ""
        raise ConfigError(f"--target{where}: the name {sorted(seen)[0]!r} is used twice")


def _dupes(names: list[str]) -> set[str]:
    seen: set[str] = set()
    twice: set[str] = set()
    for name in names:
        (twice if name in seen else seen).add(name)
    return twice


def _once(targets: list[Target], config: WatchConfig, as_json: bool) -> int:
    # the window is two scrapes `interval_s` apart: on a terminal, say what the wait is for
    statuses = run_once(targets, config,
                        sleep=_countdown(len(targets)) if sys.stderr.isatty() else time.sleep)
    if as_json:
        # Strict JSON: a non-finite number would be a bug (the reader refuses them): exit 3.
        click.echo(dumps(report_json(statuses)))
    else:
        click.echo(render_table(statuses), nl=False)
    return once_exit_code(statuses)


def _countdown(count: int) -> Callable[[float], None]:
    def wait(seconds: float) -> None:
        end = time.monotonic() + seconds
        what = f"{count} target{'s' if count != 1 else ''}"
        while (left := end - time.monotonic()) > 0:
            click.echo(f"\rrocmseat: scraped {what}; the second scrape in {left:4.0f} s "
                       "(--interval)", err=True, nl=False)
            time.sleep(min(left, 1.0))
        click.echo("\r\x1b[K", err=True, nl=False)

    return wait


def _service(watched: _Watched, config: WatchConfig, sinks: Sinks) -> int:
    """Run the service on a worker thread; this thread only waits for SIGTERM/SIGINT.

    No Python signal handler: one that calls `Event.set()` deadlocks when the signal lands
    while this thread is inside `Event.wait()` on the same event (both take its lock), which
    is how a SIGTERM used to hang the watcher. The signals are blocked in every thread (threads
    inherit the mask) and taken here with sigtimedwait, outside any lock."""
    stop = threading.Event()
    caught: list[BaseException] = []

    # journald stamps each line; any other log (a file, a terminal, a pipe) needs the time
    stamp = not under_journald(os.environ)

    def log(line: str) -> None:
        click.echo(stamped(line, time.time()) if stamp else line, err=True)

    def work() -> None:
        try:
            run_service(watched.targets, config, sinks, log=log, stop=stop, parts=Parts(
                targets_file=watched.source, extra_targets=watched.extra,
                remediate=watched.remediator, kernel_log=watched.kernel_log,
                canary=watched.canary, sysfs_root=watched.sysfs_root))
        except BaseException as exc:  # handed to the CLI's error boundary below
            caught.append(exc)

    signals = {signal.SIGTERM, signal.SIGINT}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        worker = threading.Thread(target=work, name="rocmseat-watch", daemon=True)
        worker.start()
        while worker.is_alive():
            if signal.sigtimedwait(signals, 0.2) is not None:
                stop.set()
        worker.join()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    if caught:
        raise caught[0]
    return exitcodes.OK
