"""The current key of a replica as far as it can be computed: gathered factors plus the ones that
could not be (each with its reason). `rocmseat key` and `cache-audit` use it; nothing is guessed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.cache.fingerprint import fingerprint_model
from rocmseat.cache.key import ConfigKey, build_factors, digest_of
from rocmseat.cache.versions import EngineVersions, engine_versions
from rocmseat.errors import RocmseatError
from rocmseat.runner import Runner, run
from rocmseat.seat.envclass import Classified, classify_env
from rocmseat.seat.model import Seat
from rocmseat.tomllocate import format_loc, locate


@dataclass(frozen=True, slots=True)
class CurrentKey:
    seat: str
    replica: str
    factors: dict[str, Any]  # the computable factors
    unknown: dict[str, str]  # factor -> why it could not be computed
    classified: tuple[Classified, ...] = ()  # the seat's [env], each with its class and rule

    @property
    def key(self) -> ConfigKey | None:
        """The key, only when every factor is known."""
        if self.unknown:
            return None
        return ConfigKey(digest_of(self.factors), self.factors)


def current_key(
    seat: Seat,
    replica: str,
    *,
    gpu_arch: str | None,
    arch_unknown_why: str = "",
    runner: Runner = run,
    engine: EngineVersions | str | None = None,
) -> CurrentKey:
    """Gather what can be gathered; ConfigError (an unclassified variable) still raises.

    `engine` is the answer of `ask_engine` when the caller already has it (one probe per seat).
    """
    unknown: dict[str, str] = {}
    answer = ask_engine(seat, runner=runner) if engine is None else engine
    versions = answer if isinstance(answer, EngineVersions) else None
    if isinstance(answer, str):
        unknown["engine"] = answer
    model = _fingerprint(seat, ("model", "path"), seat.model.path, unknown)
    drafter = None
    if seat.drafter is not None and seat.drafter.path is not None:
        drafter = _fingerprint(seat, ("drafter", "path"), seat.drafter.path, unknown)
    if gpu_arch is None:
        unknown["gpu_arch"] = arch_unknown_why or "GPU arch not known"
    factors = build_factors(
        seat, engine=versions, gpu_arch=gpu_arch, model=model, drafter=drafter
    )
    classified = classify_env(
        seat.env, seat_key=seat.env_classes.key, seat_neutral=seat.env_classes.neutral
    )
    return CurrentKey(seat.name, replica, factors, unknown, classified)


def replica_current_key(seat: Seat, replica: str, *, sysfs_root: Path | None,
                        state_dir: Path | None) -> CurrentKey:
    """`rocmseat key`: the current key of `replica` of `seat` on this host, its arch from the
    seat's placement (the roots by the one rule, rocmseat.placement.place.seat_roots; where
    the node shows no GPU, the placement.json launch recorded). ConfigError when the seat can
    have no replica of that name."""
    from rocmseat.placement.place import place, seat_roots

    sysfs, state = seat_roots(seat, sysfs_root, state_dir)
    placement = place(seat, sysfs_root=sysfs, state_root=state)
    placement.known(replica)
    arch, why = placement.arch(replica)
    return current_key(seat, replica, gpu_arch=arch, arch_unknown_why=why)


def ask_engine(seat: Seat, *, runner: Runner = run) -> EngineVersions | str:
    """The engine's package versions, or why they could not be asked (with the seat-file line)."""
    from rocmseat.seat.runtime import probe_prefix

    try:
        return engine_versions(seat.engine.python, runner=runner,
                               container=probe_prefix(seat.engine), kind=seat.engine.kind,
                               command=seat.engine.command)
    except RocmseatError as exc:
        return f"engine python {seat.engine.python}: {exc} ({_set_at(seat, ('engine', 'python'))})"


def _fingerprint(
    seat: Seat, loc: tuple[str, str], path: Path, unknown: dict[str, str]
) -> dict[str, Any] | None:
    try:
        return fingerprint_model(path)
    except RocmseatError as exc:
        unknown[loc[0]] = f"{exc} ({_set_at(seat, loc)})"
        return None


def _set_at(seat: Seat, loc: tuple[str, str]) -> str:
    """'key model.path, launchers/x.toml:23': where the operator fixes a path that is missing."""
    where = f"key {format_loc(loc)}"
    if seat.source_path is None:
        return where
    line = locate(seat.source_text, loc) if seat.source_text is not None else None
    return f"{where}, {seat.source_path}" + (f":{line}" if line is not None else "")
