"""`rocmseat remediate status [--json]` and `rocmseat remediate reset [REPLICA]`
(docs/remediate.md). Options, one library call, the lines."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from rocmseat import exitcodes
from rocmseat.cli.options import json_option, resolve_state_dir, state_dir_option
from rocmseat.errors import ConfigError, RocmseatError
from rocmseat.statedir import REMEDIATION_ROOT, StateDir
from rocmseat.text import printable

F = TypeVar("F", bound=Callable[..., Any])


def _seat_option(func: F) -> F:
    return click.option("--seat", "seat_file", type=click.Path(path_type=Path, dir_okay=False),
                        default=None, help="The seat file [default: the one seat with "
                        "remediation state in the state dir]")(func)


def _where(seat_file: Path | None, state_dir: Path | None) -> tuple[Path, str]:
    """(state dir, seat name): from --seat (its state_dir unless --state-dir), else the one
    seat under <state dir>/remediation/."""
    state, seats = _seats(seat_file, state_dir)
    if len(seats) != 1:
        base = StateDir(state).remediation_root
        found = ", ".join(seats) if seats else "none"
        raise ConfigError(f"{base}: {len(seats)} seats with remediation state ({found})",
                          hint="name the seat with --seat FILE (and --state-dir DIR)")
    return state, seats[0]


def _seats(seat_file: Path | None, state_dir: Path | None) -> tuple[Path, list[str]]:
    """(state dir, seat names): the seat --seat names, else those under <state dir>/remediation/
    (none on a node where `watch --remediate` never ran)."""
    if seat_file is not None:
        from rocmseat.seat.load import load_seat

        seat = load_seat(seat_file)
        return resolve_state_dir(state_dir if state_dir is not None else seat.state_dir), \
            [seat.name]
    state = resolve_state_dir(state_dir)
    base = StateDir(state).remediation_root
    names = StateDir(state).names(REMEDIATION_ROOT) or []
    return state, [n for n in names if (base / n).is_dir() and not (base / n).is_symlink()]


@click.group("remediate")
def remediate() -> None:
    """What `watch --remediate` did to a seat's replicas; lift its halts and modes."""


@remediate.command("status")
@_seat_option
@json_option
@state_dir_option
@click.option("--last", type=click.IntRange(1, 1000), default=10, show_default=True,
              help="Journal records shown.")
def status(seat_file: Path | None, as_json: bool, state_dir: Path | None, last: int) -> int:
    """Each replica's mode, the step running, the halts and the last journal records. Exit 0
    nothing halted or changed (a node where nothing was ever remediated included), 1 a halt
    or a replica off its normal mode."""
    from rocmseat.jsonio import dumps
    from rocmseat.watch.remediate import journal
    from rocmseat.watch.remediate.render import render_status
    from rocmseat.watch.remediate.service import status_json

    if seat_file is None:
        root, seats = _seats(None, state_dir)
        if not seats:  # a fresh node: nothing happened, which is not "could not check"
            base = StateDir(root).remediation_root
            if as_json:
                click.echo(dumps({"schema": "rocmseat.remediation-status/v1", "seat": None,
                                  "node": None, "mode": None, "seat_file": None,
                                  "ladders": {}, "taken": [], "halts": {}, "journal": []}))
            else:
                click.echo(f"no remediation state in {printable(str(base), 200)}: nothing "
                           "was remediated on this node")
            return exitcodes.OK
    state_root, seat = _where(seat_file, state_dir)
    state, meta = journal.load_state(state_root, seat)
    records, problems = journal.read_records(state_root, seat, last=last)
    for problem in problems:
        click.echo(f"rocmseat: warning: {problem}: not read", err=True)
    engine = _engine_of(seat_file)
    if as_json:
        doc = status_json(state, meta, records)
        if engine is not None:
            from rocmseat.watch.remediate.policy import steps_for

            applying, not_applying = steps_for(engine[0])
            doc["engine"] = engine[0]
            doc["steps_applying"] = list(dict.fromkeys(s.action for s in applying))
            doc["steps_not_applying"] = list(dict.fromkeys(s.action for s in not_applying))
        click.echo(dumps(doc))
    else:
        click.echo(render_status(state, meta, records), nl=False)
        if engine is not None:
            from rocmseat.watch.remediate.render import applies_line

            click.echo(applies_line(*engine), nl=False)
    from rocmseat.watch.remediate.mode import Mode

    off = state.halts or any(lad.mode != Mode.DRAFTER for lad in state.ladders.values())
    return exitcodes.PROBLEM if off else exitcodes.OK


def _engine_of(seat_file: Path | None) -> tuple[str, str] | None:
    """(kind, label) of the seat's engine, when a seat file is given."""
    if seat_file is None:
        return None
    from rocmseat.engines import seat_engine
    from rocmseat.seat.load import load_seat

    engine = seat_engine(load_seat(seat_file))
    return engine.kind, engine.label


@remediate.command("reset")
@click.argument("replica", required=False)
@_seat_option
@state_dir_option
def reset(replica: str | None, seat_file: Path | None, state_dir: Path | None) -> int:
    """Lift the halts (of REPLICA, or all) and bring REPLICA (or every replica) back to its
    drafter and into rotation: its no-drafter drop-in is removed and it restarts. A
    transaction: the replica is "resetting" until its restart is done, then "drafter"; a
    restart that fails leaves it "resetting" with the reason (`status` says so, exit 1)."""
    from rocmseat.watch.remediate import journal
    from rocmseat.watch.remediate.mode import Mode
    from rocmseat.watch.remediate.service import begin_reset, finish_reset, plan_reset

    state_root, seat = _where(seat_file, state_dir)
    plan = plan_reset(state_root, seat, replica)
    edge = _edge_for(plan, seat_file, state_root, seat) if plan else None
    _, back, meta = begin_reset(state_root, seat, replica, time.time())
    click.echo(f"reset {printable(replica or 'every replica', 80)} of seat {seat}: halts lifted")
    if back and (edge is None or any(n not in edge.records for n in back)):
        edge = _edge_for(back, seat_file, state_root, seat)  # a step began meanwhile
    failed = 0
    for name in back:
        assert edge is not None
        try:
            # the watcher's worker may be restarting this replica: wait for it, never race it
            with journal.acting(state_root, seat, timeout_s=edge.settings.ready_timeout_s + 60):
                edge.restart(name, Mode.DRAFTER, why="rocmseat remediate reset", reload=True)
        except RocmseatError as exc:
            finish_reset(state_root, meta, name, exc.message, time.time())
            click.echo(f"rocmseat: error: {printable(exc.message, 400)}: {name} stays "
                       f"\"{Mode.RESETTING}\" (run the reset again once that is fixed)", err=True)
            failed += 1
            continue
        finish_reset(state_root, meta, name, None, time.time())
        click.echo(f"restarted {name} with its drafter")
    return exitcodes.PROBLEM if failed else exitcodes.OK


def _edge_for(names: list[str], seat_file: Path | None, state_root: Path, seat: str) -> Any:
    """The edge that restarts `names`, checked before anything changes: the seat file named by
    --seat or the state, and a placement record for each (ConfigError, exit 2, otherwise)."""
    from rocmseat.placement.recorded import read_recorded
    from rocmseat.seat.load import load_seat
    from rocmseat.watch.remediate import journal
    from rocmseat.watch.remediate.actions import SeatEdge

    meta = journal.load_state(state_root, seat)[1]
    source = seat_file or (Path(meta.seat_file) if meta.seat_file else None)
    if source is None:
        raise ConfigError(f"seat {seat}: the state names no seat file to restart "
                          f"{', '.join(names)} from; nothing was changed", hint="pass --seat FILE")
    loaded = load_seat(source)
    records = {r.replica: r for r in read_recorded(loaded, state_root).records}
    missing = [n for n in names if n not in records]
    if missing:
        raise ConfigError(f"{', '.join(missing)}: no placement record in {state_root} (not "
                          "launched by rocmseat with this state dir, or removed): cannot restart "
                          "it with its drafter; nothing was changed",
                          hint="launch it again (`rocmseat launch SEAT --replica R`), then reset")
    return SeatEdge(loaded, records)
