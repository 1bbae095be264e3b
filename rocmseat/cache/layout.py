"""Where a replica's compiler caches live inside its cache root, and which variables point there.

Every cache a replica's engine writes compiled artefacts to is pointed at a subfolder of the
replica's root, so one key governs all of them and one rename moves all of them aside.
"""

from __future__ import annotations

import re
from pathlib import Path

from rocmseat.seat.model import NAME_CHARS

MANIFEST_NAME = "rocmseat-manifest.json"

# `<replica>.stale-<UTC stamp>[-N]`: a cache moved aside by rocmseat.cache.store.
STALE_NAME = re.compile(rf"^(?P<replica>{NAME_CHARS})\.stale-(?P<stamp>\d{{8}}T\d{{6}}Z)(-\d+)?$")


# Variable -> subfolder of the replica root. Why each one:
# - VLLM_CACHE_ROOT: vLLM's torch.compile tree (torch_compile_cache/<hash>/rank_<r>_<dp>/...)
#   and its AOT tree (vllm/envs.py; vllm/compilation/backends.py).
# - TRITON_CACHE_DIR is deliberately NOT set: vLLM gives each rank its own Triton cache under
#   the compile cache dir (rank_<r>_<dp>/triton_cache) only when TRITON_CACHE_DIR is unset; a
#   value in the environment is taken as a caller override and shared by every rank
#   (vllm/compilation/compiler_interface.py, InductorAdaptor.initialize_cache, vLLM 0.33.0).
#   TRITON_HOME moves Triton's own default (~/.triton/cache) into the store instead.
# - TORCHINDUCTOR_CACHE_DIR is safe to set: vLLM overwrites it unconditionally with the per-hash
#   `inductor_cache` dir when it compiles (compiler_interface.py initialize_cache and
#   vllm/compilation/decorators.py, AOT path: "Unconditional because torch's cache_dir() may
#   have pre-filled the /tmp default"), so our value only catches Inductor work done outside
#   vLLM's compile, which would otherwise land in /tmp/torchinductor_<user>
#   (torch/_inductor/runtime/cache_dir_utils.py default_cache_dir).
# - TRITON_HOME: triton's default cache lives in $TRITON_HOME/.triton/cache (triton/knobs.py).
# - MIOPEN_USER_DB_PATH / MIOPEN_CUSTOM_CACHE_DIR: MIOpen's per-user find db and compiled
#   kernel cache (MIOpen docs, "Kernel cache" / "User databases").
# - AMD_COMGR_CACHE_DIR: comgr's code-object cache (ROCm >= 6.2).
# - AITER_JIT_DIR: AITER's JIT-built kernel modules.
# - XDG_CACHE_HOME: anything else that follows XDG (vLLM's own default, torch hub excluded: the
#   seat names model paths explicitly).
CACHE_ENV_SUBDIRS: dict[str, str] = {
    "VLLM_CACHE_ROOT": "vllm",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "TRITON_HOME": "triton-home",
    "MIOPEN_USER_DB_PATH": "miopen/db",
    "MIOPEN_CUSTOM_CACHE_DIR": "miopen/cache",
    "AMD_COMGR_CACHE_DIR": "comgr",
    "AITER_JIT_DIR": "aiter-jit",
    "XDG_CACHE_HOME": "xdg-cache",
}

# Variables a seat must not set in [env]: each points a compiler cache somewhere, and the store
# owns where compiler caches live (docs/architecture.md, incident 3).
FORBIDDEN_SEAT_ENV: frozenset[str] = frozenset(
    {*CACHE_ENV_SUBDIRS, "TRITON_CACHE_DIR"}
)


def cache_env(replica_root: Path) -> dict[str, str]:
    """The environment variables that point every compiler cache into `replica_root`."""
    return {name: str(replica_root / sub) for name, sub in CACHE_ENV_SUBDIRS.items()}
