"""The root command and the one error boundary every command runs inside.

Exit codes (DESIGN.md, node-problem-detector compatible): 0 ok, 1 a problem, 2 could not check or
a usage error, 3 an internal error (one line on stderr, the traceback in a log file), 130 ^C.
"""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.util
import os
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path

import click

from rocmseat import __version__, exitcodes
from rocmseat.errors import RocmseatError

# Commands are imported when used, so `rocmseat preflight` does not pay for pydantic, httpx or
# rich's import time (the preflight budget is well under a second, process start included).
COMMANDS: dict[str, str] = {
    "preflight": "rocmseat.cli.preflight:preflight",
    "key": "rocmseat.cli.key:key",
    "cache-audit": "rocmseat.cli.cache_audit:cache_audit",
    "launch": "rocmseat.cli.launch:launch",
    "systemd": "rocmseat.cli.systemd:systemd",
    "watch": "rocmseat.cli.watch:watch",
    "demo": "rocmseat.cli.demo:demo",
}

LOG_FILE_ENV = "ROCMSEAT_ERROR_LOG"


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if self._available(name))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        module = importlib.import_module(module_name)
        command = getattr(module, attr)
        assert isinstance(command, click.Command)
        return command

    @staticmethod
    def _available(name: str) -> bool:
        module_name = COMMANDS[name].split(":")[0]
        return importlib.util.find_spec(module_name) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rocmseat")
def cli() -> None:
    """Make the silent failures of vLLM seats on AMD ROCm nodes loud."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code (and exits with it when run)."""
    code = _run(list(argv) if argv is not None else sys.argv[1:])
    if argv is None:
        sys.exit(code)
    return code


def _run(args: list[str]) -> int:
    try:
        result = cli.main(args=args, prog_name="rocmseat", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("rocmseat: interrupted", err=True)
        return exitcodes.INTERRUPTED
    except click.UsageError as exc:
        # One line, like every other error (click's own show() prints three).
        command = exc.ctx.command_path if exc.ctx is not None else "rocmseat"
        click.echo(f"rocmseat: error: {exc.format_message()}", err=True)
        click.echo(f"  hint: {command} --help", err=True)
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"rocmseat: error: {exc.format_message()}", err=True)
        return exc.exit_code
    except RocmseatError as exc:
        click.echo(f"rocmseat: error: {exc.message}", err=True)
        if exc.hint:
            click.echo(f"  hint: {exc.hint}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        click.echo("rocmseat: interrupted", err=True)
        return exitcodes.INTERRUPTED
    except BrokenPipeError:
        # `rocmseat ... | head`: the reader left before the verdict was written. Exit as a shell
        # reports SIGPIPE (128 + 13), never 0: the result was not delivered. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return exitcodes.BROKEN_PIPE
    except Exception as exc:
        log = _write_crash_log(args, traceback.format_exc())
        where = f"traceback in {log}" if log else "traceback could not be written"
        click.echo(f"rocmseat: internal error: {type(exc).__name__}: {exc} ({where})", err=True)
        return exitcodes.INTERNAL
    if isinstance(result, int):
        return result
    return exitcodes.OK


def _write_crash_log(args: list[str], trace: str) -> Path | None:
    candidates = []
    if env := os.environ.get(LOG_FILE_ENV):
        candidates.append(Path(env))
    candidates.append(Path(tempfile.gettempdir()) / f"rocmseat-error-{os.getuid()}.log")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    entry = f"--- {stamp} rocmseat {__version__} argv={args!r}\n{trace}\n"
    for path in candidates:
        try:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(entry)
            return path
        except OSError:
            continue
    return None


if __name__ == "__main__":
    main()
