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


# ----- the crash log: private, never through a planted symlink (issue 11) -------------------
@pytest.fixture
def state_dir_crash(monkeypatch, tmp_path):
    """No $ROCMSEAT_ERROR_LOG: the crash log goes to <state dir>/errors/."""
    import rocmseat.state

    monkeypatch.delenv("ROCMSEAT_ERROR_LOG", raising=False)
    state = tmp_path / "state"
    monkeypatch.setattr(rocmseat.state, "default_state_dir", lambda: state)
    return state


def test_crash_log_is_a_new_private_file_in_the_state_dir(rocmseat_cli, boom_command,
                                                          state_dir_crash):
    import stat

    result = rocmseat_cli("boom", "bug")
    assert result.exit_code == exitcodes.INTERNAL
    logs = list((state_dir_crash / "errors").iterdir())
    assert len(logs) == 1 and logs[0].name.startswith("crash-")
    assert str(logs[0]) in result.stderr
    assert stat.S_IMODE(logs[0].stat().st_mode) == 0o600
    assert stat.S_IMODE((state_dir_crash / "errors").stat().st_mode) == 0o700
    assert "ZeroDivisionError" in logs[0].read_text()


def test_crash_log_never_follows_a_planted_symlink(rocmseat_cli, boom_command, tmp_path,
                                                   monkeypatch):
    """Another user plants `errors -> /their/dir` (or the log path itself as a symlink):
    rocmseat writes nothing through it and still exits 3 with one line."""
    import rocmseat.state

    monkeypatch.delenv("ROCMSEAT_ERROR_LOG", raising=False)
    victim = tmp_path / "victim"
    victim.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    (state / "errors").symlink_to(victim)
    monkeypatch.setattr(rocmseat.state, "default_state_dir", lambda: state)
    result = rocmseat_cli("boom", "bug")
    assert result.exit_code == exitcodes.INTERNAL
    assert list(victim.iterdir()) == []
    assert "traceback could not be written" in result.stderr
    # The explicit log path planted as a symlink to a file of someone else's: not followed.
    target = tmp_path / "their-file"
    target.write_text("theirs\n")
    planted = tmp_path / "planted.log"
    planted.symlink_to(target)
    monkeypatch.setenv("ROCMSEAT_ERROR_LOG", str(planted))
    result = rocmseat_cli("boom", "bug")
    assert result.exit_code == exitcodes.INTERNAL
    assert target.read_text() == "theirs\n"


def test_crash_log_redacts_secrets_in_argv(tmp_path):
    path = main_mod._write_crash_log(["launch", "--api-key", "sk-secret-123",
                                      "--target", "http://u:pw@h:1/metrics"],
                                     "Traceback\nValueError: http://u:pw@h:1/metrics\n")
    assert path == tmp_path / "rocmseat-error.log"
    text = path.read_text()
    assert "sk-secret-123" not in text and "pw@" not in text
