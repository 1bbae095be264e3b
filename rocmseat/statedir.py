"""The directories rocmseat writes in, and the one rule that guards them (docs/architecture.md,
"State").

`check_owned_dir` is the rule for a directory rocmseat renames, writes or prunes in: a cache
root, a replica's state dir and its history, the remediation dir. A foundation module: the
cache store, launch and watch's remediation all apply it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from rocmseat.errors import ConfigError
from rocmseat.text import printable


def check_owned_dir(path: Path, *, what: str, owner_uid: int | None = None,
                    link_hint: str | None = None) -> None:
    """The one rule for a directory rocmseat renames, writes or prunes in (a cache root, a
    replica's state dir and its history): not a symlink, owned by the user who runs the
    replica, not writable by every user (another user could plant a link in it between two
    steps). ConfigError naming it otherwise; an absent path passes (it is made later)."""
    expected = os.geteuid() if owner_uid is None else owner_uid
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return
    if stat.S_ISLNK(info.st_mode):
        raise ConfigError(
            f"{what} {path} is a symlink to {link_target(path)}: refusing to write, move or remove "
            "files through a link",
            hint=link_hint or f"remove the link ({path}) and look at who planted it",
        )
    if info.st_uid != expected:
        raise ConfigError(
            f"{what} {path} is owned by uid {info.st_uid}, not by uid {expected} who runs "
            "the replica",
            hint=f"chown it, or choose a directory of uid {expected}",
        )
    if info.st_mode & stat.S_IWOTH:
        raise ConfigError(
            f"{what} {path} is writable by every user (mode {stat.S_IMODE(info.st_mode):04o}):"
            " another user could plant a link where rocmseat renames and writes",
            hint=f"chmod o-w {path}",
        )


def link_target(link: Path) -> str:
    """Where a link points, for a message (the target is anyone's text: shown escaped)."""
    try:
        return printable(os.readlink(link))
    except OSError:
        return "(unreadable)"
