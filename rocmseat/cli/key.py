"""`rocmseat key SEAT`: the config key of a replica, and with --explain every factor in it."""

from __future__ import annotations

from pathlib import Path

import click

from rocmseat import exitcodes
from rocmseat.cli.options import json_option, state_dir_option, sysfs_root_option


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
    from rocmseat import jsonio
    from rocmseat.cache.current import replica_current_key
    from rocmseat.cache.explain import explain_text, key_json, key_line
    from rocmseat.seat.load import load_seat

    current = replica_current_key(load_seat(seat_file), replica, sysfs_root=sysfs_root,
                                  state_dir=state_dir)
    if as_json:
        click.echo(jsonio.dumps(key_json(current, str(seat_file))))
    elif explain:
        click.echo(explain_text(current, str(seat_file)), nl=False)
    elif current.key is not None:
        click.echo(current.key.digest)
    else:
        click.echo(key_line(current), err=True)
        for name, reason in sorted(current.unknown.items()):
            click.echo(f"  {name}: {reason}", err=True)
    return exitcodes.OK if current.key is not None else exitcodes.CANNOT_CHECK
