"""The root command group: `rocmseat <command>`, each command imported when it is used.

Apart from rocmseat.cli.main (the error boundary) so that the boundary can answer the cached
NPD line (rocmseat.cli.npd_fast) without importing click at all (issue 32, "Speed: preflight's
start"); every other command line comes here.
"""

from __future__ import annotations

import importlib
import importlib.util

import click

from rocmseat import __version__
from rocmseat.cli import examples

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
    "spec": "rocmseat.cli.spec:spec",
    "slurm": "rocmseat.cli.slurm:slurm",
    "remediate": "rocmseat.cli.remediate:remediate",
}


class LazyGroup(click.Group):
    """A group whose commands are `COMMANDS` entries, each module imported on first use."""

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
        examples.attach(command, f"rocmseat {cmd_name}")
        return command

    @staticmethod
    def _available(name: str) -> bool:
        module_name = COMMANDS[name].split(":")[0]
        return importlib.util.find_spec(module_name) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=examples.epilog("rocmseat"))
@click.version_option(__version__, prog_name="rocmseat")
def cli() -> None:
    """Make the silent failures of vLLM seats on AMD ROCm nodes loud."""
