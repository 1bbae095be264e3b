"""The `[gate]` table of a candidate seat file: thresholds and battery size (docs/spec.md).

The seat schema (rocmseat.seat.model `Gate`) validates the table with the loader's located
errors ("FILE:LINE: key 'gate.x': what is wrong", exit 2), so `rocmseat launch` accepts a seat
that carries one; this module turns it into the gate's settings. Command-line flags override the
table; the table overrides the field's defaults.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from rocmseat.seat.load import load_seat
from rocmseat.seat.model import Gate, Seat
from rocmseat.speculation.gate.judge import GateConfig


@dataclass(frozen=True, slots=True)
class Battery:
    """How much the battery measures per arm (the CI-sized gate turns these down)."""

    concurrency: tuple[int, ...] = (1, 4, 16, 64)
    repeats: int = 3
    prompts: int = 32  # per single-stream run; aggregate runs send max(prompts, 4 c)
    output_tokens: int = 256
    long_prompt_tokens: int | None = None  # None: 3/4 of the seat's max_model_len
    warm_ttft_samples: int = 5
    stall_after_s: float = 60.0  # as `rocmseat watch --stall-after`: one flag, one default
    run_timeout_s: float = 1800.0
    # Which phases run (the advisor benchmark runs decode only); not a [gate] key.
    phases: tuple[str, ...] = ("cold_ttft", "warm_ttft", "decode", "prefix")


_CONFIG_KEYS = {f.name for f in fields(GateConfig)}
_BATTERY_KEYS = {f.name for f in fields(Battery)} - {"phases"}


@dataclass(frozen=True, slots=True)
class SeatWithGate:
    seat: Seat
    text: str
    data: Mapping[str, Any]  # the TOML of the seat file, [gate] included
    config: GateConfig
    battery: Battery


def gate_settings(table: Gate) -> tuple[GateConfig, Battery]:
    """The gate's thresholds and battery from a validated `[gate]` table (absent keys: the
    defaults)."""
    config, battery = GateConfig(), Battery()
    for key, value in table.model_dump(exclude_none=True).items():
        if key in _CONFIG_KEYS:
            config = replace(config, **{key: value})
        elif key in _BATTERY_KEYS:
            setting: Any = tuple(value) if key == "concurrency" else value
            battery = replace(battery, **{key: setting})
        else:  # a key added to the schema without a home here
            raise AssertionError(f"gate key {key!r} has no setting")
    return config, battery


def load_seat_with_gate(path: Path) -> SeatWithGate:
    """The seat (validated by rocmseat's seat loader, [gate] included) and its gate settings."""
    seat = load_seat(path)
    text = seat.source_text or ""
    data = tomllib.loads(text)  # parsed once already by the loader: cannot fail here
    config, battery = gate_settings(seat.gate)
    return SeatWithGate(seat, text, data, config, battery)
