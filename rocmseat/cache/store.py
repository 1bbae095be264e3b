"""The cache store: one directory per replica, keyed by a manifest; a mismatch is moved aside.

Layout under the seat's cache root:
    <root>/<replica>/                      the live cache (every compiler cache + manifest)
    <root>/<replica>.stale-<UTC stamp>[-N]  moved aside: evidence and rollback, never deleted here
    <root>/.<replica>.lock                 flock serialising prepare() and prune
    <root>/.<replica>.intent.json          the move in progress (crash recovery, reporting)
    <root>/.<replica>.new/                 the fresh directory being built

Crash safety: every step is a rename or an atomic write, in an order where each intermediate
state is recognisable: the live name only ever appears by renaming a complete fresh directory
(manifest inside) onto it, and the intent records the planned move before the first rename.
A kill -9 anywhere leaves either the old cache at the live name (the move is redone), or the old
cache at its stale name (the fresh directory is finished), or both done (the intent is dropped).
A kill inside an atomic write leaves its temp file (`..<replica>.intent.json.<random>.tmp`,
`.rocmseat-manifest.json.<random>.tmp`): the next prepare removes those, under the lock.

Never through a link we did not make: the names above are ours, so a symlink at any of them (or
at a compiler-cache subfolder) was planted, and prepare refuses before it touches anything; so
does a cache root that others may write to (they could plant one between two steps).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmseat import __version__
from rocmseat.atomic import atomic_write_json, exclusive_lock
from rocmseat.cache.key import MISSING, ConfigKey, FactorChange, diff_factors
from rocmseat.cache.layout import MANIFEST_NAME, STALE_NAME, cache_env
from rocmseat.cache.manifest_doc import INTENT_SCHEMA, MANIFEST_SCHEMA, IntentDoc, ManifestDoc
from rocmseat.docmodel import load_json_doc
from rocmseat.errors import ConfigError, ReadError
from rocmseat.located import DocumentInvalid
from rocmseat.safeio import read_regular_text
from rocmseat.seat.envclass import CACHE_ENV_SUBDIRS
from rocmseat.seat.model import is_replica_name
from rocmseat.statedir import check_owned_dir, link_target

log = logging.getLogger("rocmseat.cache")
# A library logger gets a handler of its own: with none anywhere, Python's last-resort handler
# printed every warning on stderr, and launch also says the line itself (printed twice).
# Whoever configures logging still receives the records through propagation.
log.addHandler(logging.NullHandler())

# Manifests and intents are a few KiB; never read a FIFO or /dev/zero planted at their name.
STATE_FILE_LIMIT_BYTES = 1 << 20

STAMP_FORMAT = "%Y%m%dT%H%M%SZ"

CrashHook = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class PrepareResult:
    replica_dir: Path
    state_before: str  # "current" | "stale" | "unkeyed" | "absent"
    moved_aside: Path | None
    changed: tuple[FactorChange, ...]
    env: dict[str, str]  # the cache environment variables of the replica
    message: str  # the one line that was logged

    @property
    def reused(self) -> bool:
        return self.state_before == "current"


def read_manifest(replica_dir: Path) -> dict[str, Any] | None:
    """The manifest of a cache dir, or None when absent or not a valid manifest (also when it is
    not a regular file or is larger than STATE_FILE_LIMIT_BYTES)."""
    try:
        doc = read_manifest_doc(replica_dir)
    except (ReadError, ConfigError):  # unreadable, or DocumentInvalid: unkeyed
        return None
    return doc.as_dict() if doc is not None else None


def read_manifest_doc(replica_dir: Path) -> ManifestDoc | None:
    """The manifest of a cache dir (None: there is none); ReadError when it cannot be read,
    DocumentInvalid (one line naming the file and the key) when it is not a manifest."""
    path = replica_dir / MANIFEST_NAME
    if not os.path.lexists(path):
        return None
    text = read_regular_text(path, limit_bytes=STATE_FILE_LIMIT_BYTES)
    return load_json_doc(ManifestDoc, text, str(path))


def check_root(root: Path, *, owner_uid: int | None = None) -> None:
    """Refuse a cache root that is a symlink, belongs to another user or that every user may
    write to (ConfigError)."""
    check_owned_dir(root, what="cache root", owner_uid=owner_uid,
                    link_hint="set cache_root to the real directory")


@dataclass(frozen=True, slots=True)
class _Job:
    """One prepare() call: the paths it touches and what it writes."""

    root: Path
    replica: str
    key: ConfigKey
    seat_name: str
    now: dt.datetime | None
    hook: CrashHook
    owner_uid: int
    # the engine's cache variables -> subfolders (rocmseat.engines: Engine.cache_subdirs)
    subdirs: Mapping[str, str] = field(default_factory=lambda: CACHE_ENV_SUBDIRS)

    @property
    def live(self) -> Path:
        return self.root / self.replica

    @property
    def fresh(self) -> Path:
        return self.root / f".{self.replica}.new"

    @property
    def intent(self) -> Path:
        return self.root / f".{self.replica}.intent.json"


def prepare(
    cache_dir: Path,
    key: ConfigKey,
    *,
    seat_name: str = "",
    now: dt.datetime | None = None,
    lock_timeout_s: float = 600.0,
    owner_uid: int | None = None,
    crash_hook: CrashHook | None = None,
    subdirs: Mapping[str, str] = CACHE_ENV_SUBDIRS,
) -> PrepareResult:
    """Make `cache_dir` a cache keyed by `key`, moving any other one aside.

    `cache_dir` is the replica's live cache as its placement record says
    (`ReplicaPlacement.cache_dir`, `<cache_root>/<replica>`: rocmseat.placement decides it,
    not this module); the store's other names (lock, intent, fresh and moved-aside dirs) sit
    beside it in its parent, the cache root.
    """
    cache_root, replica = cache_dir.parent, cache_dir.name
    if not is_replica_name(replica) or cache_root == cache_dir:
        raise ConfigError(f"{cache_dir}: not a replica's cache dir (<cache_root>/<replica>)")
    uid = os.geteuid() if owner_uid is None else owner_uid
    job = _Job(cache_root, replica, key, seat_name, now, crash_hook or (lambda step: None), uid,
               subdirs)
    check_root(cache_root, owner_uid=owner_uid)
    cache_root.mkdir(parents=True, exist_ok=True)
    check_root(cache_root, owner_uid=owner_uid)
    live = job.live
    refuse_link(lock_path(cache_root, replica))  # flock's open(O_CREAT) would follow it
    with exclusive_lock(lock_path(cache_root, replica), timeout_s=lock_timeout_s):
        job.hook("locked")
        _check_names(job)
        _remove_temporaries(job)
        recovered = _recover(job)
        if recovered is not None:
            return recovered
        manifest = read_manifest(live) if live.is_dir() else None
        if manifest is not None and manifest["key"] == key.digest:
            _ensure_subdirs(live, job.subdirs)
            message = f"{replica}: cache {live} is current (key {key.short})"
            log.info(message)
            return PrepareResult(live, "current", None, (), cache_env(live, job.subdirs), message)
        if not live.exists():
            _build_fresh(job)
            os.rename(job.fresh, live)
            job.hook("published")
            message = f"{replica}: new cache {live} (key {key.short})"
            log.info(message)
            return PrepareResult(live, "absent", None, (), cache_env(live, job.subdirs), message)
        state = "stale" if manifest is not None else "unkeyed"
        changed = diff_factors(manifest["factors"], key.factors) if manifest is not None else []
        aside = _stale_name(cache_root, replica, now)
        atomic_write_json(job.intent, {
            "schema": INTENT_SCHEMA,
            "action": "move-aside",
            "state_before": state,
            "moved_to": aside.name,
            "new_key": key.digest,
            "changed": [
                [c.factor, _jsonable(c.old), _jsonable(c.new), c.describe()] for c in changed
            ],
        })
        job.hook("intent-written")
        return _finish_move(job)


MOVED_ASIDE_NAME = "rocmseat-moved-aside.json"  # why a cache was moved aside without a key change


def move_aside(
    cache_dir: Path,
    *,
    reason: dict[str, Any],
    now: dt.datetime | None = None,
    lock_timeout_s: float = 600.0,
    owner_uid: int | None = None,
) -> Path | None:
    """Move a replica's live cache aside by rename although its key still matches (the
    remediation of a suspected stale compile cache, docs/remediate.md), under the store's lock;
    `reason` is written into the moved directory (`rocmseat-moved-aside.json`). Returns where it
    went, or None when there is no live cache. Nothing is deleted; the next prepare() builds a
    fresh cache at the live name ("absent")."""
    cache_root, replica = cache_dir.parent, cache_dir.name
    if not is_replica_name(replica) or cache_root == cache_dir:
        raise ConfigError(f"{cache_dir}: not a replica's cache dir (<cache_root>/<replica>)")
    uid = os.geteuid() if owner_uid is None else owner_uid
    check_root(cache_root, owner_uid=uid)
    refuse_link(lock_path(cache_root, replica))
    with exclusive_lock(lock_path(cache_root, replica), timeout_s=lock_timeout_s):
        refuse_link(cache_dir)
        if (cache_root / f".{replica}.intent.json").exists():
            raise ConfigError(f"{cache_dir}: a move aside is in progress (its intent file is "
                              "there): the next launch finishes it")
        if not cache_dir.is_dir():
            return None
        aside = _stale_name(cache_root, replica, now)
        os.rename(cache_dir, aside)
        atomic_write_json(aside / MOVED_ASIDE_NAME, reason)
    log.warning("%s: moved cache aside to %s (%s)", replica, aside, reason.get("why", "-"))
    return aside


def lock_path(cache_root: Path, replica: str) -> Path:
    return cache_root / f".{replica}.lock"


def _check_names(job: _Job) -> None:
    """Our names in the root are ours: refuse a planted link or a foreign file before any step.

    None of them may be a link; the fresh dir must be a directory of ours, the intent a regular
    file of ours (a live name that is not a directory is moved aside like an unkeyed cache).
    Checked under the lock, in a root of ours that no one else may write to (check_root), so
    nothing can swap them between this check and the steps.
    """
    for path, kind in ((job.live, "any"), (job.fresh, "dir"), (job.intent, "file")):
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(info.st_mode):
            raise ConfigError(
                f"{path} is a symlink to {link_target(path)}: rocmseat makes no links in a cache "
                "root and never follows one",
                hint=f"remove the link ({path}) and look at who planted it",
            )
        if kind == "any":
            continue
        wanted = stat.S_ISDIR if kind == "dir" else stat.S_ISREG
        if not wanted(info.st_mode) or info.st_uid != job.owner_uid:
            what = "a directory" if kind == "dir" else "a regular file"
            raise ConfigError(
                f"{path} is not {what} of uid {job.owner_uid}: it is not one rocmseat made",
                hint=f"move it away ({path})",
            )


def refuse_link(path: Path) -> None:
    """ConfigError when `path`, a name of the store, is a symlink (it was planted)."""
    if path.is_symlink():
        raise ConfigError(
            f"{path} is a symlink to {link_target(path)}: rocmseat makes no links in a cache "
            "root and never follows one",
            hint=f"remove the link ({path}) and look at who planted it",
        )


def _remove_temporaries(job: _Job) -> None:
    """Temp files of atomic writes a kill -9 interrupted (rocmseat.atomic names them
    `.<name>.<random>.tmp` beside the file): the intent's in the root, the manifest's in the
    fresh dir. Regular files of ours only; unlink never follows a link."""
    intent_tmp = re.compile(rf"\.{re.escape(job.intent.name)}\.[A-Za-z0-9_]+\.tmp")
    manifest_tmp = re.compile(rf"\.{re.escape(MANIFEST_NAME)}\.[A-Za-z0-9_]+\.tmp")
    for folder, pattern in ((job.root, intent_tmp), (job.fresh, manifest_tmp)):
        try:
            names = [n for n in os.listdir(folder) if pattern.fullmatch(n)]
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            path = folder / name
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode) or (
                stat.S_ISREG(info.st_mode) and info.st_uid == job.owner_uid
            ):
                os.unlink(path)


def _read_intent(job: _Job) -> IntentDoc:
    """The intent as its strict model (only a regular file is read); ConfigError when it cannot
    be read, DocumentInvalid (one line naming the file and the key) when it is not an intent."""
    try:
        text = read_regular_text(job.intent, limit_bytes=STATE_FILE_LIMIT_BYTES)
    except ReadError as exc:
        raise ConfigError(f"{exc.message} (the move aside in progress: not finished)",
                          hint=f"look at it, then remove it ({job.intent})") from None
    return load_json_doc(IntentDoc, text, str(job.intent))


def _finish_move(job: _Job) -> PrepareResult:
    """Complete the move recorded in the intent, from whatever step it stopped at."""
    intent = _read_intent(job)
    aside = job.root / intent.moved_to
    live = job.live
    live_manifest = read_manifest(live) if live.is_dir() else None
    live_is_new = live_manifest is not None and live_manifest["key"] == job.key.digest
    if live.exists() and not aside.exists() and not live_is_new:
        os.rename(live, aside)
        job.hook("moved")
    if intent.state_before == "unkeyed":
        why = "it had no manifest (unknown provenance)"
    else:
        texts = [str(entry[3]) for entry in intent.changed]
        why = "changed: " + ("; ".join(texts) or "(no factor differs: key schema)")
    if not live.exists():
        _build_fresh(job, replaced={"moved_to": aside.name, "why": why})
        os.rename(job.fresh, live)
        job.hook("published")
    os.unlink(job.intent)
    job.hook("intent-removed")
    changed = tuple(FactorChange(str(f), old, new) for f, old, new, _ in intent.changed)
    message = f"{job.replica}: moved cache aside to {aside} because {why}"
    log.warning(message)
    return PrepareResult(live, intent.state_before, aside, changed,
                         cache_env(live, job.subdirs), message)


def _recover(job: _Job) -> PrepareResult | None:
    """Finish a move an earlier run was killed in the middle of (None: nothing to finish)."""
    if not job.intent.exists():
        return None
    try:
        intent = _read_intent(job)
        if not _valid_intent(intent, job.replica):
            raise DocumentInvalid(str(job.intent), ("moved_to",),
                                  f"not a moved-aside name of replica {job.replica}")
    except DocumentInvalid as exc:
        # Not an intent this module wrote: named, then dropped like one towards another key
        # (the live cache, if any, is judged afresh; a cache at a stale name stays there).
        log.warning("%s: dropped, the cache is judged afresh", exc.message)
        os.unlink(job.intent)
        return None
    if intent.new_key != job.key.digest:
        # An interrupted move towards another key: the old cache is either still live (it will
        # be judged afresh) or already at its stale name (kept); only the plan is dropped.
        os.unlink(job.intent)
        return None
    return _finish_move(job)


def _valid_intent(intent: IntentDoc, replica: str) -> bool:
    """A moved-aside name of this replica (never another replica's live name)."""
    stale = STALE_NAME.fullmatch(intent.moved_to)
    return stale is not None and stale.group("replica") == replica


def _build_fresh(job: _Job, replaced: dict[str, str] | None = None) -> None:
    """A complete fresh cache dir at a private name (idempotent: a half-built one is reused).

    `replaced`: the cache this one replaces ({"moved_to": name, "why": text}), kept in the
    manifest so cache-audit can say why each moved-aside dir was moved.
    """
    fresh = job.fresh
    fresh.mkdir(exist_ok=True)  # _check_names refused anything at this name but our own dir
    job.hook("fresh-created")
    _ensure_subdirs(fresh, job.subdirs)
    created = (job.now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    atomic_write_json(fresh / MANIFEST_NAME, {
        "schema": MANIFEST_SCHEMA,
        "key": job.key.digest,
        "factors": job.key.factors,
        "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "rocmseat_version": __version__,
        "seat": job.seat_name,
        "replica": job.replica,
        **({"replaced": replaced} if replaced is not None else {}),
    })
    job.hook("manifest-written")


def _ensure_subdirs(replica_dir: Path, subdirs: Mapping[str, str]) -> None:
    """Every compiler-cache subfolder, as a real directory: one that is a link would put that
    cache outside the store, where a move aside never reaches it (ConfigError)."""
    for sub in subdirs.values():
        path = replica_dir
        for part in Path(sub).parts:
            path = path / part
            if path.is_symlink():
                raise ConfigError(
                    f"{path} is a symlink to {link_target(path)}: a compiler cache must live "
                    "inside the cache store, where a move aside takes it along",
                    hint=f"remove the link ({path}); rocmseat recreates the folder",
                )
            path.mkdir(exist_ok=True)


def _stale_name(root: Path, replica: str, now: dt.datetime | None) -> Path:
    stamp = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC).strftime(STAMP_FORMAT)
    candidate = root / f"{replica}.stale-{stamp}"
    suffix = 1
    while candidate.exists() or candidate.is_symlink():
        candidate = root / f"{replica}.stale-{stamp}-{suffix}"
        suffix += 1
    return candidate


def _jsonable(value: Any) -> Any:
    """Factor values are JSON already; an absent one (MISSING) is recorded as null."""
    return None if value is MISSING else value
