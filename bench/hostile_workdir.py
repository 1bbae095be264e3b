"""The command line and the sandbox of the long hostile batteries (bench_hostile_*.py): the
rounds, the seed, a work dir, and an environment that keeps every write under it (never the
host's state dir, caches or crash log)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def battery_args(doc: str, *, rounds: int, seed: int, prefix: str) -> tuple[argparse.Namespace,
                                                                             Path]:
    """Parse --rounds/--seed/--keep, make the work dir, point the environment into it and put
    the repository on sys.path; (the arguments, the work dir)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--seed", type=int, default=seed)
    parser.add_argument("--keep", type=Path, help="work in DIR and keep it (reproducers)")
    args = parser.parse_args()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.update({
        "ROCMSEAT_STATE_DIR": str(workdir / "state-env"),
        "ROCMSEAT_ERROR_LOG": str(workdir / "rocmseat-error.log"),
        "XDG_CACHE_HOME": str(workdir / "xdg-cache"),
        "XDG_STATE_HOME": str(workdir / "xdg-state"),
        "MPLCONFIGDIR": str(workdir / "mpl"),
        "NO_COLOR": "1",
    })
    sys.path.insert(0, str(REPO))
    return args, workdir
