"""The config key: each graph-changing factor changes it; neutral things do not."""

# ruff: noqa: E501  (the tables of factor edits read best one case per line)

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from rocmseat.cache.fingerprint import fingerprint_model
from rocmseat.cache.key import ConfigKey, compute_key, diff_factors, replica_key, split_engine_args
from rocmseat.errors import ConfigError
from rocmseat.runner import Completed
from rocmseat.seat.model import Seat
from tests.cache.builders import rocm_seat, write_model, write_safetensors

ENGINE = {
    "vllm": "0.33.0", "vllm_distribution": "vllm", "torch": "2.13.0+rocm7.2",
    "torch_git": "abc", "triton": "3.9.0", "triton_distribution": "pytorch-triton-rocm",
    "hip": "7.2.1",
}


def models(tmp_path: Path) -> None:
    write_model(tmp_path / "models" / "target", hidden=64)
    write_model(tmp_path / "models" / "drafter", hidden=32, layers=1, shards=1)


def key_of(seat: Seat, *, engine: Mapping[str, Any] = ENGINE, arch: str = "gfx1201") -> ConfigKey:
    drafter = fingerprint_model(seat.drafter.path) if seat.drafter and seat.drafter.path else None
    return compute_key(
        seat, engine=engine, gpu_arch=arch, model=fingerprint_model(seat.model.path),
        drafter=drafter,
    )


@pytest.fixture
def base(tmp_path: Path) -> ConfigKey:
    models(tmp_path)
    return key_of(rocm_seat(tmp_path))


def _edit_config(tmp_path: Path) -> None:
    path = tmp_path / "models" / "target" / "config.json"
    config = json.loads(path.read_text())
    config["rope_theta"] = 1_000_000
    path.write_text(json.dumps(config))


def _reshape(tmp_path: Path) -> None:
    # Same byte count, other shape: only the safetensors header differs.
    write_safetensors(
        tmp_path / "models" / "target" / "model-00001-of-00002.safetensors",
        {"model.layers.0.mlp.weight": ("BF16", (32, 128)), "shard0.norm": ("BF16", (64,))},
    )


def _drafter_config(tmp_path: Path) -> None:
    path = tmp_path / "models" / "drafter" / "config.json"
    path.write_text(path.read_text().replace('"hidden_size": 32', '"hidden_size": 33'))


CHANGES: list[tuple[str, Sequence[tuple[str, str]], Callable[[Path], None] | None, dict[str, Any]]] = [
    # (factor, seat edits, file edit, key_of kwargs)
    ("image digest", [("sha256:" + "a" * 64, "sha256:" + "b" * 64)], None, {}),
    ("drafter method", [('method = "dflash"', 'method = "eagle3"')], None, {}),
    ("num_speculative_tokens", [("num_speculative_tokens = 7", "num_speculative_tokens = 6"),
                                ("[1, 4, 7]", "[1, 4, 6]")], None, {}),
    ("per-batch-size schedule", [("[[1, 4, 7], [5, 1024, 0]]", "[[1, 2, 7], [3, 1024, 0]]")], None, {}),
    ("RADIANCE_* toggle", [('RADIANCE_MXFP4 = "1"', 'RADIANCE_MXFP4 = "0"')], None, {}),
    ("new RADIANCE_* toggle", [('RADIANCE_MXFP4 = "1"', 'RADIANCE_MXFP4 = "1"\nRADIANCE_NEW = "1"')], None, {}),
    ("a VLLM_ROCM_* toggle", [('NCCL_PROTO = "Simple"', 'NCCL_PROTO = "Simple"\nVLLM_ROCM_USE_AITER = "1"')], None, {}),
    ("a HSA_* variable", [('NCCL_PROTO = "Simple"', 'NCCL_PROTO = "Simple"\nHSA_XNACK = "1"')], None, {}),
    ("vLLM version", [], None, {"engine": {**ENGINE, "vllm": "0.33.1"}}),
    ("torch.version.hip", [], None, {"engine": {**ENGINE, "hip": "7.1.1"}}),
    ("gpu arch", [], None, {"arch": "gfx1200"}),
    ("model config.json", [], _edit_config, {}),
    ("tensor shape in a safetensors header", [], _reshape, {}),
    ("drafter config.json", [], _drafter_config, {}),
    ("tp", [("tp = 2", "tp = 4")], None, {}),
    ("max_num_seqs", [("max_num_seqs = 8", "max_num_seqs = 16")], None, {}),
    ("max_model_len", [("max_model_len = 4096", "max_model_len = 8192")], None, {}),
    ("max_num_batched_tokens", [("max_num_seqs = 8", "max_num_seqs = 8\nmax_num_batched_tokens = 4096")], None, {}),
    ("dtype", [("max_num_seqs = 8", 'max_num_seqs = 8\ndtype = "float16"')], None, {}),
    ("quantization", [("max_num_seqs = 8", 'max_num_seqs = 8\nquantization = "mxfp4"')], None, {}),
    ("compilation config", [('"--enable-prefix-caching"', '"--enable-prefix-caching", "-cc", \'{"mode": 3}\'')], None, {}),
    ("an engine argument", [('"--enable-prefix-caching"', '"--enable-prefix-caching", "--kv-cache-dtype", "fp8"')], None, {}),
    ("drafter extra key", [("num_speculative_tokens = 7", "num_speculative_tokens = 7\nextra = { draft_tensor_parallel_size = 1 }")], None, {}),
]


@pytest.mark.parametrize(("factor", "edits", "file_edit", "kwargs"), CHANGES, ids=[c[0] for c in CHANGES])
def test_each_factor_changes_the_key(
    tmp_path: Path, base: ConfigKey, factor: str, edits: Sequence[tuple[str, str]],
    file_edit: Callable[[Path], None] | None, kwargs: dict[str, Any],
) -> None:
    if file_edit is not None:
        file_edit(tmp_path)
    changed = key_of(rocm_seat(tmp_path, *edits, name="other.toml"), **kwargs)
    assert changed.digest != base.digest, factor
    assert diff_factors(base.factors, changed.factors), factor


def _weight_byte(tmp_path: Path) -> None:
    path = tmp_path / "models" / "target" / "model-00002-of-00002.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the last weight byte: header and size unchanged
    path.write_bytes(bytes(data))


NEUTRAL: list[tuple[str, Sequence[tuple[str, str]], Callable[[Path], None] | None]] = [
    ("NCCL_PROTO", [('NCCL_PROTO = "Simple"', 'NCCL_PROTO = "LL128"')], None),
    ("VLLM_LOGGING_LEVEL", [('VLLM_LOGGING_LEVEL = "INFO"', 'VLLM_LOGGING_LEVEL = "DEBUG"')], None),
    ("HIP_VISIBLE_DEVICES", [('NCCL_PROTO = "Simple"', 'NCCL_PROTO = "Simple"\nHIP_VISIBLE_DEVICES = "2,3"')], None),
    ("VLLM_PORT", [('NCCL_PROTO = "Simple"', 'NCCL_PROTO = "Simple"\nVLLM_PORT = "1234"')], None),
    ("HF_TOKEN", [('NCCL_PROTO = "Simple"', 'NCCL_PROTO = "Simple"\nHF_TOKEN = "secret"')], None),
    ("--port extra arg", [('"9999"', '"9998"')], None),
    ("port_base", [("port_base = 8000", "port_base = 9000")], None),
    ("gpu_memory_utilization", [("max_num_seqs = 8", "max_num_seqs = 8\ngpu_memory_utilization = 0.9")], None),
    ("readiness timeout", [("[env]", "[readiness]\ntimeout_s = 60\n\n[env]")], None),
    ("a weight byte", [], _weight_byte),
]


@pytest.mark.parametrize(("what", "edits", "file_edit"), NEUTRAL, ids=[n[0] for n in NEUTRAL])
def test_neutral_changes_keep_the_key(
    tmp_path: Path, base: ConfigKey, what: str, edits: Sequence[tuple[str, str]],
    file_edit: Callable[[Path], None] | None,
) -> None:
    if file_edit is not None:
        file_edit(tmp_path)
    same = key_of(rocm_seat(tmp_path, *edits, name="other.toml"))
    assert same.digest == base.digest, (what, [c.describe() for c in diff_factors(base.factors, same.factors)])


def test_weight_byte_really_changed(tmp_path: Path, base: ConfigKey) -> None:
    path = tmp_path / "models" / "target" / "model-00002-of-00002.safetensors"
    before = path.read_bytes()
    _weight_byte(tmp_path)
    assert path.read_bytes() != before and len(path.read_bytes()) == len(before)


def test_unclassified_variable(tmp_path: Path) -> None:
    """Refused when the seat loads (one rule for key, launch and systemd render)."""
    models(tmp_path)
    with pytest.raises(ConfigError) as info:
        rocm_seat(tmp_path, ('NCCL_PROTO = "Simple"', 'NCCL_PROTO = "Simple"\nMY_FEATURE = "1"'))
    assert str(info.value) == (
        f"{tmp_path / 'seat.toml'}:29: key 'env.MY_FEATURE': environment variable 'MY_FEATURE' "
        "is not classified: rocmseat cannot tell whether it changes compiled graphs"
    )
    assert info.value.hint is not None
    assert 'key = ["MY_FEATURE"]' in info.value.hint and 'neutral = ["MY_FEATURE"]' in info.value.hint


def test_seat_classes_classify(tmp_path: Path) -> None:
    models(tmp_path)
    seat = rocm_seat(
        tmp_path,
        ('NCCL_PROTO = "Simple"', 'NCCL_PROTO = "Simple"\nMY_FEATURE = "1"\nMY_LOG = "x"'),
        ('key = ["RADIANCE_*"]', 'key = ["RADIANCE_*", "MY_FEATURE"]\nneutral = ["MY_LOG*"]'),
    )
    key = key_of(seat)
    assert key.factors["env"] == {"MY_FEATURE": "1", "RADIANCE_MXFP4": "1"}


def test_factors_listing(base: ConfigKey) -> None:
    assert base.factors["speculative"] == {
        "method": "dflash", "num_speculative_tokens": 7,
        "num_speculative_tokens_per_batch_size": [[1, 4, 7], [5, 1024, 0]], "extra": {},
    }
    assert base.factors["env"] == {"RADIANCE_MXFP4": "1"}
    assert base.factors["engine_args"] == ["--enable-prefix-caching"]
    assert base.factors["gpu_arch"] == "gfx1201"
    assert len(base.digest) == 64


def test_split_engine_args() -> None:
    args, compilation = split_engine_args([
        "--port", "1", "--enforce-eager", "-cc.mode", "3", "--compilation-config={\"cudagraph-mode\": \"FULL\"}",
        "--served-model-name=x", "--block-size", "32",
    ])
    assert args == ["--enforce-eager", "--block-size", "32"]
    assert compilation == {"mode": "3", "cudagraph_mode": "FULL"}
    # vLLM reads --compilation_config and --served_model_name as the dashed flags
    # (vllm/utils/argparse_utils.py): the same factors, the same neutral flags.
    args, compilation = split_engine_args([
        "--served_model_name", "x", "--compilation_config.mode=3", "--enforce-eager",
    ])
    assert args == ["--enforce-eager"] and compilation == {"mode": "3"}


def _probe_runner(stdout: str, rc: int = 0) -> Callable[..., Completed]:
    def runner(argv: Sequence[str], **_: Any) -> Completed:
        return Completed(tuple(argv), rc, stdout, "boom" if rc else "")
    return runner


def test_replica_key_gathers(tmp_path: Path, base: ConfigKey) -> None:
    seat = rocm_seat(tmp_path, name="other.toml")
    key = replica_key(seat, "r0", "gfx1201", _probe_runner(json.dumps(ENGINE)))
    assert key.digest == base.digest


def test_replica_key_cpu_arch(tmp_path: Path) -> None:
    models(tmp_path)
    seat = rocm_seat(tmp_path, ('backend = "rocm"', 'backend = "cpu"'), ("tp = 2", "tp = 1"))
    key = replica_key(seat, "r0", None, _probe_runner(json.dumps(ENGINE)))
    assert key.factors["gpu_arch"].startswith("cpu-")


def test_replica_key_engine_python_fails(tmp_path: Path) -> None:
    models(tmp_path)
    from rocmseat.errors import CommandError
    with pytest.raises(CommandError, match="boom"):
        replica_key(rocm_seat(tmp_path), "r0", "gfx1201", _probe_runner("", rc=1))


# ----- secrets in factors (review of issue 10, defect 4) --------------------------------------


def test_secret_values_are_sealed_but_still_key() -> None:
    from rocmseat.cache.key import SECRET_PREFIX, redact_why, seal, seal_argv, seal_factors

    sealed = seal_argv(["--hf-token", "hf_abc", "--api-key=sk-1", "--tokenizer", "t",
                        "--kv-url", "http://u:pw@h/x", "--max-num-batched-tokens", "8"])
    assert sealed[0] == "--hf-token" and sealed[1] == seal("hf_abc")
    assert sealed[2] == "--api-key=" + seal("sk-1")
    assert sealed[3:5] == ["--tokenizer", "t"]  # a word that only contains "token" is no secret
    assert sealed[6] == seal("http://u:pw@h/x")  # URL userinfo
    assert sealed[7:] == ["--max-num-batched-tokens", "8"]
    assert seal(seal("x")) == seal("x") and seal("x").startswith(SECRET_PREFIX)
    assert seal("x") != seal("y")
    factors = {"env": {"RADIANCE_API_KEY": "sk-2", "RADIANCE_X": "1"},
               "speculative": {"extra": {"auth_token": "t0", "n": 3}}, "tp": 2}
    once = seal_factors(factors)
    assert once == seal_factors(once)  # idempotent: old and new manifests compare alike
    assert once["env"] == {"RADIANCE_API_KEY": seal("sk-2"), "RADIANCE_X": "1"}
    assert once["speculative"]["extra"] == {"auth_token": seal("t0"), "n": 3}
    assert redact_why("changed: env.RADIANCE_API_KEY: sk-a -> sk-b; tp: 1 -> 2") == (
        "changed: env.RADIANCE_API_KEY: <redacted> -> <redacted>; tp: 1 -> 2")


def test_a_changed_secret_changes_the_key_without_saying_it(tmp_path: Path) -> None:
    models(tmp_path)
    def seat(token: str, key: str, name: str) -> Seat:
        return rocm_seat(tmp_path, ('"--enable-prefix-caching"',
                                    f'"--enable-prefix-caching", "--hf-token", "{token}"'),
                         ('RADIANCE_MXFP4 = "1"', f'RADIANCE_MXFP4 = "1"\nRADIANCE_API_KEY = '
                          f'"{key}"'), name=name)

    one, two = seat("hf_one", "sk-one", "one.toml"), seat("hf_two", "sk-two", "two.toml")
    first, second = key_of(one), key_of(two)
    assert first.digest != second.digest
    assert key_of(one).digest == first.digest
    text = json.dumps(first.factors) + json.dumps(second.factors)
    assert "sk-one" not in text and "hf_two" not in text
    changes = [c.describe() for c in diff_factors(first.factors, second.factors)]
    assert changes and not any("sk-" in c or "hf_" in c for c in changes)


def test_no_key_of_a_multi_key_api_key_flag_is_a_key_factor():
    """`--api-key k1 k2` kept k2 as an engine arg, so it reached the manifest in clear."""
    from rocmseat.cache.key import split_engine_args

    kept, _ = split_engine_args(["--api-key", "k1", "k2", "--max-num-seqs", "8"])
    assert "k1" not in kept and "k2" not in kept and kept == ["--max-num-seqs", "8"]
