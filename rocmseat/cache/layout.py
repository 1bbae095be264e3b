"""Where a replica's compiler caches live inside its cache root, and which variables point there.

Every cache a replica's engine writes compiled artefacts to is pointed at a subfolder of the
replica's root, so one key governs all of them and one rename moves all of them aside.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from rocmseat.seat.envclass import CACHE_ENV_SUBDIRS
from rocmseat.seat.model import NAME_CHARS

MANIFEST_NAME = "rocmseat-manifest.json"

# `<replica>.stale-<UTC stamp>[-N]`: a cache moved aside by rocmseat.cache.store.
STALE_NAME = re.compile(rf"^(?P<replica>{NAME_CHARS})\.stale-(?P<stamp>\d{{8}}T\d{{6}}Z)(-\d+)?$")


def cache_env(replica_root: Path,
              subdirs: Mapping[str, str] = CACHE_ENV_SUBDIRS) -> dict[str, str]:
    """The environment variables that point every compiler cache into `replica_root`:
    `subdirs` the engine's (rocmseat.engines: Engine.cache_subdirs; vLLM's by default, none for
    llama.cpp, which has no compile cache)."""
    return {name: str(replica_root / sub) for name, sub in subdirs.items()}
