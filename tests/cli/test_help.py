"""The command tree as a user meets it: `--json` always prints a document, every `--help` ends
with examples, and every flag in `--help` is in docs/ (and every flag in docs/ exists)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import click
import pytest

from rocmseat.cli.main import COMMANDS, cli
from rocmseat.cli.options import JSON_SCHEMAS
from tests.sysfs.conftest import SYSFS_FIXTURES


def walk() -> Iterator[tuple[str, click.Command]]:
    """(command path, command) of every command and group under `rocmseat`."""
    ctx = click.Context(cli, info_name="rocmseat")

    def visit(path: str, command: click.Command) -> Iterator[tuple[str, click.Command]]:
        yield path, command
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, name
                yield from visit(f"{path} {name}", sub)

    yield from visit("rocmseat", cli)


def _prints_json(command: click.Command) -> bool:
    for param in command.params:
        if "--json" in getattr(param, "opts", ()):
            return True
        if isinstance(param, click.Option) and isinstance(param.type, click.Choice) and \
                "--format" in param.opts and "json" in param.type.choices:
            return True
    return False


def test_every_command_with_json_has_its_schema():
    with_json = {path for path, command in walk() if _prints_json(command)}
    assert with_json == set(JSON_SCHEMAS)
    assert len(COMMANDS) == 9


@pytest.mark.parametrize(
    ("args", "schema"),
    [
        (["preflight", "--sysfs-root", str(SYSFS_FIXTURES / "no-amdgpu"), "--json"],
         "rocmseat.preflight/v1"),
        (["preflight", "--sysfs-root", str(SYSFS_FIXTURES / "no-amdgpu"), "--format", "json"],
         "rocmseat.preflight/v1"),
        (["key", "{missing}", "--json"], "rocmseat.key/v1"),
        (["cache-audit", "{missing}", "--json"], "rocmseat.cache-audit/v1"),
        (["launch", "{missing}", "--dry-run", "--json"], "rocmseat.launch-plan/v1"),
        (["watch", "{missing}", "--once", "--json"], "rocmseat.watch/v1"),
        (["spec", "advise", "{missing}", "--json"], "rocmseat.advise/v1"),
        (["spec", "gate", "{missing}", "{missing}", "--json"], "rocmseat.gate/v1"),
        (["demo", "models", "{dest}", "--python", "{missing}", "--json"],
         "rocmseat.demo-models/v1"),
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v[:2]),
)
def test_json_prints_a_document_when_the_command_could_not_check(rocmseat_cli, tmp_path, args,
                                                                 schema):
    """Issue 19: `--json` always prints a JSON document, with `schema` and `error` when it
    could not check (it printed nothing), the exit code unchanged."""
    argv = [a.format(missing=tmp_path / "missing.toml", dest=tmp_path / "models") for a in args]
    result = rocmseat_cli(*argv, "--state-dir", str(tmp_path / "s")) if argv[0] in (
        "preflight", "key", "cache-audit", "watch") else rocmseat_cli(*argv)
    assert result.exit_code in (1, 2)
    doc = json.loads(result.stdout)
    assert doc["schema"] == schema and doc["exit_code"] == result.exit_code
    assert result.stderr.startswith(f"rocmseat: error: {doc['error']}\n")


def test_a_usage_error_prints_no_document(rocmseat_cli):
    result = rocmseat_cli("key", "--json", "--no-such-flag")
    assert result.exit_code == 2 and result.stdout == ""
