"""The state directory: error readings, startup reports, placements, watchdog baselines.

One rule (docs/architecture.md, "State"): `--state-dir` / `ROCMSEAT_STATE_DIR`, else the seat
file's `state_dir` (for a command about a seat), else `/var/lib/rocmseat` as root and the XDG
state dir otherwise. Only this module spells that precedence and those defaults; tests make
`default_state_dir` raise.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_ENV = "ROCMSEAT_STATE_DIR"


def default_state_dir() -> Path:
    if env := os.environ.get(STATE_ENV):
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/lib/rocmseat")
    xdg = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local/state")
    return Path(xdg) / "rocmseat"


def state_root(given: Path | None, seat_state_dir: Path | None = None) -> Path:
    """The state dir a command uses: `given` (the option or its environment variable), else
    the seat's `state_dir`, else the default."""
    if given is not None:
        return given
    if seat_state_dir is not None:
        return seat_state_dir
    return default_state_dir()
