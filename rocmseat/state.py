"""The state directory: error readings, startup reports, watchdog baselines.

`/var/lib/rocmseat` as root, the XDG state dir otherwise; `--state-dir` / `ROCMSEAT_STATE_DIR`
override both. Only this module spells those defaults; tests make `default_state_dir` raise.
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
