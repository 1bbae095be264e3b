"""The state dir's layout, and the one rule that guards the directories rocmseat writes in
(docs/architecture.md, "State").

`StateDir(root)` names every file and directory rocmseat keeps in a state dir (which root is
rocmseat.state.state_root's rule); `ReplicaDir` the files of one replica's dir. No other module
spells these names. The layout (unchanged since rocmseat.startup/v1):

    <root>/preflight/verdict.json                the node's cached preflight verdict
    <root>/preflight/error-readings.json         timestamped error counter readings
    <root>/watch/<replica key>.json              the watchdog's learned baselines (and, by
                                                 the same rule, canary-<seat>.<replica> and
                                                 spawn-<seat>.<replica>: the drafter canary's
                                                 and the slow-spawn history)
    <root>/errors/                               crash logs (mode 0700)
    <root>/seats/<seat>/<replica>/placement.json the placement launch ran with
    <root>/seats/<seat>/<replica>/startup.json   the latest startup report
    <root>/seats/<seat>/<replica>/history/       every startup report
    <root>/seats/<seat>/<replica>/preflight-sysfs.json  the unit's ExecStartPre= preflight
    <root>/remediation/<seat>/state.json         the remediation ladder's state
    <root>/remediation/<seat>/journal/           one record per remediation step
    (and the locks: `.lock`, `.launch.lock` in a replica's dir; `.lock`, `.action.lock`,
    `.judge.lock` in a seat's remediation dir)

`check_owned_dir` is the rule for a directory rocmseat renames, writes or prunes in: a cache
root, a replica's state dir and its history, the remediation dir. A foundation module: the
cache store, launch and watch's remediation all apply it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
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


PLACEMENT_FILE = "placement.json"  # a name messages use too ("its placement.json is not used")


@dataclass(frozen=True, slots=True)
class ReplicaDir:
    """One replica's state dir: `<state dir>/seats/<seat>/<replica>`."""

    path: Path

    @property
    def placement(self) -> Path:
        return self.path / PLACEMENT_FILE

    @property
    def startup(self) -> Path:
        return self.path / "startup.json"

    @property
    def history(self) -> Path:
        return self.path / "history"

    @property
    def preflight_sysfs(self) -> Path:
        return self.path / "preflight-sysfs.json"

    @property
    def report_lock(self) -> Path:
        """Held while a startup report and its history are written."""
        return self.path / ".lock"

    @property
    def launch_lock(self) -> Path:
        """Held by the one launch of this replica."""
        return self.path / ".launch.lock"


@dataclass(frozen=True, slots=True)
class StateDir:
    """Every file and directory rocmseat keeps under a state dir `root`."""

    root: Path

    @property
    def preflight(self) -> Path:
        return self.root / "preflight"

    @property
    def verdict(self) -> Path:
        return self.preflight / "verdict.json"

    @property
    def readings(self) -> Path:
        return self.preflight / "error-readings.json"

    @property
    def baselines(self) -> Path:
        return self.root / "watch"

    def baseline(self, file_name: str) -> Path:
        """A baseline's file; `file_name` is the replica key already made a safe file name
        (rocmseat.watch.baseline.baseline_path)."""
        return self.baselines / f"{file_name}.json"

    @property
    def errors(self) -> Path:
        return self.root / "errors"

    @property
    def seats(self) -> Path:
        return self.root / "seats"

    def seat(self, seat: str) -> Path:
        return self.seats / seat

    def replica(self, seat: str, replica: str) -> ReplicaDir:
        return ReplicaDir(self.seat(seat) / replica)

    @property
    def remediation_root(self) -> Path:
        return self.root / "remediation"

    def remediation(self, seat: str) -> Path:
        return self.remediation_root / seat

    def remediation_state(self, seat: str) -> Path:
        return self.remediation(seat) / "state.json"

    def remediation_journal(self, seat: str) -> Path:
        return self.remediation(seat) / "journal"

    def remediation_lock(self, seat: str) -> Path:
        return self.remediation(seat) / ".lock"

    def remediation_action_lock(self, seat: str) -> Path:
        """Held around each restart of a replica of the seat (the watcher's worker, reset's)."""
        return self.remediation(seat) / ".action.lock"

    def remediation_judge_lock(self, seat: str) -> Path:
        """Held for its life by the one watcher that judges the seat."""
        return self.remediation(seat) / ".judge.lock"
