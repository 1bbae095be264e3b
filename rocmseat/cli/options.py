"""Options shared by several commands, each with its environment variable."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from rocmseat import state
from rocmseat.state import STATE_ENV
from rocmseat.sysfs import fs
from rocmseat.sysfs.fs import SYSFS_ENV

if TYPE_CHECKING:
    from rocmseat.seat.model import Seat

F = TypeVar("F", bound=Callable[..., Any])


def sysfs_root_option(func: F) -> F:
    return click.option(
        "--sysfs-root",
        type=click.Path(path_type=Path, file_okay=False),
        envvar=SYSFS_ENV,
        default=None,
        help=f"Read this tree instead of /sys [env var: {SYSFS_ENV}].",
    )(func)


def state_dir_option(func: F) -> F:
    return click.option(
        "--state-dir",
        type=click.Path(path_type=Path, file_okay=False),
        envvar=STATE_ENV,
        default=None,
        help=f"State directory (default /var/lib/rocmseat as root) [env var: {STATE_ENV}].",
    )(func)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON (stable keys).")(func)


def resolve_sysfs_root(value: Path | None) -> Path:
    return value if value is not None else fs.default_sysfs_root()


def resolve_state_dir(value: Path | None, seat: Seat | None = None) -> Path:
    """`--state-dir`, else the seat's state_dir, else the default (rocmseat.state.state_root)."""
    return state.state_root(value, seat.state_dir if seat is not None else None)


def pair_option(text: str | None, option: str = "--pair") -> tuple[str, str] | None:
    """A `--pair A,B` value: two different PCI addresses, sorted (rocmseat.placement.rules
    .parse_pair, the one parser); click's usage error naming the option otherwise."""
    if text is None:
        return None
    from rocmseat.errors import ConfigError
    from rocmseat.placement.rules import parse_pair

    try:
        return parse_pair(text, option)
    except ConfigError as exc:
        raise click.BadParameter(exc.message, param_hint=option) from None
