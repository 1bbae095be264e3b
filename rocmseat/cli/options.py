"""Options shared by several commands, each with its environment variable."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from rocmseat import state
from rocmseat.state import STATE_ENV
from rocmseat.sysfs import fs
from rocmseat.sysfs.fs import SYSFS_ENV

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


def resolve_state_dir(value: Path | None) -> Path:
    return value if value is not None else state.default_state_dir()
