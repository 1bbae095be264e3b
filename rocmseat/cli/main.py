"""The console entry and the one error boundary every command runs inside (the root group is
rocmseat.cli.root; the cached NPD answer, rocmseat.cli.npd_fast, needs no click).

Exit codes (docs/architecture.md "Contracts", node-problem-detector compatible): 0 ok, 1 a
problem, 2 could not check or a usage error, 3 an internal error (one line on stderr, the
traceback in a log file only its owner can write), 130 ^C.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmseat import __version__, exitcodes
from rocmseat.errors import RocmseatError

if TYPE_CHECKING:
    from rocmseat.cli.root import COMMANDS, LazyGroup, cli

__all__ = ["COMMANDS", "LazyGroup", "cli", "main"]

LOG_FILE_ENV = "ROCMSEAT_ERROR_LOG"


def __getattr__(name: str) -> Any:
    """The root group and its command table live in rocmseat.cli.root (click is imported only
    by a command line that needs it); `rocmseat.cli.main.cli` and `.COMMANDS` still name them."""
    if name in ("cli", "COMMANDS", "LazyGroup"):
        from rocmseat.cli import root

        return getattr(root, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code (and exits with it when run)."""
    code = _run(list(argv) if argv is not None else sys.argv[1:])
    if argv is None:
        sys.exit(code)
    return code


def _run(args: list[str]) -> int:
    from rocmseat.cli.options import JSON_WANTED

    token = JSON_WANTED.set(None)
    try:
        return _boundary(args)
    finally:
        JSON_WANTED.reset(token)


def _boundary(args: list[str]) -> int:
    try:
        result = _dispatch(args)
    except (Exception, KeyboardInterrupt) as exc:
        return _failed(args, exc)
    if isinstance(result, int):
        return result
    return exitcodes.OK


def _dispatch(args: list[str]) -> Any:
    """The cached NPD answer without click when the command line is exactly one that path
    takes (rocmseat.cli.npd_fast: the same call, the same bytes); every other one through the
    root group."""
    from rocmseat.cli.npd_fast import answer

    code = answer(args)
    if code is not None:
        return code
    from rocmseat.cli.root import cli

    return cli.main(args=args, prog_name="rocmseat", standalone_mode=False)


def _failed(args: list[str], exc: BaseException) -> int:
    """The one line (and exit code) of a command that raised."""
    import click  # the error lines are written as every command writes them

    if isinstance(exc, click.exceptions.Abort):
        click.echo("rocmseat: interrupted", err=True)
        return exitcodes.INTERRUPTED
    if isinstance(exc, click.UsageError):
        # One line, like every other error (click's own show() prints three).
        command = exc.ctx.command_path if exc.ctx is not None else "rocmseat"
        click.echo(f"rocmseat: error: {exc.format_message()}", err=True)
        click.echo(f"  hint: {command} --help", err=True)
        return exc.exit_code
    if isinstance(exc, click.ClickException):
        click.echo(f"rocmseat: error: {exc.format_message()}", err=True)
        return exc.exit_code
    if isinstance(exc, RocmseatError):
        _error_document(exc)
        click.echo(f"rocmseat: error: {exc.message}", err=True)
        if exc.hint:
            click.echo(f"  hint: {exc.hint}", err=True)
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        click.echo("rocmseat: interrupted", err=True)
        return exitcodes.INTERRUPTED
    if isinstance(exc, BrokenPipeError):
        # `rocmseat ... | head`: the reader left before the verdict was written. Exit as a shell
        # reports SIGPIPE (128 + 13), never 0: the result was not delivered. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return exitcodes.BROKEN_PIPE
    import traceback  # only on the way out of an internal error

    log = _write_crash_log(args, traceback.format_exc())
    where = f"traceback in {log}" if log else "traceback could not be written"
    click.echo(f"rocmseat: internal error: {type(exc).__name__}: {exc} ({where})", err=True)
    return exitcodes.INTERNAL


def _error_document(exc: RocmseatError) -> None:
    """--json always prints a JSON document: one that could not be made is `error` under the
    command's schema (docs/architecture.md, "JSON"), unless the error carries the document its
    command already printed (the gate's partial gate.json)."""
    from rocmseat.cli.options import JSON_WANTED, error_document

    command = JSON_WANTED.get()
    if command is None or getattr(exc, "document", None) is not None:
        return
    doc = error_document(command, exc.message, exc.exit_code, exc.hint)
    if doc is not None:
        import click

        from rocmseat import jsonio

        click.echo(jsonio.dumps(doc))


def _write_crash_log(args: list[str], trace: str) -> Path | None:
    """Write the traceback where only this user can, never through a planted symlink.

    `$ROCMSEAT_ERROR_LOG` (appended to), else a new file `crash-<stamp>-<pid>.log` created
    exclusively in `<state dir>/errors/` (mode 0700, owned by us). A predictable name in a shared
    /tmp would let another user plant a symlink that we then follow (issue 11).
    """
    import datetime as dt

    from rocmseat.redact import redact_argv, redact_text

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    entry = (f"--- {stamp} rocmseat {__version__} argv={redact_argv(args)!r}\n"
             f"{redact_text(trace)}\n")
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    if env := os.environ.get(LOG_FILE_ENV):
        return _append_private(Path(env), entry, flags | os.O_APPEND)
    try:  # through the state dir's door: its dirs made never group- or other-writable
        from rocmseat.state import default_state_dir
        from rocmseat.statedir import CRASH_LOG, ERRORS_DIR, StateDir

        state = StateDir(default_state_dir())
        if not _private_dir(state.make_dir(ERRORS_DIR, mode=0o700)):
            return None
        return state.create_private(CRASH_LOG, entry.encode("utf-8", errors="replace"),
                                    name=f"crash-{stamp}-{os.getpid()}.log")
    except Exception:
        return None


def _private_dir(folder: Path) -> bool:
    """`folder` is a real directory we own, writable only by us."""
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _append_private(path: Path, entry: str, flags: int) -> Path | None:
    try:
        fd = os.open(path, flags, 0o600)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            return None
        os.write(fd, entry.encode("utf-8", errors="replace"))
        return path
    except OSError:
        return None
    finally:
        os.close(fd)


if __name__ == "__main__":
    main()
