"""cache-audit: every cache directory under a seat's cache root, judged against the current key.

States: `current` (manifest key = current key), `stale` (a known factor differs), `unkeyed` (no
valid manifest: unknown provenance), `unknown` (the manifest agrees on every factor that could be
computed, but some could not), `moved-aside` (<replica>.stale-<stamp>: kept by rocmseat).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocmseat import exitcodes
from rocmseat.cache.current import CurrentKey, ask_engine, current_key
from rocmseat.cache.key import FactorChange, diff_factors, digest_of, redact_why
from rocmseat.cache.layout import STALE_NAME
from rocmseat.cache.store import STAMP_FORMAT, check_root, read_manifest
from rocmseat.cache.usage import InUse, ProcessView, judge_use
from rocmseat.errors import ConfigError
from rocmseat.runner import Runner, run
from rocmseat.text import printable

if TYPE_CHECKING:
    from rocmseat.placement.place import Placement


@dataclass(frozen=True, slots=True)
class DirStats:
    size_bytes: int
    file_count: int
    newest_mtime: float | None  # None: no file at all
    oldest_mtime: float | None


@dataclass(frozen=True, slots=True)
class CacheEntry:
    replica: str
    path: Path
    state: str  # current | stale | unkeyed | unknown | moved-aside
    manifest_key: str | None
    created: str | None  # from the manifest
    moved_at: dt.datetime | None  # from the stale name
    moved_age_s: float | None  # seconds since it was moved aside (prune counts from here)
    stats: DirStats
    age_s: float | None
    last_used: dt.datetime | None
    changes: tuple[FactorChange, ...]  # manifest factors -> current factors
    unknown: tuple[str, ...]  # current factors that could not be computed
    in_use: InUse
    # The manifest's record of the dir this one replaced: (its name, why it was moved aside).
    replaced: tuple[str, str] | None = None
    # For a moved-aside dir: why it was moved, from the manifest of the dir that replaced it
    # (None: no record, e.g. moved by hand or by a rocmseat without the record).
    moved_because: str | None = None


@dataclass(frozen=True, slots=True)
class SeatAudit:
    seat: str
    seat_file: str
    cache_root: Path
    current_keys: dict[str, CurrentKey]  # replica -> current key
    entries: tuple[CacheEntry, ...]
    problems: tuple[str, ...] = field(default=())  # e.g. the cache root is missing
    # why the seat's engine has no compile cache (rocmseat.engines: no cache variables), or None
    no_compile_cache: str | None = None

    def live(self) -> tuple[CacheEntry, ...]:
        return tuple(e for e in self.entries if e.state != "moved-aside")

    def moved(self, replica: str) -> tuple[CacheEntry, ...]:
        return tuple(e for e in self.entries if e.state == "moved-aside" and e.replica == replica)


def dir_stats(directory: Path) -> DirStats:
    """Size, file count and mtimes of a tree (symlinks are not followed, their targets not
    counted); unreadable subdirectories are skipped."""
    size = count = 0
    newest: float | None = None
    oldest: float | None = None
    for dirpath, _dirnames, filenames in os.walk(directory):
        for name in filenames:
            try:
                info = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            count += 1
            size += info.st_size
            newest = info.st_mtime if newest is None else max(newest, info.st_mtime)
            oldest = info.st_mtime if oldest is None else min(oldest, info.st_mtime)
    return DirStats(size, count, newest, oldest)


def judge_entry(
    manifest: Mapping[str, Any] | None, current: CurrentKey
) -> tuple[str, tuple[FactorChange, ...]]:
    """The state of a live cache dir and the factors that differ (pure)."""
    if manifest is None:
        return "unkeyed", ()
    old = {k: v for k, v in manifest["factors"].items() if k not in current.unknown}
    changes = tuple(diff_factors(old, current.factors))
    if changes:
        return "stale", changes
    if current.unknown:
        return "unknown", ()
    if manifest["key"] != digest_of(current.factors):
        return "stale", ()  # same factors, other digest: a manifest written by hand or tampered
    return "current", ()


def audit_seat(
    seat_name: str,
    seat_file: str,
    cache_root: Path,
    current_keys: Mapping[str, CurrentKey],
    *,
    now: dt.datetime,
    processes: Sequence[ProcessView],
    unplaced_why: str = "",
) -> SeatAudit:
    """Read every cache dir under `cache_root` and judge it (no process is started here).
    `unplaced_why`: why the seat's replicas are not known here (a dir then has no current key
    for that reason, not because its replica left the seat)."""
    entries: list[CacheEntry] = []
    problems: list[str] = []
    try:
        check_root(cache_root)  # what prepare() would refuse, said before the launch does
    except ConfigError as exc:
        problems.append(f"{exc.message}: launch will refuse it")
    try:
        names = sorted(os.listdir(cache_root))
    except FileNotFoundError:
        names = []
        problems.append(f"cache root {cache_root} does not exist yet (no replica has started)")
    except OSError as exc:
        names = []
        problems.append(f"cache root {cache_root}: {exc.strerror}")
    if not current_keys and unplaced_why:  # else an empty table says nothing of why
        problems.append(f"no replica of the seat is known on this host: {unplaced_why}")
    for name in names:
        path = cache_root / name
        if name.startswith(".") or path.is_symlink() or not path.is_dir():
            continue
        entries.append(_entry(name, path, current_keys, now, processes,
                              unplaced_why=unplaced_why))
    reasons = {e.replaced[0]: e.replaced[1] for e in entries if e.replaced is not None}
    entries = [
        dataclasses.replace(e, moved_because=reasons[e.path.name])
        if e.state == "moved-aside" and e.path.name in reasons else e
        for e in entries
    ]
    return SeatAudit(seat_name, seat_file, cache_root, dict(current_keys), tuple(entries),
                     tuple(problems))


def _entry(
    name: str,
    path: Path,
    current_keys: Mapping[str, CurrentKey],
    now: dt.datetime,
    processes: Sequence[ProcessView],
    *,
    unplaced_why: str = "",
) -> CacheEntry:
    manifest = read_manifest(path)
    stats = dir_stats(path)
    stale = STALE_NAME.match(name)
    replica = stale.group("replica") if stale else name
    current = current_keys.get(replica)
    moved_at = None
    unknown: tuple[str, ...] = ()
    if stale:
        moved_at = dt.datetime.strptime(stale.group("stamp"), STAMP_FORMAT).replace(tzinfo=dt.UTC)
        state = "moved-aside"
        changes: tuple[FactorChange, ...] = ()
        if manifest is not None and current is not None:
            _, changes = judge_entry(manifest, current)
    elif current is None:
        state, changes = ("unknown", ()) if manifest is not None else ("unkeyed", ())
        unknown = (unplaced_why or "replica not in the seat",)
    else:
        state, changes = judge_entry(manifest, current)
        unknown = tuple(sorted(current.unknown))
    created = str(manifest["created"]) if manifest is not None and "created" in manifest else None
    since = _parse_time(created) or moved_at
    if since is None and stats.oldest_mtime is not None:
        since = dt.datetime.fromtimestamp(stats.oldest_mtime, dt.UTC)
    last_used = (
        dt.datetime.fromtimestamp(stats.newest_mtime, dt.UTC) if stats.newest_mtime else None
    )
    return CacheEntry(
        replica=replica,
        path=path,
        state=state,
        manifest_key=str(manifest["key"]) if manifest is not None else None,
        created=created,
        moved_at=moved_at,
        moved_age_s=(now - moved_at).total_seconds() if moved_at is not None else None,
        stats=stats,
        age_s=(now - since).total_seconds() if since is not None else None,
        last_used=last_used,
        changes=changes,
        unknown=unknown,
        # Open files and maps are reported with links resolved: compare both spellings.
        in_use=judge_use(path, processes, real_directory=Path(os.path.realpath(path))),
        replaced=_replaced(manifest),
    )


def _replaced(manifest: Mapping[str, Any] | None) -> tuple[str, str] | None:
    record = manifest.get("replaced") if manifest is not None else None
    if not isinstance(record, dict):
        return None
    name, why = record.get("moved_to"), record.get("why")
    if not isinstance(name, str) or not isinstance(why, str):
        return None
    # a manifest of an older rocmseat may say a secret's old and new value in `why`
    return name, printable(redact_why(why), 4096)


def _parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def seat_current_keys(placement: Placement, *,
                      runner: Runner = run) -> tuple[dict[str, CurrentKey], str]:
    """The current key of every replica the seat's placement knows (rocmseat.placement: from
    the node's GPUs, else the placement.json launch recorded), and why none is known when that
    is so. The engine Python is asked once per seat. A replica whose placement.json is unusable
    is placed by the seat's rule: its current key says why its arch is unknown."""
    engine = ask_engine(placement.seat, runner=runner)
    currents: dict[str, CurrentKey] = {}
    for record in placement.records:
        arch, why = placement.arch(record.replica)
        currents[record.replica] = current_key(
            placement.seat, record.replica, gpu_arch=arch, arch_unknown_why=why, engine=engine
        )
    return currents, placement.why


def audit_seat_file(path: Path, *, sysfs_root: Path | None, state_dir: Path | None,
                    now: dt.datetime, processes: Sequence[ProcessView],
                    runner: Runner = run) -> SeatAudit:
    """`cache-audit` of one seat file: its placement on this host (the roots by the one rule,
    rocmseat.placement.place.seat_roots), each replica's current key, every dir judged."""
    from rocmseat.engines import seat_engine
    from rocmseat.placement.place import place, seat_roots
    from rocmseat.seat.load import load_seat

    seat = load_seat(path)
    engine = seat_engine(seat)
    if not engine.cache_subdirs:
        # nothing compiled at start to go stale: no table of dirs that hold no cache
        return SeatAudit(seat.name, str(path), seat.cache_root, {}, (), (),
                         no_compile_cache=f"{engine.label} has no compile cache (its kernels "
                         "are built ahead of time): nothing to key or move aside")
    sysfs, state = seat_roots(seat, sysfs_root, state_dir)
    currents, unplaced_why = seat_current_keys(
        place(seat, sysfs_root=sysfs, state_root=state), runner=runner)
    return audit_seat(seat.name, str(path), seat.cache_root, currents, now=now,
                      processes=processes, unplaced_why=unplaced_why)


def audit_exit_code(audits: Sequence[SeatAudit]) -> int:
    """0: every live cache matches its current key; 1: one is stale or unkeyed (the next launch
    moves it aside); 2: one could not be judged."""
    states = {entry.state for audit in audits for entry in audit.live()}
    if states & {"stale", "unkeyed"}:
        return exitcodes.PROBLEM
    if "unknown" in states:
        return exitcodes.CANNOT_CHECK
    return exitcodes.OK
