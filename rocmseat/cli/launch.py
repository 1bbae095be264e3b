"""`rocmseat launch SEAT --replica NAME` and `rocmseat launch SEAT --dry-run [--json]`."""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from rocmseat import exitcodes, jsonio
from rocmseat.cli.options import json_option, pair_option, state_dir_option, sysfs_root_option

if TYPE_CHECKING:
    from rocmseat.seat.model import Seat


def _echo_engine(line: str) -> None:
    # The engine's own output: passed through to stdout (the journal under systemd) as is.
    sys.stdout.write(line)
    sys.stdout.flush()


def _say(text: str) -> None:
    # rocmseat's own lines go to stderr, prefixed, so they stand out among the engine's
    click.echo(f"rocmseat: {text}", err=True)


@dataclass(frozen=True, slots=True)
class LaunchOptions:
    """`rocmseat launch`'s command line, as click converted it (one field per option)."""

    seat_file: Path
    replica: str | None
    dry_run: bool
    preflight_only: bool
    pair_text: str | None
    stop_grace_s: float
    no_drafter: bool
    as_json: bool
    sysfs_root: Path | None
    state_dir: Path | None


@click.command("launch")
@click.argument("seat_file", metavar="SEAT", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--replica", help="Run this replica in the foreground (r0, r1, ...).")
@click.option("--dry-run", is_flag=True, help="Print every replica's plan; start nothing.")
@click.option("--preflight-only", is_flag=True,
              help="With --replica: run the pair's sysfs preflight, judge it as launch does, "
              "exit (the replica unit's ExecStartPre=).")
@click.option("--pair", "pair_text", metavar="PCI,PCI",
              help="With --replica: the replica's GPU pair as its unit was rendered with; "
              "launch refuses (exit 1) when the node no longer places it there.")
@click.option("--stop-grace", "stop_grace_s", type=click.FloatRange(min=0), default=30.0,
              show_default=True, help="Seconds between SIGTERM and SIGKILL when stopping.")
@click.option("--no-drafter", is_flag=True,
              help="Run the seat without its [drafter] (its own config key and cache): "
              "remediation step 2 (docs/remediate.md).")
@json_option
@sysfs_root_option
@state_dir_option
def launch(**values: Any) -> int:
    """Start one replica of SEAT under supervision, or show the plan of every replica."""
    opts = LaunchOptions(**values)
    _check_combination(opts)
    from rocmseat.launch import flow
    from rocmseat.placement.place import seat_roots
    from rocmseat.seat.load import load_seat

    pin = pair_option(opts.pair_text)
    seat = load_seat(opts.seat_file)
    if opts.no_drafter:
        from rocmseat.watch.remediate.mode import without_drafter

        seat = without_drafter(seat)
    # backend cpu reads no /sys: no GPUs, no pairs, no NUMA binding
    root, state = seat_roots(seat, opts.sysfs_root, opts.state_dir)
    if opts.dry_run:
        return _dry_run(seat, root, state, as_json=opts.as_json)
    assert opts.replica is not None
    if opts.preflight_only:
        flow.preflight_only(seat, opts.replica, sysfs_root=root, state_dir=state, say=_say,
                            pin=pin)
        return exitcodes.OK
    progress = _ReadyProgress() if sys.stderr.isatty() else None
    try:
        result = flow.launch_replica(seat, opts.replica, flow.LaunchRun(
            sysfs_root=root, state_dir=state, echo=_echo_engine, say=_say,
            stop_grace_s=opts.stop_grace_s, pin=pin,
            on_status=progress.on_message if progress else None))
    finally:
        if progress is not None:
            progress.stop()
    return result.exit_code


def _check_combination(opts: LaunchOptions) -> None:
    """The options that go together (a usage error, exit 2, before anything is read)."""
    if opts.dry_run == (opts.replica is not None):
        raise click.UsageError("give exactly one of --replica NAME and --dry-run")
    if opts.as_json and not opts.dry_run:
        raise click.UsageError("--json goes with --dry-run")
    if opts.preflight_only and opts.replica is None:
        raise click.UsageError("--preflight-only goes with --replica NAME")
    if opts.pair_text is not None and opts.replica is None:
        raise click.UsageError("--pair goes with --replica NAME")


def _dry_run(seat: Seat, root: Path | None, state: Path, *, as_json: bool) -> int:
    """`--dry-run`: every replica's plan, and what launch would refuse (exit 2 each)."""
    from rocmseat.launch import flow
    from rocmseat.launch.planview import plan_json, plan_text

    plans = flow.dry_run(seat, root, state_dir=state, environ=os.environ, say=_say)
    if as_json:
        click.echo(jsonio.dumps(plan_json(seat, plans)))
    else:
        click.echo(plan_text(seat, plans), nl=False)
    for plan in plans:
        refused = plan.refusal()
        if refused is not None:
            _say(f"replica {plan.replica}: launch would refuse to start it (exit "
                 f"{refused[0]}): {refused[1]}")
    # a lint for CI: what launch would stop at before starting anything (exit 2 each)
    problems = flow.dry_run_problems(seat, plans, os.environ)
    for problem in problems:
        _say(f"launch would refuse to start (exit {exitcodes.CANNOT_CHECK}): {problem}")
    return flow.refused_exit(plans, problems)


class _ReadyProgress:
    """On a terminal, the wait for READY says where it is: every sd_notify status as it
    changes, and every `every_s` seconds how long it has waited (engine starts take minutes,
    docs/launch.md). Silent off a terminal: systemd has the same text in `systemctl status`."""

    def __init__(self, every_s: float = 15.0) -> None:
        self.started = time.monotonic()
        self.last = "starting"
        self.done = threading.Event()
        self.lock = threading.Lock()  # a tick never speaks after READY was said
        self.every_s = every_s
        self.ticker = threading.Thread(target=self._tick, name="rocmseat-ready-wait",
                                       daemon=True)
        self.ticker.start()

    def on_message(self, message: str) -> None:
        fields = dict(line.partition("=")[::2] for line in message.splitlines())
        status = fields.get("STATUS", "")
        with self.lock:
            if fields.get("READY") == "1" or fields.get("STOPPING") == "1":
                self.done.set()
            if status and status != self.last:
                self.last = status
                _say(f"{status} ({time.monotonic() - self.started:.0f} s)")

    def _tick(self) -> None:
        while not self.done.wait(self.every_s):
            with self.lock:
                if not self.done.is_set():
                    _say(f"waiting for READY: {time.monotonic() - self.started:.0f} s "
                         f"(last: {self.last})")

    def stop(self) -> None:
        self.done.set()
        self.ticker.join(timeout=1.0)
