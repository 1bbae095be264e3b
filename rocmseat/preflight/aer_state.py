"""The AER baseline in the state dir: the last reading, so a later run reports what is new.

`<state dir>/preflight/aer-baseline.json`, written atomically under an exclusive lock (two
replica units' ExecStartPre can run preflight at once); each run merges the devices it read.
A baseline taken on another sysfs root (a fixture tree) is ignored. A run that counted nothing new
leaves the file as it is, so the window reads "since the AER baseline of <its date>".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmseat.atomic import atomic_write_json, exclusive_lock
from rocmseat.errors import RocmseatError

SCHEMA = "rocmseat.aer-baseline/v1"
LOCK_TIMEOUT_S = 10.0

Counters = dict[str, dict[str, int]]  # address -> "correctable.BadTLP" -> count


@dataclass(frozen=True, slots=True)
class Baseline:
    taken_at: str  # UTC ISO stamp
    devices: Counters


def state_path(state_dir: Path) -> Path:
    return state_dir / "preflight" / "aer-baseline.json"


def _root_key(sysfs_root: Path) -> str:
    try:
        return str(sysfs_root.resolve())
    except OSError:
        return str(sysfs_root)


def _parse(text: str, sysfs_root: Path) -> Baseline | None:
    data = json.loads(text)
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} file")
    if data.get("sysfs_root") != _root_key(sysfs_root):
        return None
    devices = data.get("devices")
    taken_at = data.get("taken_at")
    if not isinstance(devices, dict) or not isinstance(taken_at, str):
        raise ValueError("missing devices or taken_at")
    clean: Counters = {}
    for address, counters in devices.items():
        if not isinstance(counters, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in counters.items()
        ):
            raise ValueError(f"bad counters for {address!r}")
        clean[str(address)] = dict(counters)
    return Baseline(taken_at, clean)


def load_baseline(state_dir: Path, sysfs_root: Path) -> tuple[Baseline | None, str | None]:
    """(baseline or None, a one-line problem if the file exists but cannot be used)."""
    path = state_path(state_dir)
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    try:
        # UnicodeDecodeError and JSONDecodeError are ValueErrors: a torn or foreign file is a
        # one-line problem, never a traceback on every later run
        return _parse(raw.decode("utf-8"), sysfs_root), None
    except (ValueError, RecursionError) as exc:
        return None, f"{path}: unusable baseline ({exc})"


def save_baseline(
    state_dir: Path, sysfs_root: Path, devices: Mapping[str, Mapping[str, int]], taken_at: str
) -> str | None:
    """Merge `devices` into the stored baseline; returns a one-line problem or None."""
    path = state_path(state_dir)
    try:
        with exclusive_lock(path.with_suffix(".lock"), timeout_s=LOCK_TIMEOUT_S):
            previous, _problem = load_baseline(state_dir, sysfs_root)
            merged: Counters = dict(previous.devices) if previous else {}
            merged.update({a: dict(c) for a, c in devices.items()})
            if previous is not None and merged == previous.devices:
                # Nothing counted since the baseline: keep it (and its date) rather than rewrite
                # and fsync the same counters on every run; the next window still starts at it.
                return None
            atomic_write_json(
                path,
                {
                    "schema": SCHEMA,
                    "sysfs_root": _root_key(sysfs_root),
                    "taken_at": taken_at,
                    "devices": merged,
                },
            )
    except (FileExistsError, NotADirectoryError):
        # mkdir of the state dir met a file where a directory should be
        return f"{path}: cannot save the AER baseline (a file stands where a directory should be)"
    except (OSError, RocmseatError) as exc:
        return f"{path}: cannot save the AER baseline ({getattr(exc, 'strerror', None) or exc})"
    return None
