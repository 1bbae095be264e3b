"""`rocmseat watch`: scrape replicas, detect acceptance drops, stalls and outages; alert."""

from __future__ import annotations

import json
import shlex
import signal
import threading
from pathlib import Path
from types import FrameType

import click

from rocmseat import exitcodes
from rocmseat.cli.options import json_option, resolve_state_dir, state_dir_option
from rocmseat.errors import ConfigError
from rocmseat.watch.baseline import check_state_dir_writable
from rocmseat.watch.detector import DetectorParams
from rocmseat.watch.exporter import parse_listen
from rocmseat.watch.loop import WatchConfig
from rocmseat.watch.render import render_table
from rocmseat.watch.scrape import Target, check_http_url, parse_target
from rocmseat.watch.service import Sinks, once_exit_code, run_once, run_service
from rocmseat.watch.status import report_json

DEFAULT_LISTEN = "127.0.0.1:9464"


@click.command("watch")
@click.argument("seat_file", metavar="SEAT", required=False,
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--target", "targets", multiple=True, metavar="[NAME=]URL",
              help="Watch this /metrics URL (repeatable) instead of a seat's replicas.")
@click.option("--interval", type=click.FloatRange(min=0.05), default=None,
              help="Seconds between scrapes [default: the seat's watch.interval_s, else 10].")
@click.option("--timeout", type=click.FloatRange(min=0.05), default=5.0, show_default=True,
              help="Seconds a scrape may take.")
@click.option("--down-after", type=click.IntRange(min=1), default=3, show_default=True,
              help="Failed scrapes in a row before replica_down fires.")
@click.option("--stall-after", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds of running requests with no generated token before replica_stalled.")
@click.option("--once", is_flag=True,
              help="Two scrapes --interval apart, print the window, exit 0/1/2.")
@json_option
@click.option("--exporter-listen", default=None, metavar="HOST:PORT",
              help=f"Serve rocmseat_* metrics here ('off' to disable) [default: {DEFAULT_LISTEN}].")
@click.option("--webhook", default=None, metavar="URL",
              help="Alertmanager v2 endpoint, e.g. http://127.0.0.1:9093/api/v2/alerts.")
@click.option("--command-hook", default=None, metavar="ARGV",
              help="Program run on each alert change with the alert JSON on stdin (split like "
                   "a shell would, run without one).")
@click.option("--baseline-al", type=click.FloatRange(min=1.0), default=None,
              help="Pin the expected acceptance length (else the seat's, else learned).")
@state_dir_option
def watch(  # noqa: PLR0917 (click passes every option)
    seat_file: Path | None,
    targets: tuple[str, ...],
    interval: float | None,
    timeout: float,
    down_after: int,
    stall_after: float,
    once: bool,
    as_json: bool,
    exporter_listen: str | None,
    webhook: str | None,
    command_hook: str | None,
    baseline_al: float | None,
    state_dir: Path | None,
) -> int:
    """Watch a SEAT's replicas (or --target URLs) for acceptance drops, stalls and outages."""
    if (seat_file is None) == (not targets):
        raise click.UsageError("give either a SEAT file or one or more --target URLs")
    seat_name: str | None = None
    expect_spec = True
    pinned = baseline_al
    hook_argv = _hook_argv(command_hook)
    if seat_file is not None:
        from rocmseat.seat.load import load_seat
        from rocmseat.watch.targets import seat_targets

        seat = load_seat(seat_file)
        seat_name, expect_spec = seat.name, seat.drafter is not None
        state = state_dir or seat.state_dir or resolve_state_dir(None)
        watch_targets = seat_targets(seat, state)
        interval = interval or seat.watch.interval_s
        pinned = pinned or seat.watch.expected_acceptance_length
        exporter_listen = exporter_listen or seat.watch.exporter_listen
        webhook = webhook or seat.watch.webhook_url
        hook_argv = hook_argv or seat.watch.command_hook
    else:
        state = resolve_state_dir(state_dir)
        watch_targets = [parse_target(spec, i) for i, spec in enumerate(targets)]
        _unique([t.name for t in watch_targets])
    if webhook:
        check_http_url(webhook, f"--webhook {webhook!r}")
    listen = exporter_listen or DEFAULT_LISTEN
    if listen != "off":
        try:
            parse_listen(listen)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    config = WatchConfig(
        interval_s=interval or 10.0, timeout_s=timeout, down_after=down_after,
        stall_after_s=stall_after, pinned_al=pinned, expect_spec=expect_spec,
        state_dir=state, key_prefix=seat_name or "", params=DetectorParams(),
    )
    if once:
        return _once(watch_targets, config, as_json)
    check_state_dir_writable(state)  # a learned baseline is saved after ~15 min: fail now
    return _service(watch_targets, config, Sinks(listen, webhook, hook_argv, seat_name))


def _hook_argv(command_hook: str | None) -> tuple[str, ...] | None:
    if not command_hook:
        return None
    try:
        argv = tuple(shlex.split(command_hook))
    except ValueError as exc:  # "No closing quotation"
        raise ConfigError(f"--command-hook {command_hook!r}: {exc}") from None
    if not argv:
        raise ConfigError(f"--command-hook {command_hook!r}: no program to run")
    return argv


def _unique(names: list[str]) -> None:
    seen = {n for n in names if names.count(n) > 1}
    if seen:
        raise ConfigError(f"--target: the name {sorted(seen)[0]!r} is used twice")


def _once(targets: list[Target], config: WatchConfig, as_json: bool) -> int:
    statuses = run_once(targets, config)
    if as_json:
        click.echo(json.dumps(report_json(statuses), indent=2, sort_keys=True))
    else:
        click.echo(render_table(statuses), nl=False)
    return once_exit_code(statuses)


def _service(targets: list[Target], config: WatchConfig, sinks: Sinks) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        run_service(targets, config, sinks, log=lambda line: click.echo(line, err=True),
                    stop=stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return exitcodes.OK
