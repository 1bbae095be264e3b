"""`rocmseat systemd render SEAT --out DIR` and `rocmseat systemd install SEAT [--root DIR]`."""

from __future__ import annotations

import grp
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from rocmseat import exitcodes
from rocmseat.cli.options import (
    state_dir_option,
    sysfs_root_option,
)
from rocmseat.errors import ConfigError, RocmseatError

UNIT_DIR = Path("etc/systemd/system")


def _default_bin() -> Path:
    beside = Path(sys.executable).parent / "rocmseat"
    if beside.is_file():
        return beside
    found = shutil.which("rocmseat")
    if found is None:
        raise RocmseatError("cannot find the installed `rocmseat` script",
                            hint="pass --rocmseat-bin /absolute/path/to/rocmseat")
    return Path(found)


def _missing_groups(groups: tuple[str, ...]) -> list[str]:
    missing = []
    for group in groups:
        try:
            grp.getgrnam(group)
        except KeyError:
            missing.append(group)
    return missing


def _check_groups(groups: tuple[str, ...], *, refuse: bool) -> None:
    """SupplementaryGroups= naming a group this host lacks: systemd-analyze verify passes, but
    systemd refuses every start with status=216/GROUP (a restart loop under Restart=)."""
    missing = _missing_groups(groups)
    if not missing:
        return
    what = (f"group {', '.join(repr(g) for g in missing)} does not exist on this host: "
            "systemd would refuse to start the units (status=216/GROUP, \"Failed to determine "
            "supplementary groups\")")
    hint = "create it (groupadd --system NAME; Debian's udev package makes render) or drop --user"
    if refuse:
        raise ConfigError(f"SupplementaryGroups=: {what}", hint=hint)
    click.echo(f"rocmseat: warning: {what}; {hint}", err=True)


def _render(seat_file: Path, sysfs_root: Path | None, state_dir: Path | None,
            rocmseat_bin: Path | None, user: str | None, *, refuse_missing_groups: bool = False,
            ) -> dict[str, str]:
    from rocmseat.launch import flow
    from rocmseat.launch.units import (
        UnitContext,
        check_user,
        load_templates,
        render_units,
        unit_groups,
    )
    from rocmseat.placement.place import seat_roots
    from rocmseat.seat.load import load_seat

    if user is not None:
        check_user(user)
    seat = load_seat(seat_file)
    root, state = seat_roots(seat, sysfs_root, state_dir)
    binary = rocmseat_bin if rocmseat_bin is not None else _default_bin()
    if not binary.is_absolute():
        raise click.BadParameter("must be an absolute path", param_hint="--rocmseat-bin")
    # The units name each replica, pair, NUMA node and port as the placement does; the HIP
    # indices are not in them (launch numbers the pair at each start). Each replica keeps the
    # pair it ran on (its placement.json in the state dir): a re-render after a GPU is lost
    # never moves another replica onto its GPUs.
    placed = flow.place_for_launch(seat, root, state_dir=state)
    for name, problem in sorted(placed.problems.items()):
        click.echo(f"rocmseat: warning: {problem}: not used as replica {name}'s identity",
                   err=True)
    for record in placed.records:
        if record.lost:
            click.echo(f"rocmseat: warning: replica {record.replica}: {record.lost}; its unit "
                       "is rendered with its own pair and will refuse to start until that "
                       "pair is back", err=True)
    ctx = UnitContext(rocmseat_bin=binary, seat_file=seat_file.absolute(), state_dir=state,
                      user=user)
    units = render_units(seat, placed.records, ctx, load_templates())
    _check_groups(unit_groups(seat, ctx), refuse=refuse_missing_groups)
    return units


UNIT_LIMIT_BYTES = 1 << 20  # a unit is a few KiB


def _read(path: Path) -> str | None:
    """The unit file already at `path` (None: none), read as a regular file only: a FIFO there
    would hang `install`. A unit masked with `systemctl mask` (a link to /dev/null) is said."""
    from rocmseat.errors import ReadError
    from rocmseat.safeio import read_regular_text
    from rocmseat.seat.locate import printable

    try:
        if path.is_symlink() and os.path.realpath(path) == os.devnull:
            raise ConfigError(f"{path}: the unit is masked (a link to /dev/null): not "
                              "overwritten",
                              hint=f"unmask it first: systemctl unmask {path.name}")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the unit already there: "
                          f"{exc.strerror or exc}") from None
    if not os.path.lexists(path):
        return None
    try:
        return read_regular_text(path, limit_bytes=UNIT_LIMIT_BYTES)
    except ReadError as exc:
        raise ConfigError(f"cannot read the unit already there: {printable(exc.message, 300)}",
                          hint="move it away, then install again") from None


def _kept(before: str | None, text: str) -> str | None:
    """Why an existing unit file must not be overwritten, or None: someone's own unit (no
    rocmseat header), or a unit rocmseat rendered and someone edited since (its content no
    longer matches the hash in its header). A re-render of an unedited unit is replaced."""
    from rocmseat.launch.units import rendered_state

    if before is None or before == text:
        return None
    state = rendered_state(before)
    if state == "pristine":
        return None
    if state == "edited":
        return "was edited after rocmseat rendered it (its content no longer matches the hash " \
               "in its first line)"
    return "was not rendered by rocmseat (or by one that kept no content hash)"


def _write(path: Path, text: str, where: str) -> None:
    from rocmseat.atomic import atomic_write_text

    try:
        atomic_write_text(path, text)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write ({where}): {exc.strerror or exc}") from None


F = TypeVar("F", bound=Callable[..., Any])


def _common(func: F) -> F:
    func = click.option("--user", help="Run the units as this user (default root).")(func)
    func = click.option("--rocmseat-bin", type=click.Path(path_type=Path, dir_okay=False),
                        help="Absolute path of the rocmseat script the units run "
                        "(default: the one running now).")(func)
    func = state_dir_option(func)
    func = sysfs_root_option(func)
    return click.argument("seat_file", metavar="SEAT",
                          type=click.Path(path_type=Path, dir_okay=False))(func)


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
    units = _render(seat_file, sysfs_root, state_dir, rocmseat_bin, user)
    for name, text in sorted(units.items()):
        _write(out_dir / name, text, "--out")
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
    from rocmseat.runner import run

    # Under --root the units are for another system (an image): warn only.
    units = _render(seat_file, sysfs_root, state_dir, rocmseat_bin, user,
                    refuse_missing_groups=root is None)
    target = (root if root is not None else Path("/")) / UNIT_DIR
    kept = [(target / n, why) for n, text in sorted(units.items())
            if (why := _kept(_read(target / n), text)) is not None]
    if kept and not force:
        path, why = kept[0]
        raise ConfigError(f"{path}: exists, differs and {why}; not overwritten"
                          + (f" (and {len(kept) - 1} more)" if len(kept) > 1 else ""),
                          hint="compare it with `rocmseat systemd render`, move it away, or "
                          "pass --force to replace it")
    for name, text in sorted(units.items()):
        path = target / name
        before = _read(path)
        if before == text:
            click.echo(f"unchanged {path}")
            continue
        _write(path, text, "--root" if root is not None else "the unit directory")
        click.echo(f"{'installed' if before is None else 'replaced'} {path}")
    if root is None:
        done = run(["systemctl", "daemon-reload"], timeout_s=60)
        if not done.ok:
            raise RocmseatError(f"systemctl daemon-reload failed: {done.stderr.strip()}")
    replicas = [n for n in sorted(units) if not n.endswith(("-watch.service",
                                                             "-preflight.service"))]
    click.echo("start with: systemctl enable --now " + " ".join(replicas))
    return exitcodes.OK
