"""Environment classification: the built-in table, the seat's classes, the unclassified error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rocmseat.errors import ConfigError
from rocmseat.seat.envclass import VLLM_NEUTRAL, EnvClass, classify_env, classify_one

KEY, NEUTRAL = EnvClass.KEY, EnvClass.NEUTRAL


@pytest.mark.parametrize(("name", "expected", "rule"), [
    ("VLLM_ROCM_USE_AITER", KEY, "built-in VLLM_*"),
    ("VLLM_USE_V2_MODEL_RUNNER", KEY, "built-in VLLM_*"),
    ("VLLM_PORT", NEUTRAL, "vLLM ignored_factors"),
    ("VLLM_LOGGING_LEVEL", NEUTRAL, "vLLM ignored_factors"),
    ("VLLM_CPU_KVCACHE_SPACE", NEUTRAL, "vLLM ignored_factors"),
    ("CUDA_VISIBLE_DEVICES", NEUTRAL, "vLLM ignored_factors"),
    ("HIP_VISIBLE_DEVICES", NEUTRAL, "built-in HIP_VISIBLE_DEVICES"),
    ("ROCR_VISIBLE_DEVICES", NEUTRAL, "built-in ROCR_VISIBLE_DEVICES"),
    ("HIP_FORCE_DEV_KERNARG", KEY, "built-in HIP_*"),
    ("HSA_OVERRIDE_GFX_VERSION", KEY, "built-in HSA_*"),
    ("MIOPEN_FIND_MODE", KEY, "built-in MIOPEN_*"),
    ("TRITON_HIP_USE_BLOCK_PINGPONG", KEY, "built-in TRITON_*"),
    ("TORCHINDUCTOR_MAX_AUTOTUNE", KEY, "built-in TORCHINDUCTOR_*"),
    ("PYTORCH_TUNABLEOP_ENABLED", KEY, "built-in PYTORCH_*"),
    ("AITER_LOG_LEVEL", NEUTRAL, "built-in *_LOG_LEVEL"),
    ("AITER_ASM_DIR", KEY, "built-in AITER_*"),
    ("NCCL_PROTO", NEUTRAL, "built-in NCCL_*"),
    ("NCCL_P2P_DISABLE", NEUTRAL, "built-in NCCL_*"),
    ("HF_TOKEN", NEUTRAL, "built-in HF_TOKEN"),
    ("MY_SERVICE_PORT", NEUTRAL, "built-in *_PORT"),
    ("PYTHONPATH", KEY, "built-in PYTHONPATH"),
    ("RADIANCE_MXFP4_MOE", KEY, "built-in RADIANCE_*"),
    ("RADIANCE_LOG_LEVEL", NEUTRAL, "built-in *_LOG_LEVEL"),
    ("OMP_NUM_THREADS", NEUTRAL, "built-in OMP_NUM_THREADS"),
])
def test_builtin_table(name: str, expected: EnvClass, rule: str) -> None:
    assert classify_one(name) == (expected, rule)


def test_seat_classes_win_and_key_beats_neutral() -> None:
    assert classify_one("NCCL_ALGO", seat_key=["NCCL_*"]) == (KEY, "seat key NCCL_*")
    assert classify_one("RADIANCE_X", seat_key=["RADIANCE_*"], seat_neutral=["RADIANCE_X"]) == (
        KEY, "seat key RADIANCE_*")
    expected = (NEUTRAL, "seat neutral MY_LOG_*")
    assert classify_one("MY_LOG_DIR", seat_neutral=["MY_LOG_*"]) == expected


def test_unclassified_names_the_variable() -> None:
    assert classify_one("FLUXGATE_MXFP4") is None
    with pytest.raises(ConfigError) as info:
        classify_env({"NCCL_PROTO": "Simple", "FLUXGATE_MXFP4": "1"})
    assert "'FLUXGATE_MXFP4' is not classified" in info.value.message
    assert info.value.hint and '[env_classes]: key = ["FLUXGATE_MXFP4"]' in info.value.hint


def _installed_vllm_envs(python: Path) -> Path | None:
    venv = python.parent.parent
    found = sorted(venv.glob("lib/python3*/site-packages/vllm/envs.py"))
    return found[0] if found else None


@pytest.mark.engine  # reads the engine venv's vllm/envs.py; its fixture imports vllm there
def test_vllm_neutral_is_vllms_own_ignored_factors(real_engine_python: Path) -> None:
    """VLLM_NEUTRAL is copied from `ignored_factors` in vllm/envs.py: read the installed file
    (as text, never importing vLLM) and compare, so a vLLM upgrade that changes it is noticed."""
    path = _installed_vllm_envs(real_engine_python)
    assert path is not None, f"no vllm/envs.py beside {real_engine_python}"
    text = path.read_text(encoding="utf-8")
    start = text.index("{", text.index("ignored_factors: set[str] = {"))
    listed = set(re.findall(r'"([A-Za-z0-9_]+)"', text[start : text.index("}", start)]))
    assert len(listed) > 50
    assert listed == set(VLLM_NEUTRAL)


@pytest.mark.parametrize("name,env_class,rule", [
    ("NCCL_MIN_NCHANNELS", EnvClass.NEUTRAL, "built-in NCCL_MIN_NCHANNELS"),
    ("RCCL_MSCCL_FORCE_ENABLE", EnvClass.NEUTRAL, "built-in RCCL_MSCCL_FORCE_ENABLE"),
    ("HIP_FORCE_DEV_KERNARG", EnvClass.KEY, "built-in HIP_*"),  # the HIP family, keyed whole
    ("TORCH_NCCL_HIGH_PRIORITY", EnvClass.NEUTRAL, "built-in TORCH_NCCL_HIGH_PRIORITY"),
    ("GPU_MAX_HW_QUEUES", EnvClass.NEUTRAL, "built-in GPU_MAX_HW_QUEUES"),
    ("MSCCLPP_READ_ALLRED", EnvClass.NEUTRAL, "built-in MSCCLPP_*"),
    ("MSCCLPP_HIERARCHICAL_ALLRED", EnvClass.NEUTRAL, "built-in MSCCLPP_*"),
    ("VLLM_ROCM_USE_AITER_MHA", EnvClass.KEY, "built-in VLLM_*"),  # AITER kernels: graphs
])
def test_the_mi300x_serving_environment_is_classified(name, env_class, rule):
    assert classify_one(name) == (env_class, rule)
