"""The replicas of a seat as watch targets: names, /metrics URLs, cache dirs, GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rocmseat.cache.layout import replicas_with_cache
from rocmseat.errors import ConfigError
from rocmseat.watch.scrape import Target


def seat_replica_names(seat: Any, state_dir: Path | None) -> list[str]:
    """Named in the seat, one per explicit pair, or (auto mode) the replicas launch recorded."""
    replicas = seat.replicas
    if replicas.names:
        return list(replicas.names)
    if replicas.pairs:
        return list(seat.replica_names(len(replicas.pairs)))
    if seat.backend == "cpu":
        return ["r0"]  # the CPU backend runs one replica (launchers/demo-cpu.toml)
    found: set[str] = set()
    if state_dir is not None:
        seat_state = state_dir / "seats" / seat.name
        if seat_state.is_dir():
            found |= {p.name for p in seat_state.iterdir() if (p / "startup.json").is_file()}
    if not found:
        found |= set(replicas_with_cache(Path(seat.cache_root)))
    if not found:
        raise ConfigError(
            f"{seat.source_path}: key 'replicas': an auto seat names no replicas and none was "
            "launched yet",
        )
    return sorted(found, key=lambda n: (len(n), n))


def seat_targets(seat: Any, state_dir: Path | None) -> list[Target]:
    names = seat_replica_names(seat, state_dir)
    pairs = seat.replicas.pairs or ()
    targets = []
    for i, name in enumerate(names):
        port = seat.port_of(i)
        host = seat.engine.host
        url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/metrics"
        gpus = tuple(pairs[i]) if i < len(pairs) else ()
        targets.append(Target(name, url, Path(seat.cache_root) / name, gpus))
    return targets
