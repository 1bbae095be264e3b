"""`rocmseat preflight --format npd --cached` without click (issue 32, "Speed: preflight's start").

node-problem-detector runs the cached answer every few seconds on every node, and it reads one
file: click's import alone (its core, types, gettext, inspect) cost as much as the answer. So
the console entry (rocmseat.cli.main) first asks `answer(args)`: a command line made only of
what that path takes, each option in a form whose meaning is beyond doubt, is answered here by
the same call as rocmseat.cli.preflight's `_cached_npd` (rocmseat.fleet.npd.cached_line), printed
as click.echo prints it; anything else (help, another option, a value click would refuse or
convert otherwise, a second spelling of one option) returns None and goes to click, which
answers it as before. tests/cli/test_npd_fast.py holds both paths to the same bytes and exit
codes.

The options, as rocmseat.cli.preflight declares them: `--format npd` and `--cached` (both
required), `--sysfs-root DIR` / $ROCMSEAT_SYSFS_ROOT and `--state-dir DIR` /
$ROCMSEAT_STATE_DIR (click.Path(file_okay=False): an existing path that is a regular file or
unreadable is click's error, so it goes to click), `--profile FILE` (click.Path(dir_okay=False):
likewise a directory or an unreadable file), `--max-age SECONDS` (click.FloatRange(1, 7 days):
here only a plain decimal inside the range), `--only FAMILY` (repeatable, click.Choice: an exact
name) and `--strict`. click reads an empty environment variable as unset
(click.core.Parameter.resolve_envvar_value, click 8.x); so does this.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from collections.abc import Sequence
from pathlib import Path

# rocmseat.cli.preflight's --only choices (tests/cli/test_npd_fast.py compares them)
FAMILIES = frozenset({"pcie", "aer", "ras", "numa", "profile", "amdsmi", "hip", "events", "xgmi"})
MAX_AGE_RANGE_S = (1.0, 7 * 86400.0)  # click.FloatRange(min=1.0, max=7 * 86400.0)
_VALUED = ("--format", "--sysfs-root", "--state-dir", "--profile", "--max-age", "--only")
_FLAGS = ("--cached", "--strict")


def parse(args: Sequence[str]) -> dict[str, list[str]] | None:
    """`preflight` and its options -> each option's values in order; None when any token is
    not one this path takes in a form beyond doubt."""
    if not args or args[0] != "preflight":
        return None
    given: dict[str, list[str]] = {}
    rest = list(args[1:])
    while rest:
        token = rest.pop(0)
        name, eq, value = token.partition("=")
        if name in _FLAGS and not eq:
            given.setdefault(name, []).append("")
        elif name in _VALUED:
            if not eq:
                if not rest:
                    return None
                value = rest.pop(0)
            # a value that looks like an option, or none: click's business
            if not value or value.startswith("-"):
                return None
            given.setdefault(name, []).append(value)
        else:
            return None
    once = all(len(given.get(name, ())) <= 1 for name in (*_VALUED[:-1], *_FLAGS))
    if not once or given.get("--format") != ["npd"] or "--cached" not in given:
        return None
    return given


def _plain_decimal(text: str) -> bool:
    """`[0-9]{1,7}(.[0-9]{1,6})?`: a number float() and click read alike."""
    whole, dot, fraction = text.partition(".")
    digits = [whole, fraction] if dot else [whole]
    return all(part.isascii() and part.isdigit() and len(part) <= 7 for part in digits) and (
        len(fraction) <= 6)


class _ClickDecides(Exception):
    """A value click would refuse (its error message is click's to write)."""


def _path(value: str | None, *, want_dir: bool) -> Path | None:
    """click.Path's conversion of `value` (None: not given); _ClickDecides when click would
    refuse it (an existing path of the other kind, or one it cannot read)."""
    if value is None:
        return None
    try:
        info = os.stat(value)
    except OSError:
        return Path(value)
    except ValueError:  # a NUL in the path: whatever click makes of it, it is click's
        raise _ClickDecides(value) from None
    wrong_kind = stat.S_ISDIR(info.st_mode) if not want_dir else stat.S_ISREG(info.st_mode)
    if wrong_kind or not os.access(value, os.R_OK):
        raise _ClickDecides(value)
    return Path(value)


def answer(args: Sequence[str]) -> int | None:
    """The exit code after printing the cached NPD line, or None: the command line is click's."""
    given = parse(args)
    if given is None:  # every other command line pays for nothing more than parse()
        return None
    from rocmseat.preflight.verdict_doc import DEFAULT_MAX_AGE_S
    from rocmseat.state import STATE_ENV, state_root
    from rocmseat.sysfs.fs import SYSFS_ENV, default_sysfs_root

    only = given.get("--only", [])
    if not set(only) <= FAMILIES:
        return None
    max_age_s = DEFAULT_MAX_AGE_S
    if "--max-age" in given:
        (text,) = given["--max-age"]
        if not _plain_decimal(text):
            return None
        max_age_s = float(text)
        if not MAX_AGE_RANGE_S[0] <= max_age_s <= MAX_AGE_RANGE_S[1]:
            return None

    def one(name: str, env: str | None = None) -> str | None:
        values = given.get(name)
        if values:
            return values[0]
        return (os.environ.get(env) or None) if env else None

    try:
        sysfs_root = _path(one("--sysfs-root", SYSFS_ENV), want_dir=True)
        state_dir = _path(one("--state-dir", STATE_ENV), want_dir=True)
        profile = _path(one("--profile"), want_dir=False)
    except _ClickDecides:
        return None
    return _cached(
        sysfs_root if sysfs_root is not None else default_sysfs_root(),
        state_root(state_dir),
        profile=profile, families=set(only) or None, max_age_s=max_age_s,
        strict="--strict" in given,
    )


def _cached(sysfs_root: Path, state_dir: Path, *, profile: Path | None,
            families: set[str] | None, max_age_s: float, strict: bool) -> int:
    """rocmseat.cli.preflight._cached_npd, step for step, without click."""
    from rocmseat.errors import ConfigError
    from rocmseat.fleet.npd import cached_line, unusable_line
    from rocmseat.preflight.verdict_doc import ProfileId

    wanted: ProfileId | None = None
    if profile is not None:
        from rocmseat.preflight.profile import load_profile

        try:
            loaded = load_profile(profile)
        except ConfigError as exc:
            # NPD reads stdout only: the line says why (the error boundary puts it on stderr)
            _echo(unusable_line(exc.message)[0])
            raise
        wanted = ProfileId(loaded.name, loaded.sha256 or "")
    line, code = cached_line(
        state_dir, sysfs_root, families=families, max_age_s=max_age_s, now_unix_s=time.time(),
        strict=strict, profile=wanted,
    )
    _echo(line)
    return code


def _echo(line: str) -> None:
    """click.echo(line): for a line of printable ASCII (what rocmseat.fleet.npd.fit makes),
    the text, a newline and a flush, as click.utils.echo writes it (nothing to strip or
    re-encode); any other line through click.echo itself."""
    # what rocmseat.fleet.npd.fit makes of every line: printable ASCII (0x20-0x7e), nothing
    # click.echo would strip or encode otherwise
    if not (line.isascii() and line.isprintable()):
        import click

        click.echo(line)
        return
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
