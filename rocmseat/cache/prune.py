"""Prune moved-aside caches: only `<replica>.stale-*` dirs, only when old enough and when no
process is known to use them (unknown use keeps them). The plan is computed first (pure)."""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmseat import exitcodes
from rocmseat.atomic import exclusive_lock
from rocmseat.cache.audit import CacheEntry, SeatAudit
from rocmseat.cache.audit_render import human_age, human_size
from rocmseat.cache.layout import STALE_NAME
from rocmseat.cache.store import lock_path, refuse_link
from rocmseat.cache.usage import InUse, ProcessView, Use, judge_use
from rocmseat.errors import ConfigError

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """'14d' -> seconds (units s, m, h, d, w)."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise ConfigError(f"--older-than {text!r}: expected a number and a unit, e.g. 14d or 36h")
    return float(match.group(1)) * _UNIT_S[match.group(2)]


@dataclass(frozen=True, slots=True)
class PruneItem:
    root: Path
    entry: CacheEntry
    remove: bool
    why: str

    def describe(self) -> str:
        verb = "remove" if self.remove else "keep  "
        size = human_size(self.entry.stats.size_bytes)
        return f"{verb} {self.entry.path}  ({size}) {self.why}"


def plan_prune(audits: Sequence[SeatAudit], *, older_than_s: float) -> list[PruneItem]:
    """Pure: a decision for every moved-aside dir (age = time since it was moved aside)."""
    plan: list[PruneItem] = []
    seen: set[Path] = set()
    for audit in audits:
        for entry in audit.entries:
            if entry.state != "moved-aside" or entry.path in seen:
                continue
            seen.add(entry.path)
            plan.append(PruneItem(audit.cache_root, entry, *_decide(entry, older_than_s)))
    return plan


def _decide(entry: CacheEntry, older_than_s: float) -> tuple[bool, str]:
    if entry.in_use.use is Use.YES:
        return False, f"in use: {entry.in_use.describe()}"
    if entry.in_use.use is Use.UNKNOWN:
        return False, f"cannot tell whether a process uses it: {entry.in_use.describe()}"
    age = entry.moved_age_s
    if age is None:
        return False, "age unknown"
    if age < older_than_s:
        return False, f"moved aside {human_age(age)} ago, younger than {human_age(older_than_s)}"
    return True, f"moved aside {human_age(age)} ago, no process uses it"


def execute_prune(
    plan: Sequence[PruneItem], *, recheck: Callable[[Path], InUse] | None = None
) -> list[tuple[PruneItem, str | None]]:
    """Remove the dirs the plan marks, each under its replica's lock; (item, error or None).

    Under the lock each dir is judged again just before removal: still a real moved-aside dir
    (not renamed back to live for a rollback, not replaced by a link), and, with `recheck`,
    still used by no process (one may have started since the plan was printed). A lock file
    that is a symlink keeps the dir (it was planted; rocmseat.cache.store refuses it too).
    """
    done: list[tuple[PruneItem, str | None]] = []
    for item in plan:
        if not item.remove:
            continue
        path = item.entry.path
        lock = lock_path(item.root, item.entry.replica)
        try:
            refuse_link(lock)  # opening it with O_CREAT would follow a planted link
        except ConfigError as exc:
            done.append((item, f"{exc.message}: kept"))
            continue
        with exclusive_lock(lock, timeout_s=60):
            if path.is_symlink() or not path.is_dir() or not STALE_NAME.match(path.name):
                done.append((item, "no longer a moved-aside directory: kept"))
                continue
            use = recheck(path) if recheck is not None else None
            if use is not None and use.use is not Use.NO:
                done.append((item, f"in use now: {use.describe()}: kept"))
                continue
            try:
                shutil.rmtree(path)
            except OSError as exc:
                done.append((item, f"{exc.strerror or exc}"))
                continue
        done.append((item, None))
    return done


def in_use_now(path: Path, scan: Callable[[], Iterable[ProcessView]]) -> InUse:
    """Whether a process uses `path` right now (the last look before a removal)."""
    return judge_use(path, list(scan()), real_directory=Path(os.path.realpath(path)))


@dataclass(frozen=True, slots=True)
class PruneOutcome:
    plan: tuple[PruneItem, ...]
    done: tuple[tuple[PruneItem, str | None], ...]  # with --yes: each removal and its error
    acted: bool

    @property
    def errors(self) -> dict[str, str]:
        return {str(item.entry.path): error for item, error in self.done if error is not None}

    def exit_code(self, audit_code: int) -> int:
        """The audit's exit code, or 1 when a removal failed."""
        return exitcodes.PROBLEM if self.errors else audit_code

    def to_json(self, older_than: str) -> dict[str, object]:
        return {
            "older_than": older_than, "acted": self.acted,
            "plan": [{"path": str(i.entry.path), "remove": i.remove, "why": i.why}
                     for i in self.plan],
            "errors": self.errors,
        }


def prune_moved_aside(audits: Sequence[SeatAudit], *, older_than_s: float, act: bool,
                      scan: Callable[[], Iterable[ProcessView]]) -> PruneOutcome:
    """`cache-audit --prune`: the plan, and with `act` the removals (each dir checked again,
    with `scan`'s processes, for one using it just before it goes)."""
    plan = plan_prune(audits, older_than_s=older_than_s)
    done = execute_prune(plan, recheck=lambda path: in_use_now(path, scan)) if act else []
    return PruneOutcome(tuple(plan), tuple(done), act)
