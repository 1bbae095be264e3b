from __future__ import annotations

import click
import pytest

from rocmseat import exitcodes
from rocmseat.cli import main as main_mod
from rocmseat.errors import ConfigError, RocmseatError


@pytest.fixture
def boom_command(monkeypatch):
    @click.command()
    @click.argument("kind")
    def boom(kind: str) -> int:
        if kind == "config":
            raise ConfigError("seat.toml:3: key 'tp': must be 2", hint="set tp = 2")
        if kind == "problem":
            raise RocmseatError("refused")
        if kind == "bug":
            raise ZeroDivisionError("division by zero")
        return 0

    monkeypatch.setitem(main_mod.COMMANDS, "boom", "tests.cli.test_main:_BOOM")
    global _BOOM
    _BOOM = boom
    yield


_BOOM = None


def test_version(rocmseat_cli):
    result = rocmseat_cli("--version")
    assert result.exit_code == 0
    assert "rocmseat, version" in result.stdout


def test_usage_error_is_2(rocmseat_cli):
    result = rocmseat_cli("no-such-command")
    assert result.exit_code == exitcodes.CANNOT_CHECK
    assert result.stderr.splitlines() == [
        "rocmseat: error: No such command 'no-such-command'.",
        "  hint: rocmseat --help",
    ]


def test_config_error_one_line_with_hint(rocmseat_cli, boom_command):
    result = rocmseat_cli("boom", "config")
    assert result.exit_code == exitcodes.CANNOT_CHECK
    assert result.stderr.splitlines() == [
        "rocmseat: error: seat.toml:3: key 'tp': must be 2",
        "  hint: set tp = 2",
    ]


def test_problem_is_1(rocmseat_cli, boom_command):
    assert rocmseat_cli("boom", "problem").exit_code == exitcodes.PROBLEM


def test_bug_is_3_with_traceback_in_log(rocmseat_cli, boom_command, tmp_path):
    result = rocmseat_cli("boom", "bug")
    assert result.exit_code == exitcodes.INTERNAL
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("rocmseat: internal error: ZeroDivisionError: division by zero")
    log = (tmp_path / "rocmseat-error.log").read_text()
    assert "Traceback" in log and "ZeroDivisionError" in log
