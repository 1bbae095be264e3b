"""`rocmseat key SEAT`: the config key of a replica, and with --explain every factor in it."""

from __future__ import annotations

import json
from pathlib import Path

import click

from rocmseat import exitcodes
from rocmseat.cli.options import (
    json_option,
    resolve_state_dir,
    resolve_sysfs_root,
    state_dir_option,
    sysfs_root_option,
)


@click.command()
@click.argument("seat_file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--replica", default="r0", show_default=True, help="Replica name.")
@click.option("--explain", is_flag=True, help="Print every factor and its value.")
@json_option
@sysfs_root_option
@state_dir_option
def key(
    *,
    seat_file: Path, replica: str, explain: bool, as_json: bool, sysfs_root: Path | None,
    state_dir: Path | None,
) -> int:
    """Print the config key of a replica of SEAT_FILE (exit 2 if a factor is unknown).

    The key hashes every factor that changes compiled graphs: engine versions (asked from the
    seat's engine python), image digest, GPU arch, model and drafter identity, speculative
    config, TP, sequence and token limits, dtype, compilation config and the key environment.
    """
    from rocmseat.cache.current import current_key, replica_arch
    from rocmseat.cache.explain import explain_text, key_json, key_line
    from rocmseat.errors import ConfigError
    from rocmseat.launch.placed import known_placement
    from rocmseat.seat.load import load_seat
    from rocmseat.seat.locate import printable
    from rocmseat.seat.placement import replica_index

    seat = load_seat(seat_file)
    sysfs = resolve_sysfs_root(sysfs_root) if seat.backend == "rocm" else None
    # the state dir only matters where /sys shows no GPU: the placement launch recorded
    state = state_dir or seat.state_dir or (
        resolve_state_dir(None) if seat.backend == "rocm" else None)
    known = known_placement(seat, sysfs_root=sysfs, state_root=state)
    record = next((r for r in known.records if r.replica == replica), None)
    if record is None:
        # a replica the placement does not know here: the seat's naming rule says whether it
        # can exist at all (rocmseat.seat.placement.replica_index); one it cannot is an error,
        # one it can (an auto seat on a host that cannot read the node) has an unknown arch
        names = seat.replicas.names
        if known.records or replica_index(seat, replica) is None:
            listed = ", ".join(r.replica for r in known.records) or (
                ", ".join(names) if names is not None else "r0, r1, ...")
            raise ConfigError(f"{seat_file}: seat {seat.name} has no replica "
                              f"{printable(replica, 40)!r} ({listed})")
    arch, why = replica_arch(seat, record, known.why or known.problems.get(replica, ""))
    current = current_key(seat, replica, gpu_arch=arch, arch_unknown_why=why)
    if as_json:
        click.echo(json.dumps(key_json(current, str(seat_file)), indent=2, sort_keys=True))
    elif explain:
        click.echo(explain_text(current, str(seat_file)), nl=False)
    elif current.key is not None:
        click.echo(current.key.digest)
    else:
        click.echo(key_line(current), err=True)
        for name, reason in sorted(current.unknown.items()):
            click.echo(f"  {name}: {reason}", err=True)
    return exitcodes.OK if current.key is not None else exitcodes.CANNOT_CHECK
