"""The `[remediate]` table of a seat file: whether and how `rocmseat watch` heals a replica
(docs/remediate.md). Off by default. Launch ignores it; it is not a config-key factor.

Its own module so that the remediation settings can grow without touching the seat's other
sections; rocmseat.seat.model references `Remediate` in one line. It imports nothing from
rocmseat.seat.model (which imports it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field


def _float(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _argv(value: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if value is not None and (not value or not value[0].strip()):
        raise ValueError("an argv list needs a program as its first element")
    return value


def _absolute(value: Path) -> Path:
    if not value.is_absolute():
        raise ValueError(f"'{value}' is not an absolute path")
    return value


Seconds = Annotated[float, BeforeValidator(_float), Field(strict=True, allow_inf_nan=False,
                                                          gt=0, le=86_400)]


class Remediate(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # "on" acts, "dry-run" journals what it would do and does nothing; `watch --remediate`
    # overrides it.
    mode: Literal["off", "on", "dry-run"] = "off"
    # argv run for a restart instead of `systemctl restart <the replica's unit>`; it gets
    # ROCMSEAT_SEAT, ROCMSEAT_REPLICA and ROCMSEAT_REMEDIATE_MODE (drafter | no-drafter) in
    # its environment and should return once the replica was restarted.
    restart_command: Annotated[tuple[str, ...] | None, AfterValidator(_argv)] = None
    # where the replica units are (the no-drafter drop-in goes into <unit>.d/ there)
    unit_dir: Annotated[Path, BeforeValidator(lambda v: Path(v) if isinstance(v, str) else v),
                        AfterValidator(_absolute)] = Path("/etc/systemd/system")
    verify_drafts: Annotated[int, Field(ge=10, le=1_000_000, strict=True)] = 200
    verify_s: Seconds = 60.0  # generation measured without the drafter (step 2)
    ready_timeout_s: Seconds = 1800.0  # restart -> the watcher sees the new engine
    verify_timeout_s: Seconds = 1800.0  # new engine -> enough drafts / generation to judge
    node_per_hour: Annotated[int, Field(ge=1, le=1000, strict=True)] = 3
    max_fraction: Annotated[float, BeforeValidator(_float),
                            Field(strict=True, allow_inf_nan=False, gt=0, le=1)] = 0.25
