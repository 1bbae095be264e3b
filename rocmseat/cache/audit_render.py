"""Render cache-audit results: JSON (schema rocmseat.cache-audit/v1) and a table for people."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from rocmseat.cache.audit import CacheEntry, SeatAudit
from rocmseat.cache.current import CurrentKey
from rocmseat.cache.key import MISSING, FactorChange

SCHEMA = "rocmseat.cache-audit/v1"
# Why a live cache is in its state, in words (the table's reading aid).
STATE_WHY = {
    "current": "manifest key = current key",
    "stale": "built for other factors: the next launch moves it aside",
    "unkeyed": "no manifest (unknown provenance): the next launch moves it aside",
    "unknown": "cannot compare: some current factors could not be computed",
}


def _iso(when: dt.datetime | None) -> str | None:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ") if when is not None else None


def _change_json(change: FactorChange) -> dict[str, Any]:
    return {
        "factor": change.factor,
        "old": None if change.old is MISSING else change.old,
        "new": None if change.new is MISSING else change.new,
        "text": change.describe(),
    }


def entry_json(entry: CacheEntry) -> dict[str, Any]:
    return {
        "path": str(entry.path),
        "state": entry.state,
        "manifest_key": entry.manifest_key,
        "created": entry.created,
        "moved_at": _iso(entry.moved_at),
        "moved_age_s": round(entry.moved_age_s) if entry.moved_age_s is not None else None,
        "size_bytes": entry.stats.size_bytes,
        "file_count": entry.stats.file_count,
        "age_s": round(entry.age_s) if entry.age_s is not None else None,
        "last_used": _iso(entry.last_used),
        "changes": [_change_json(c) for c in entry.changes],
        "unknown_factors": list(entry.unknown),
        "moved_because": entry.moved_because,
        "in_use": {
            "state": entry.in_use.use.value,
            "pids": list(entry.in_use.pids),
            "unreadable_processes": entry.in_use.unreadable,
            "unreadable_pids": list(entry.in_use.unreadable_pids),
        },
    }


def _replicas(audit: SeatAudit) -> list[str]:
    return sorted({*audit.current_keys, *(e.replica for e in audit.entries)})


def audit_json(audits: Sequence[SeatAudit], *, now: dt.datetime) -> dict[str, Any]:
    seats = []
    for audit in audits:
        replicas = []
        for replica in _replicas(audit):
            current = audit.current_keys.get(replica)
            live = next((e for e in audit.live() if e.replica == replica), None)
            key = current.key if current is not None else None
            replicas.append({
                "replica": replica,
                "current_key": key.digest if key is not None else None,
                "unknown_factors": dict(sorted(current.unknown.items())) if current else {},
                "cache": entry_json(live) if live is not None else None,
                "moved_aside": [entry_json(e) for e in audit.moved(replica)],
            })
        seat: dict[str, Any] = {
            "seat": audit.seat,
            "seat_file": audit.seat_file,
            "cache_root": str(audit.cache_root),
            "problems": list(audit.problems),
            "replicas": replicas,
        }
        if audit.no_compile_cache is not None:
            seat["compile_cache"] = None
            seat["no_compile_cache"] = audit.no_compile_cache
        seats.append(seat)
    return {"schema": SCHEMA, "generated": _iso(now), "seats": seats}


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, span in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= span:
            return f"{int(seconds // span)}{unit}"
    return f"{max(0, int(seconds))}s"


def _short(key: str | None) -> str:
    return key[:12] if key else "-"


def _when(when: dt.datetime | None) -> str:
    return when.strftime("%Y-%m-%d %H:%M UTC") if when is not None else "-"


HEADER = ("REPLICA", "STATE", "KEY", "SIZE", "FILES", "AGE", "LAST USED", "IN USE")


def audit_table(audits: Sequence[SeatAudit]) -> str:
    """One block per seat: a row per live cache, its moved-aside dirs indented under it."""
    out: list[str] = []
    for audit in audits:
        if audit.no_compile_cache is not None:
            out += [f"seat {audit.seat} ({audit.seat_file})  no compile cache",
                    f"  {audit.no_compile_cache}", ""]
            continue
        out.append(f"seat {audit.seat} ({audit.seat_file})  cache root {audit.cache_root}")
        out.extend(f"  ! {problem}" for problem in audit.problems)
        rows: list[tuple[str, ...]] = [HEADER]
        notes: dict[int, list[str]] = {}
        for replica in _replicas(audit):
            current = audit.current_keys.get(replica)
            live = next((e for e in audit.live() if e.replica == replica), None)
            if live is None:
                rows.append((replica, "absent", "-", "-", "-", "-", "-", "-"))
            else:
                rows.append(_row(replica, live))
            notes[len(rows) - 1] = _replica_notes(audit, replica, current, live)
        widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
        for index, row in enumerate(rows):
            cells = (cell.ljust(w) for cell, w in zip(row, widths, strict=True))
            out.append("  ".join(cells).rstrip())
            out.extend(f"    {line}" for line in notes.get(index, []))
        out.append("")
    return "\n".join(out)


def _replica_notes(audit: SeatAudit, replica: str, current: CurrentKey | None,
                   live: CacheEntry | None) -> list[str]:
    """The lines under a replica's row: its live cache, its current key, its moved-aside dirs."""
    lines: list[str] = []
    key = current.key if current is not None else None
    if live is not None:
        lines.append(f"live, {live.state}: {STATE_WHY[live.state]}")
    if key is not None:
        lines.append(f"current key {_short(key.digest)}")
    elif current is not None:
        lines.append("current key unknown: these factors could not be computed:")
        lines.extend(f"  {name}: {why}" for name, why in sorted(current.unknown.items()))
    elif live is not None and live.unknown:
        lines.append("no current key: " + "; ".join(live.unknown))
    if live is not None and live.changes:
        lines.append("differs: " + "; ".join(c.describe() for c in live.changes))
    for moved in audit.moved(replica):
        lines.append(_moved_line(moved))
        if moved.moved_because is not None:
            lines.append(f"    moved because {moved.moved_because}")
        differs = "; ".join(c.describe() for c in moved.changes)
        # Said once when the current key is still the one it was moved for.
        if differs and moved.moved_because != f"changed: {differs}":
            lines.append(f"    differs from current: {differs}")
    return lines


def _row(replica: str, entry: CacheEntry) -> tuple[str, ...]:
    return (
        replica,
        entry.state,
        _short(entry.manifest_key),
        human_size(entry.stats.size_bytes),
        str(entry.stats.file_count),
        human_age(entry.age_s),
        _when(entry.last_used),
        entry.in_use.describe(),
    )


def _moved_line(entry: CacheEntry) -> str:
    return (
        f"moved aside {_when(entry.moved_at)}: {entry.path.name}  "
        f"{human_size(entry.stats.size_bytes)}, {entry.stats.file_count} files, "
        f"key {_short(entry.manifest_key)}, in use: {entry.in_use.describe()}"
    )
