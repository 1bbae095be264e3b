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
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat import __version__
from rocmseat.atomic import atomic_write_json, exclusive_lock
from rocmseat.cache.key import MISSING, ConfigKey, FactorChange, diff_factors
from rocmseat.cache.layout import CACHE_ENV_SUBDIRS, MANIFEST_NAME, cache_env
from rocmseat.errors import ConfigError

log = logging.getLogger("rocmseat.cache")

MANIFEST_SCHEMA = "rocmseat.cache-manifest/v1"
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
    """The manifest of a cache dir, or None when absent or not a valid manifest."""
    try:
        data = json.loads((replica_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("key"), str):
        return None
    if not isinstance(data.get("factors"), dict):
        return None
    return data


def check_root(root: Path, *, owner_uid: int | None = None) -> None:
    """Refuse a cache root that is a symlink or belongs to another user (ConfigError)."""
    expected = os.geteuid() if owner_uid is None else owner_uid
    if root.is_symlink():
        raise ConfigError(
            f"cache root {root} is a symlink to {os.readlink(root)}: refusing to move caches "
            "through a link",
            hint="set cache_root to the real directory",
        )
    try:
        info = root.stat()
    except FileNotFoundError:
        return
    if info.st_uid != expected:
        raise ConfigError(
            f"cache root {root} is owned by uid {info.st_uid}, not by uid {expected} who runs "
            "the replica",
            hint=f"chown it, or choose a cache_root of uid {expected}",
        )


@dataclass(frozen=True, slots=True)
class _Job:
    """One prepare() call: the paths it touches and what it writes."""

    root: Path
    replica: str
    key: ConfigKey
    seat_name: str
    now: dt.datetime | None
    hook: CrashHook

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
    cache_root: Path,
    replica: str,
    key: ConfigKey,
    *,
    seat_name: str = "",
    now: dt.datetime | None = None,
    lock_timeout_s: float = 600.0,
    owner_uid: int | None = None,
    crash_hook: CrashHook | None = None,
) -> PrepareResult:
    """Make `<cache_root>/<replica>` a cache keyed by `key`, moving any other one aside."""
    job = _Job(cache_root, replica, key, seat_name, now, crash_hook or (lambda step: None))
    check_root(cache_root, owner_uid=owner_uid)
    cache_root.mkdir(parents=True, exist_ok=True)
    check_root(cache_root, owner_uid=owner_uid)
    live = job.live
    with exclusive_lock(lock_path(cache_root, replica), timeout_s=lock_timeout_s):
        job.hook("locked")
        if live.is_symlink():
            raise ConfigError(f"{live} is a symlink: a replica cache must be a real directory")
        recovered = _recover(job)
        if recovered is not None:
            return recovered
        manifest = read_manifest(live) if live.is_dir() else None
        if manifest is not None and manifest["key"] == key.digest:
            _ensure_subdirs(live)
            message = f"{replica}: cache {live} is current (key {key.short})"
            log.info(message)
            return PrepareResult(live, "current", None, (), cache_env(live), message)
        if not live.exists():
            _build_fresh(job)
            os.rename(job.fresh, live)
            job.hook("published")
            message = f"{replica}: new cache {live} (key {key.short})"
            log.info(message)
            return PrepareResult(live, "absent", None, (), cache_env(live), message)
        state = "stale" if manifest is not None else "unkeyed"
        changed = diff_factors(manifest["factors"], key.factors) if manifest is not None else []
        aside = _stale_name(cache_root, replica, now)
        atomic_write_json(job.intent, {
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


def lock_path(cache_root: Path, replica: str) -> Path:
    return cache_root / f".{replica}.lock"


def _finish_move(job: _Job) -> PrepareResult:
    """Complete the move recorded in the intent, from whatever step it stopped at."""
    intent = json.loads(job.intent.read_text(encoding="utf-8"))
    aside = job.root / intent["moved_to"]
    live = job.live
    live_manifest = read_manifest(live) if live.is_dir() else None
    live_is_new = live_manifest is not None and live_manifest["key"] == job.key.digest
    if live.exists() and not aside.exists() and not live_is_new:
        os.rename(live, aside)
        job.hook("moved")
    if intent["state_before"] == "unkeyed":
        why = "it had no manifest (unknown provenance)"
    else:
        texts = [entry[3] for entry in intent["changed"]]
        why = "changed: " + ("; ".join(texts) or "(no factor differs: key schema)")
    if not live.exists():
        _build_fresh(job, replaced={"moved_to": aside.name, "why": why})
        os.rename(job.fresh, live)
        job.hook("published")
    os.unlink(job.intent)
    job.hook("intent-removed")
    changed = tuple(FactorChange(f, old, new) for f, old, new, _ in intent["changed"])
    message = f"{job.replica}: moved cache aside to {aside} because {why}"
    log.warning(message)
    return PrepareResult(live, intent["state_before"], aside, changed, cache_env(live), message)


def _recover(job: _Job) -> PrepareResult | None:
    """Finish a move an earlier run was killed in the middle of (None: nothing to finish)."""
    if not job.intent.exists():
        return None
    try:
        intent = json.loads(job.intent.read_text(encoding="utf-8"))
    except ValueError:
        intent = None
    if not isinstance(intent, dict) or intent.get("new_key") != job.key.digest:
        # An interrupted move towards another key: the old cache is either still live (it will
        # be judged afresh) or already at its stale name (kept); only the plan is dropped.
        os.unlink(job.intent)
        return None
    return _finish_move(job)


def _build_fresh(job: _Job, replaced: dict[str, str] | None = None) -> None:
    """A complete fresh cache dir at a private name (idempotent: a half-built one is reused).

    `replaced`: the cache this one replaces ({"moved_to": name, "why": text}), kept in the
    manifest so cache-audit can say why each moved-aside dir was moved.
    """
    fresh = job.fresh
    fresh.mkdir(exist_ok=True)
    job.hook("fresh-created")
    _ensure_subdirs(fresh)
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


def _ensure_subdirs(replica_dir: Path) -> None:
    for sub in CACHE_ENV_SUBDIRS.values():
        (replica_dir / sub).mkdir(parents=True, exist_ok=True)


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
