"""`rocmseat systemd render SEAT --out DIR` and `rocmseat systemd install SEAT [--root DIR]`.

Options, one call, the lines: the policy (what is rendered for this host, what is refused,
what may be replaced) is rocmseat.launch.install's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from rocmseat import exitcodes
from rocmseat.cli.options import (
    state_dir_option,
    sysfs_root_option,
)

F = TypeVar("F", bound=Callable[..., Any])


def _common(func: F) -> F:
    func = click.option("--user", help="Run the units as this user [default: root]")(func)
    func = click.option("--rocmseat-bin", type=click.Path(path_type=Path, dir_okay=False),
                        help="Absolute path of the rocmseat script the units run "
                        "[default: the one running now]")(func)
    func = state_dir_option(func)
    func = sysfs_root_option(func)
    return click.argument("seat_file", metavar="SEAT",
                          type=click.Path(path_type=Path, dir_okay=False))(func)


def _render(seat_file: Path, sysfs_root: Path | None, state_dir: Path | None,
            rocmseat_bin: Path | None, user: str | None, *, live: bool) -> Any:
    from rocmseat.launch.install import render_for_host
    from rocmseat.placement.place import seat_roots
    from rocmseat.seat.load import load_seat

    if rocmseat_bin is not None and not rocmseat_bin.is_absolute():
        raise click.BadParameter("must be an absolute path", param_hint="--rocmseat-bin")
    seat = load_seat(seat_file)
    root, state = seat_roots(seat, sysfs_root, state_dir)
    return render_for_host(seat_file, sysfs_root=root, state_dir=state,
                           rocmseat_bin=rocmseat_bin, user=user, live=live,
                           warn=lambda line: click.echo(line, err=True))


@click.group("systemd")
def systemd() -> None:
    """Render or install the seat's systemd units (one per replica, preflight, watchdog)."""


@systemd.command("render")
@_common
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Write the unit files into this directory.")
def render(seat_file: Path, *, sysfs_root: Path | None, state_dir: Path | None,
           rocmseat_bin: Path | None, user: str | None, out_dir: Path) -> int:
    """Write the units of SEAT into --out DIR."""
    from rocmseat.launch.install import write_unit

    rendered = _render(seat_file, sysfs_root, state_dir, rocmseat_bin, user, live=False)
    for name, text in sorted({**rendered.units, **rendered.quadlets}.items()):
        write_unit(out_dir / name, text, "--out")
        click.echo(str(out_dir / name))
    return exitcodes.OK


@systemd.command("install")
@_common
@click.option("--root", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Install under this root (DIR/etc/systemd/system) and skip daemon-reload.")
@click.option("--force", is_flag=True,
              help="Replace a unit file of the same name that rocmseat did not render, or "
              "that was edited after it did.")
def install(seat_file: Path, *, sysfs_root: Path | None, state_dir: Path | None,
            rocmseat_bin: Path | None, user: str | None, root: Path | None,
            force: bool) -> int:
    """Install the units of SEAT into /etc/systemd/system (or under --root) and reload."""
    from rocmseat.launch.install import install_units

    # Under --root the units are for another system (an image): its traps are warned about.
    rendered = _render(seat_file, sysfs_root, state_dir, rocmseat_bin, user, live=root is None)
    install_units(rendered, root=root, force=force, say=click.echo)
    return exitcodes.OK
