"""The state dir: its layout, its documents, and the one door to them (docs/architecture.md,
"State").

`StateDir(root)` names every file and directory rocmseat keeps in a state dir (which root is
rocmseat.state.state_root's rule); `ReplicaDir` the files of one replica's dir. No other module
spells these names. The layout (unchanged since rocmseat.startup/v1):

    <root>/preflight/verdict.json                the node's cached preflight verdict
    <root>/preflight/error-readings.json         timestamped error counter readings
    <root>/preflight/boot-events.json            the kernel events seen this boot (so a wrap
                                                 of the printk ring forgets none)
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

The door: a document kept here is declared once, as a `Document` (its name under the state dir
from the templates below, its schema string, its strict parser, its size cap) beside its model
in the room that owns it, and `StateDir.read(doc, **parts)` / `StateDir.write(doc, value,
**parts)` / `StateDir.make_dir(name, **parts)` / `StateDir.lock(name, **parts)` (and
`StateDir.hold(name, **parts)`: a lock taken without waiting, kept for the process's life) /
`StateDir.names(name, suffix=, **parts)` / `StateDir.remove(name, **parts)` are the only ways any
module opens, parses, writes, makes, locks, lists or removes something here
(tests/test_statedir.py holds the rest of the package to that). Reads are sshd's StrictModes
(rocmseat.safeio.read_trusted_state up from the state dir: no link, owned by root or the reader,
writable by nobody else), capped, and parsed by the document's strict model: a bad file is one
line naming it and why. Writes stamp the schema, make their dirs through rocmseat.atomic.make_dirs
(never group- or other-writable, whatever the umask: the reader above would refuse them) and
go through rocmseat.atomic.write_into (temp file, fsync, rename; never through a link). A
listing is of a real directory, never through a link, its hidden names (temp files, locks) left
out; a removal unlinks only a regular file or a link itself, in a directory check_owned_dir
passes, opened without following a link (a prune never lands outside the dir it names).

This module imports no pydantic (the preflight and NPD fast paths use it): a document's parser
is any `(text, shown) -> value` function, the pydantic ones made by rocmseat.docmodel.strict.

`check_owned_dir` is the rule for a directory rocmseat renames, writes or prunes in: a cache
root, a replica's state dir and its history, the remediation dir. A foundation module: the
cache store, launch and watch's remediation all apply it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from rocmseat.errors import ConfigError, ReadError
from rocmseat.safeio import UntrustedState, check_write_dirs, read_trusted_state
from rocmseat.text import printable

# The writers (rocmseat.atomic, rocmseat.jsonio: fcntl, tempfile, json) are imported where they
# write: the fast readers (`preflight --format npd --cached`, `slurm health`) only read.


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


def _open_dir(path: Path) -> int:
    """A descriptor of the directory itself, never of what a link there points to."""
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def link_target(link: Path) -> str:
    """Where a link points, for a message (the target is anyone's text: shown escaped)."""
    try:
        return printable(os.readlink(link))
    except OSError:
        return "(unreadable)"


PLACEMENT_FILE = "placement.json"  # a name messages use too ("its placement.json is not used")

# --- the names of the documents, relative to the state dir ({part}s filled by StateDir.path) --
VERDICT = "preflight/verdict.json"
READINGS = "preflight/error-readings.json"
BOOT_EVENTS = "preflight/boot-events.json"
WATCH_DIR = "watch"
WATCH_FILE = "watch/{name}.json"  # a baseline, a canary's baselines, a slow-spawn history
SEATS_DIR = "seats"
SEAT_DIR = f"{SEATS_DIR}/{{seat}}"
REPLICA_DIR = f"{SEAT_DIR}/{{replica}}"
PLACEMENT = f"{REPLICA_DIR}/{PLACEMENT_FILE}"
_STARTUP_FILE, _HISTORY, _SYSFS_FILE = "startup.json", "history", "preflight-sysfs.json"
_REPORT_LOCK, _LAUNCH_LOCK = ".lock", ".launch.lock"
STARTUP = f"{REPLICA_DIR}/{_STARTUP_FILE}"
HISTORY_DIR = f"{REPLICA_DIR}/{_HISTORY}"
HISTORY_ENTRY = f"{HISTORY_DIR}/{{entry}}"
PREFLIGHT_SYSFS = f"{REPLICA_DIR}/{_SYSFS_FILE}"
ERRORS_DIR = "errors"  # crash logs, mode 0700 (rocmseat.cli.main)
CRASH_LOG = f"{ERRORS_DIR}/{{name}}"
# locks by name
REMEDIATION_ROOT = "remediation"
REMEDIATION_DIR = f"{REMEDIATION_ROOT}/{{seat}}"  # its dirs 0700 (rocmseat.watch.remediate)
REMEDIATION_STATE = f"{REMEDIATION_DIR}/state.json"
REMEDIATION_JOURNAL = f"{REMEDIATION_DIR}/journal"
JOURNAL_RECORD = f"{REMEDIATION_JOURNAL}/{{entry}}"  # one file per step, never appended to
# locks by name
READINGS_LOCK = "preflight/error-readings.lock"
BOOT_EVENTS_LOCK = "preflight/boot-events.lock"
REPORT_LOCK = f"{REPLICA_DIR}/{_REPORT_LOCK}"
LAUNCH_LOCK = f"{REPLICA_DIR}/{_LAUNCH_LOCK}"
REMEDIATION_LOCK = f"{REMEDIATION_DIR}/.lock"
ACTION_LOCK = f"{REMEDIATION_DIR}/.action.lock"
JUDGE_LOCK = f"{REMEDIATION_DIR}/.judge.lock"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Document(Generic[T]):
    """One document kept in a state dir, declared once beside its model: `name` (one of the
    templates above), `schema` (stamped by StateDir.write), `parse` ((text, the file as shown)
    -> the document: a strict model's, raising one located line, rocmseat.located
    .DocumentInvalid, or the document's own one-line error), the size cap, the file mode, the
    JSON indent (None: one line, for a large file rewritten often)."""

    name: str
    schema: str
    parse: Callable[[str, str], T]
    limit_bytes: int = 1 << 20
    mode: int = 0o644
    indent: int | None = 2


def _part(key: str, value: str) -> str:
    """A value filled into a name: one path component (no way out of its directory)."""
    if not value or "/" in value or "\0" in value or value in (".", ".."):
        raise ConfigError(f"{printable(value, 200)!r} is not a state file name ({key})")
    return value


@dataclass(frozen=True, slots=True)
class ReplicaDir:
    """One replica's state dir: `<state dir>/seats/<seat>/<replica>`."""

    path: Path

    @property
    def placement(self) -> Path:
        return self.path / PLACEMENT_FILE

    @property
    def startup(self) -> Path:
        return self.path / _STARTUP_FILE

    @property
    def history(self) -> Path:
        return self.path / _HISTORY

    @property
    def preflight_sysfs(self) -> Path:
        return self.path / _SYSFS_FILE

    @property
    def report_lock(self) -> Path:
        """Held while a startup report and its history are written."""
        return self.path / _REPORT_LOCK

    @property
    def launch_lock(self) -> Path:
        """Held by the one launch of this replica."""
        return self.path / _LAUNCH_LOCK


@dataclass(frozen=True, slots=True)
class StateDir:
    """Every file and directory rocmseat keeps under a state dir `root`, and the door to them."""

    root: Path

    @classmethod
    def above(cls, replica_dir: Path) -> StateDir:
        """The state dir a replica's dir (`<root>/seats/<seat>/<replica>`) lies in."""
        return cls(replica_dir.parents[REPLICA_DIR.count("/")])

    # --- the door -----------------------------------------------------------------------
    def path(self, template: str | Document[Any], /, **parts: str) -> Path:
        """The path of a name template (or a document's), its parts filled in."""
        name = template.name if isinstance(template, Document) else template
        return self.root / name.format(**{k: _part(k, v) for k, v in parts.items()})

    def read(self, doc: Document[T], /, **parts: str) -> T | None:
        """The document, or None when there is no file. ReadError when it cannot be read or
        is not trusted (UntrustedState: a link, another user's, writable by group or others,
        anything up from the state dir), else whatever the document's parser raises for a
        bad one (one line naming the file and why)."""
        path = self.path(doc, **parts)
        try:
            text = read_trusted_state(path, trusted_root=self.root, limit_bytes=doc.limit_bytes)
        except OSError as exc:  # a state dir that is a file (ENOTDIR) ...
            raise ReadError(path, exc.strerror or type(exc).__name__) from None
        return None if text is None else doc.parse(text, str(path))

    def write(self, doc: Document[Any], value: Mapping[str, Any], /, **parts: str) -> Path:
        """Write `value` as the document, its schema first; the dirs made on the way are
        never group- or other-writable; atomic. WriteRefused (or UntrustedState for a link on
        the way) naming the file otherwise."""
        from rocmseat import jsonio
        from rocmseat.atomic import write_into

        path = self.path(doc, **parts)
        body = {"schema": doc.schema, **{k: v for k, v in value.items() if k != "schema"}}
        self._make(path.parent, path)
        data = (jsonio.dumps(body, indent=doc.indent) + "\n").encode()
        return write_into(path.parent, path.name, data, mode=doc.mode)

    def make_dir(self, template: str, /, *, mode: int | None = None, **parts: str) -> Path:
        """Make a directory of the layout (and those above it) the way writes make them;
        `mode`: the directory itself gets it when it is ours (0700: only we may enter)."""
        path = self.path(template, **parts)
        self._make(path, path / ".")
        if mode is not None:
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid():
                os.chmod(path, mode)
        return path

    def create_private(self, template: str, data: bytes, /, **parts: str) -> Path:
        """A new file of this user only (mode 0600), made exclusively: never an existing one,
        never through a link (a crash log). WriteRefused naming it otherwise."""
        from rocmseat.atomic import WriteRefused

        path = self.path(template, **parts)
        self._make(path.parent, path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            raise WriteRefused(path, exc.strerror or type(exc).__name__) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                raise WriteRefused(path, "not a regular file of this user")
            os.write(fd, data)
        except OSError as exc:
            raise WriteRefused(path, exc.strerror or type(exc).__name__) from None
        finally:
            os.close(fd)
        return path

    def names(self, template: str, /, *, suffix: str = "", **parts: str) -> list[str] | None:
        """The names in a directory of the layout, sorted, the hidden ones (a leading `.`: temp
        files, locks, a probe) left out, only those ending in `suffix`: None when no directory
        stands there (nothing, or a file). Never through a link: one at the directory or on
        the way to it is UntrustedState (an entry is then read or removed through the door,
        which checks it again); OSError when the OS refuses the listing (the caller names it)."""
        path = self.path(template, **parts)
        check_write_dirs(path, trusted_root=self.root)  # no link on the way (UntrustedState)
        try:
            fd = _open_dir(path)
        except FileNotFoundError:
            return None
        except NotADirectoryError:  # a file, or (O_NOFOLLOW with O_DIRECTORY) a link
            if os.path.islink(path):
                raise UntrustedState(path, "is a symlink; state is never listed through a link",
                                     hint=f"move {path} away; rocmseat makes its own") from None
            return None
        try:
            entries = os.listdir(fd)
        finally:
            os.close(fd)
        return sorted(n for n in entries if not n.startswith(".") and n.endswith(suffix))

    def remove(self, template: str | Document[Any], /, **parts: str) -> bool:
        """Unlink the file of that name (a pruned entry, a probe): a regular file, or a link
        itself, never what it points to; anything else standing there (a directory, a FIFO) is
        left alone. Never through a link on the way (UntrustedState), never in a directory
        `check_owned_dir` refuses (ConfigError), and the name is unlinked in its directory
        opened without following a link, so it never lands outside it. True when a file went,
        False when none stood there; OSError when the OS refuses (the caller names it)."""
        path = self.path(template, **parts)
        check_write_dirs(path, trusted_root=self.root)
        check_owned_dir(path.parent, what="state dir")
        try:
            fd = _open_dir(path.parent)
        except FileNotFoundError:
            return False
        try:
            # lstat before unlink: only a regular file or a link (a link is unlinked itself)
            mode = os.lstat(path.name, dir_fd=fd).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                return False
            os.unlink(path.name, dir_fd=fd)
        except FileNotFoundError:  # removed meanwhile (another start, another watcher)
            return False
        finally:
            os.close(fd)
        return True

    @contextlib.contextmanager
    def lock(self, template: str, /, *, timeout_s: float | None = None,
             **parts: str) -> Iterator[None]:
        """Hold the lock of that name (rocmseat.atomic.exclusive_lock; its dir made here)."""
        from rocmseat.atomic import exclusive_lock

        path = self.path(template, **parts)
        self._make(path.parent, path)
        with exclusive_lock(path, timeout_s=timeout_s):
            yield

    def hold(self, template: str, /, **parts: str) -> int | None:
        """Take the lock of that name without waiting, for the life of the process (the kernel
        drops it when the process dies): its descriptor, or None when another process holds
        it. Never through a link (O_NOFOLLOW); O_NONBLOCK: a FIFO planted at the name does not
        hang the open. OSError when the OS refuses the open (the caller names the file);
        WriteRefused when what stands there is not a regular file (a FIFO, a device)."""
        import fcntl

        from rocmseat.atomic import WriteRefused

        path = self.path(template, **parts)
        self._make(path.parent, path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     0o600)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise WriteRefused(path, "not a lock file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def _make(self, directory: Path, below: Path) -> None:
        from rocmseat.atomic import WriteRefused, make_dirs

        check_write_dirs(below, trusted_root=self.root)  # no link on the way (UntrustedState)
        try:
            make_dirs(directory)
        except OSError as exc:
            raise WriteRefused(below, f"cannot make {printable(str(directory))}: "
                               f"{exc.strerror or type(exc).__name__}") from None

    # --- the layout ---------------------------------------------------------------------

    @property
    def preflight(self) -> Path:
        return self.root / "preflight"

    @property
    def verdict(self) -> Path:
        return self.path(VERDICT)

    @property
    def readings(self) -> Path:
        return self.path(READINGS)

    @property
    def baselines(self) -> Path:
        return self.path(WATCH_DIR)

    def baseline(self, file_name: str) -> Path:
        """A baseline's file; `file_name` is the replica key already made a safe file name
        (rocmseat.watch.baseline.baseline_path)."""
        return self.path(WATCH_FILE, name=file_name)

    @property
    def errors(self) -> Path:
        return self.path(ERRORS_DIR)

    @property
    def seats(self) -> Path:
        return self.path(SEATS_DIR)

    def seat(self, seat: str) -> Path:
        return self.path(SEAT_DIR, seat=seat)

    def replica(self, seat: str, replica: str) -> ReplicaDir:
        return ReplicaDir(self.path(REPLICA_DIR, seat=seat, replica=replica))

    @property
    def remediation_root(self) -> Path:
        return self.path(REMEDIATION_ROOT)

    def remediation(self, seat: str) -> Path:
        return self.path(REMEDIATION_DIR, seat=seat)

    def remediation_state(self, seat: str) -> Path:
        return self.path(REMEDIATION_STATE, seat=seat)

    def remediation_journal(self, seat: str) -> Path:
        return self.path(REMEDIATION_JOURNAL, seat=seat)

    def remediation_lock(self, seat: str) -> Path:
        return self.path(REMEDIATION_LOCK, seat=seat)

    def remediation_action_lock(self, seat: str) -> Path:
        """Held around each restart of a replica of the seat (the watcher's worker, reset's)."""
        return self.path(ACTION_LOCK, seat=seat)

    def remediation_judge_lock(self, seat: str) -> Path:
        """Held for its life by the one watcher that judges the seat."""
        return self.path(JUDGE_LOCK, seat=seat)
