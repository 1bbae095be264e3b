"""Where libamdhip64 is: the candidates in order, and loading the first that loads.

Order: an explicit path (the `library` argument or ROCMSEAT_HIP_LIBRARY), $ROCM_PATH/lib,
$HIP_PATH/lib, /opt/rocm/lib, the copy a ROCm build of torch bundles (torch/lib), then the dynamic
loader's own search (LD_LIBRARY_PATH, ld.so.cache) by name. Distro runtimes may ship only the
versioned soname without the -dev symlink (Debian's libamdhip64-5 has libamdhip64.so.5 only), so
every directory and the loader are tried with libamdhip64.so and .so.7/.6/.5
(ROCm clr: include/hip/hip_runtime_api.h, hipamd/src/hip_memory.cpp).
"""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

LIBRARY_ENV = "ROCMSEAT_HIP_LIBRARY"
SONAMES = ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5")
DEFAULT_ROCM_DIR = Path("/opt/rocm")


@dataclass(frozen=True, slots=True)
class Loaded:
    lib: ctypes.CDLL
    source: str  # the path or soname that loaded


class LibraryNotFoundError(Exception):
    """No candidate loaded; the message lists what was tried and why each failed."""

    def __init__(self, tried: Sequence[tuple[str, str]]) -> None:
        shown = "; ".join(f"{where}: {why}" for where, why in tried[:6])
        more = f" (+{len(tried) - 6} more)" if len(tried) > 6 else ""
        super().__init__(f"no HIP runtime (libamdhip64) could be loaded: {shown}{more}")
        self.tried = tuple(tried)


def torch_lib_dir() -> Path | None:
    """torch/lib of an installed torch, found without importing torch (a ROCm torch bundles HIP)."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


def candidates(
    env: Mapping[str, str], explicit: Path | None = None, torch_lib: Path | None = None
) -> list[str]:
    """The paths and sonames to try, in order (pure: no file system access)."""
    if explicit is not None:
        return [str(explicit)]
    if chosen := env.get(LIBRARY_ENV):
        return [chosen]
    dirs: list[Path] = []
    for var in ("ROCM_PATH", "HIP_PATH"):
        if value := env.get(var):
            dirs.append(Path(value) / "lib")
    dirs.append(DEFAULT_ROCM_DIR / "lib")
    if torch_lib is not None:
        dirs.append(torch_lib)
    out: list[str] = []
    for directory in dirs:
        out.extend(str(directory / name) for name in SONAMES)
    out.extend(SONAMES)  # bare names: the dynamic loader's search
    return list(dict.fromkeys(out))


def load(env: Mapping[str, str], explicit: Path | None = None) -> Loaded:
    """Load the first candidate that exists and loads; raise LibraryNotFoundError otherwise."""
    tried: list[tuple[str, str]] = []
    for candidate in candidates(env, explicit, torch_lib_dir()):
        is_path = "/" in candidate
        if is_path and not Path(candidate).exists():
            # A missing directory entry is the common case; list it only when it was chosen.
            if explicit is not None or candidate == env.get(LIBRARY_ENV):
                tried.append((candidate, "no such file"))
            continue
        try:
            return Loaded(ctypes.CDLL(candidate), candidate)
        except OSError as exc:
            tried.append((candidate, str(exc).split(":")[-1].strip() or "cannot load"))
    return_tried = tried or [("libamdhip64", "not found in ROCM_PATH, HIP_PATH, /opt/rocm, torch")]
    raise LibraryNotFoundError(return_tried)
