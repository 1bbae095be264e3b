"""Options shared by several commands, each with its environment variable.

click is imported by the functions that build options, not by this module: the error boundary
(rocmseat.cli.main) reads JSON_WANTED on every command line, the cached NPD answer included,
which needs no click (rocmseat.cli.npd_fast)."""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from rocmseat import state
from rocmseat.state import STATE_ENV
from rocmseat.sysfs import fs
from rocmseat.sysfs.fs import SYSFS_ENV

if TYPE_CHECKING:
    import click

    from rocmseat.seat.model import Seat

F = TypeVar("F", bound=Callable[..., Any])


def sysfs_root_option(func: F) -> F:
    import click

    return click.option(
        "--sysfs-root",
        type=click.Path(path_type=Path, file_okay=False),
        envvar=SYSFS_ENV,
        default=None,
        help=f"Read this tree instead of /sys [env var: {SYSFS_ENV}].",
    )(func)


def max_age_option(help: str) -> Callable[[F], F]:
    """`--max-age SECONDS`: the oldest cached preflight verdict a reader trusts (one default
    for every reader, rocmseat.preflight.verdict_doc.DEFAULT_MAX_AGE_S); `help` says how this
    command uses it."""
    import click

    from rocmseat.preflight.verdict_doc import DEFAULT_MAX_AGE_S

    return click.option(
        "--max-age",
        "max_age_s",
        type=click.FloatRange(min=1.0, max=7 * 86400.0),
        default=DEFAULT_MAX_AGE_S,
        show_default=True,
        metavar="SECONDS",
        help=help,
    )


def state_dir_option(func: F) -> F:
    import click

    return click.option(
        "--state-dir",
        type=click.Path(path_type=Path, file_okay=False),
        envvar=STATE_ENV,
        default=None,
        help=f"State directory [env var: {STATE_ENV}; default: a seat's state_dir, else "
        "/var/lib/rocmseat as root, else $XDG_STATE_HOME/rocmseat]",
    )(func)


# The document each command prints with --json, by command path (docs/architecture.md, "JSON
# schemas"), as "module:CONSTANT" so that the schema string has one home and nothing is
# imported unless a document has to be printed (or the schema itself, where no module has it).
JSON_SCHEMAS: dict[str, str] = {
    "rocmseat preflight": "rocmseat.preflight.render:SCHEMA",
    "rocmseat key": "rocmseat.cache.explain:KEY_SCHEMA",
    "rocmseat cache-audit": "rocmseat.cache.audit_render:SCHEMA",
    "rocmseat launch": "rocmseat.launch.planview:PLAN_SCHEMA",
    "rocmseat watch": "rocmseat.watch.status:SCHEMA",
    "rocmseat spec gate": "rocmseat.speculation.gate.report:SCHEMA",
    # `spec gate --interleave` answers in its own document (cli/spec.py names it)
    "rocmseat spec gate --interleave": "rocmseat.speculation.gate.interleave_report:SCHEMA",
    "rocmseat spec advise": "rocmseat.speculation.advise.advice:SCHEMA",
    "rocmseat demo models": "rocmseat.demo-models/v1",  # written in cli/demo.py itself
    "rocmseat demo spec-models": "rocmseat.demo-spec-models/v1",  # likewise
    "rocmseat demo gguf-models": "rocmseat.demo-gguf-models/v1",  # likewise
    "rocmseat remediate status": "rocmseat.remediation-status/v1",  # in watch/remediate/service.py
}
# the command path of this invocation, when it asked for JSON (the error boundary reads it)
JSON_WANTED: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "rocmseat_json_wanted", default=None)


def want_json(ctx: click.Context) -> None:
    """This invocation prints a JSON document: one that fails prints the error document."""
    JSON_WANTED.set(ctx.command_path)


def want_json_as(command_path: str) -> None:
    """This invocation's error document takes the schema JSON_SCHEMAS gives `command_path` (a
    command whose flag changes its document: `spec gate --interleave`)."""
    JSON_WANTED.set(command_path)


def _json_flag(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        want_json(ctx)
    return value


def json_option(func: F) -> F:
    import click

    return click.option(
        "--json", "as_json", is_flag=True, callback=_json_flag,
        help="Print JSON (stable keys); when the command could not check, a document with "
        "`error`.",
    )(func)


def error_document(command_path: str, message: str, exit_code: int,
                   hint: str | None = None) -> dict[str, Any] | None:
    """`{"schema", "exit_code", "error", "hint"}` for a --json command that could not produce
    its document; None for a command path with no document."""
    target = JSON_SCHEMAS.get(command_path)
    if target is None:
        return None
    import importlib

    schema = target
    if ":" in target:
        module, name = target.split(":")
        schema = getattr(importlib.import_module(module), name)
    return {"schema": schema, "exit_code": exit_code, "error": message, "hint": hint or None}


def resolve_sysfs_root(value: Path | None) -> Path:
    return value if value is not None else fs.default_sysfs_root()


def resolve_state_dir(value: Path | None, seat: Seat | None = None) -> Path:
    """`--state-dir`, else the seat's state_dir, else the default (rocmseat.state.state_root)."""
    return state.state_root(value, seat.state_dir if seat is not None else None)


def pair_option(text: str | None, option: str = "--pair") -> tuple[str, ...] | None:
    """A launch `--pair A,B[,...]` value: the replica's GPUs (a pair, or a TP group), different
    PCI addresses, sorted (rocmseat.placement.rules.parse_group, the one parser); click's usage
    error naming the option otherwise."""
    if text is None:
        return None
    import click

    from rocmseat.errors import ConfigError
    from rocmseat.placement.rules import parse_group

    try:
        return parse_group(text, option)
    except ConfigError as exc:
        raise click.BadParameter(exc.message, param_hint=option) from None
