"""The AER baselines in the state dir: the last reading of each kind of run, so the next run of
that kind reports what is new.

AER counters only grow (drivers/pci/pcie/aer.c), so a count means nothing without a window, and
the window is "since the last run that looked". Different runs look for different consumers, and
each must keep its own window (docs/preflight.md, "AER baselines"):

- `node`: full runs (no --only, no --pair), the periodic timer's. Its findings become the cached
  verdict that Slurm, node-problem-detector and NHC read, so only full runs advance it: a replica's
  ExecStartPre (`--pair`) or an operator's `--only aer` that saw 5,000 BadTLPs must not make the
  next full run, and so the verdict, say "no new errors".
- `gpus:<A>,<B>`: `--pair` runs over those GPUs (each replica's ExecStartPre): errors since that
  pair was last checked; its first run counts from the node baseline.
- `partial`: `--only` runs over every GPU; likewise.

`--sample` runs judge their own two readings and advance nothing.

`<state dir>/preflight/aer-baseline.json` (`rocmseat.aer-baseline/v2`: the sysfs root, the boot id,
and per scope the devices' counters and when they were read), written atomically under an
exclusive lock (two replica units' ExecStartPre can run preflight at once); each run merges the
devices it read into its scope. A file from another sysfs root or another boot (counters restart
at boot) is not used. A scope with nothing new is left as it is (no rewrite, no fsync), so the
window reads "since the AER baseline of <its date>". The file is input like any other: a regular
file, size-capped, every field checked.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.atomic import atomic_write_json, exclusive_lock
from rocmseat.errors import ReadError, RocmseatError
from rocmseat.safeio import read_regular_bytes

SCHEMA = "rocmseat.aer-baseline/v2"
SCHEMA_V1 = "rocmseat.aer-baseline/v1"  # one scope (node), no boot id: read as the node's
LOCK_TIMEOUT_S = 10.0
LIMIT_BYTES = 4 << 20
NODE_SCOPE = "node"
PARTIAL_SCOPE = "partial"
MAX_SCOPES = 64  # pairs of a node, and then some; the oldest go first
_U64_MAX = (1 << 64) - 1
_SCOPE_RE = re.compile(r"^(?:node|partial|gpus:[0-9a-f:.,]{1,400})$")
_KEY_RE = re.compile(r"^[A-Za-z0-9_.\[\] -]{1,100}$")
_STAMP_RE = re.compile(r"^[0-9A-Za-z:.+-]{1,40}$")
_ADDRESS_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

Counters = dict[str, dict[str, int]]  # address -> "correctable.BadTLP" -> count


@dataclass(frozen=True, slots=True)
class Baseline:
    taken_at: str  # UTC ISO stamp
    devices: Counters
    scope: str = NODE_SCOPE
    from_node: bool = False  # a partial scope's first run: counted from the node baseline


@dataclass(frozen=True, slots=True)
class _Stored:
    sysfs_root: str
    boot_id: str | None
    boot_known: bool  # False for a v1 file (it recorded no boot)
    scopes: dict[str, tuple[str, Counters]]  # scope -> (taken_at, devices)


def state_path(state_dir: Path) -> Path:
    return state_dir / "preflight" / "aer-baseline.json"


def scope_for(pairs: Sequence[tuple[str, str]] | None, families: Collection[str] | None) -> str:
    """The baseline a run reads and advances: its GPUs (`--pair`), `partial` (`--only`), else
    the node's."""
    if pairs:
        return "gpus:" + ",".join(sorted({a for pair in pairs for a in pair}))
    return PARTIAL_SCOPE if families else NODE_SCOPE


def _root_key(sysfs_root: Path) -> str:
    try:
        return str(sysfs_root.resolve())
    except (OSError, RuntimeError):
        return str(sysfs_root)


def _parse(text: str) -> _Stored:
    """Pure: the file's text -> its scopes; ValueError naming what is wrong."""
    data = json.loads(text, parse_constant=_refuse_constant)
    if not isinstance(data, dict) or data.get("schema") not in (SCHEMA, SCHEMA_V1):
        raise ValueError(f"not a {SCHEMA} file")
    root = data.get("sysfs_root")
    if not isinstance(root, str):
        raise ValueError("no sysfs_root")
    if data["schema"] == SCHEMA_V1:
        raw_scopes: Any = {NODE_SCOPE: {"taken_at": data.get("taken_at"),
                                        "devices": data.get("devices")}}
        boot_id, boot_known = None, False
    else:
        raw_scopes = data.get("scopes")
        boot_id, boot_known = data.get("boot_id"), True
        if boot_id is not None and not isinstance(boot_id, str):
            raise ValueError("bad boot_id")
    if not isinstance(raw_scopes, dict) or len(raw_scopes) > MAX_SCOPES + 1:
        raise ValueError("bad scopes")
    scopes: dict[str, tuple[str, Counters]] = {}
    for scope, entry in raw_scopes.items():
        if not isinstance(scope, str) or not _SCOPE_RE.fullmatch(scope):
            raise ValueError(f"bad scope {str(scope)[:40]!r}")
        if not isinstance(entry, dict):
            raise ValueError(f"bad scope {scope!r}")
        taken_at, devices = entry.get("taken_at"), entry.get("devices")
        if not isinstance(taken_at, str) or not _STAMP_RE.fullmatch(taken_at):
            raise ValueError(f"bad taken_at in scope {scope!r}")
        scopes[scope] = (taken_at, _counters(devices, scope))
    return _Stored(root, boot_id, boot_known, scopes)


def _counters(devices: Any, scope: str) -> Counters:
    if not isinstance(devices, dict) or len(devices) > 4096:
        raise ValueError(f"bad devices in scope {scope!r}")
    clean: Counters = {}
    for address, counters in devices.items():
        if (
            not isinstance(address, str)
            or not _ADDRESS_RE.fullmatch(address)
            or not isinstance(counters, dict)
            or len(counters) > 256
            or not all(
                isinstance(k, str) and _KEY_RE.fullmatch(k)
                and isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _U64_MAX
                for k, v in counters.items()
            )
        ):
            raise ValueError(f"bad counters for {str(address)[:40]!r}")
        clean[address] = dict(counters)
    return clean


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _read(path: Path) -> tuple[_Stored | None, str | None]:
    try:
        raw = read_regular_bytes(path, limit_bytes=LIMIT_BYTES)
    except ReadError as exc:
        if not path.exists() and not path.is_symlink():
            return None, None
        return None, f"{path}: {exc.cause}"
    try:
        # a torn or foreign file is a one-line problem, never a traceback on every later run
        # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        return _parse(raw.decode("utf-8")), None
    except (ValueError, RecursionError) as exc:
        return None, f"{path}: unusable baseline ({exc})"


def _usable(stored: _Stored | None, sysfs_root: Path, boot_id: str | None) -> bool:
    """Taken on this sysfs root, in this boot (a v1 file recorded no boot: taken as this one)."""
    if stored is None or stored.sysfs_root != _root_key(sysfs_root):
        return False
    return not stored.boot_known or stored.boot_id == boot_id


def load_baseline(
    state_dir: Path,
    sysfs_root: Path,
    scope: str = NODE_SCOPE,
    *,
    boot_id: str | None = None,
) -> tuple[Baseline | None, str | None]:
    """(the scope's baseline or None, a one-line problem if the file exists but is unusable).

    A partial scope's devices are overlaid on the node's (a device it never read counts from the
    node baseline); a partial scope never stored counts from the node baseline alone.
    """
    stored, problem = _read(state_path(state_dir))
    if stored is None or not _usable(stored, sysfs_root, boot_id):
        return None, problem
    node = stored.scopes.get(NODE_SCOPE)
    own = stored.scopes.get(scope)
    if scope == NODE_SCOPE or own is None:
        if node is None:
            return None, None
        return Baseline(node[0], node[1], scope, from_node=scope != NODE_SCOPE), None
    devices = dict(node[1]) if node is not None else {}
    devices.update(own[1])
    return Baseline(own[0], devices, scope), None


def save_baseline(
    state_dir: Path,
    sysfs_root: Path,
    devices: Mapping[str, Mapping[str, int]],
    taken_at: str,
    scope: str = NODE_SCOPE,
    *,
    boot_id: str | None = None,
) -> str | None:
    """Merge `devices` into the scope's baseline; returns a one-line problem or None."""
    path = state_path(state_dir)
    try:
        with exclusive_lock(path.with_suffix(".lock"), timeout_s=LOCK_TIMEOUT_S):
            stored, _problem = _read(path)
            keep = stored is not None and _usable(stored, sysfs_root, boot_id)
            scopes = dict(stored.scopes) if stored is not None and keep else {}
            previous = scopes.get(scope)
            merged: Counters = dict(previous[1]) if previous else {}
            merged.update({a: dict(c) for a, c in devices.items()})
            if previous is not None and merged == previous[1] and stored is not None and (
                stored.boot_known
            ):
                # Nothing counted since the baseline: keep it (and its date) rather than rewrite
                # and fsync the same counters on every run; the next window still starts at it.
                return None
            scopes[scope] = (taken_at, merged)
            atomic_write_json(
                path,
                {
                    "schema": SCHEMA,
                    "sysfs_root": _root_key(sysfs_root),
                    "boot_id": boot_id,
                    "scopes": {
                        name: {"taken_at": stamp, "devices": counters}
                        for name, (stamp, counters) in _bounded_scopes(scopes).items()
                    },
                },
            )
    except (FileExistsError, NotADirectoryError):
        # mkdir of the state dir met a file where a directory should be
        return f"{path}: cannot save the AER baseline (a file stands where a directory should be)"
    except (OSError, RocmseatError) as exc:
        return f"{path}: cannot save the AER baseline ({getattr(exc, 'strerror', None) or exc})"
    return None


def _bounded_scopes(
    scopes: dict[str, tuple[str, Counters]],
) -> dict[str, tuple[str, Counters]]:
    """The node scope and the MAX_SCOPES most recent others (ISO stamps sort by time)."""
    others = sorted((s for s in scopes if s != NODE_SCOPE), key=lambda s: scopes[s][0],
                    reverse=True)[:MAX_SCOPES]
    return {s: scopes[s] for s in sorted(scopes) if s == NODE_SCOPE or s in others}
