"""Builders of model checkpoints, seats and cache trees for the cache tests (no fixtures on disk:
mtimes and sizes are set here, so goldens stay deterministic)."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path

from rocmseat.seat.load import load_seat
from rocmseat.seat.model import Seat

DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "U8": 1}


def write_safetensors(
    path: Path,
    tensors: Mapping[str, tuple[str, Sequence[int]]],
    *,
    fill: int = 0x11,
    sparse: bool = False,
) -> None:
    """A real safetensors file: 8-byte LE header length, JSON header, then the tensor bytes."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        count = 1
        for dim in shape:
            count *= dim
        size = count * DTYPE_BYTES[dtype]
        header[name] = {
            "dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + size]
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes
    with open(path, "wb") as handle:
        handle.write(struct.pack("<Q", len(raw)))
        handle.write(raw)
        if sparse:
            handle.truncate(8 + len(raw) + offset)
        else:
            handle.write(bytes([fill]) * offset)


def write_model(
    directory: Path,
    *,
    hidden: int = 64,
    layers: int = 2,
    shards: int = 2,
    config_extra: Mapping[str, object] | None = None,
) -> Path:
    """A small HF-layout checkpoint: config files, tokenizer config, sharded safetensors."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": hidden,
              "num_hidden_layers": layers, "vocab_size": 256, "torch_dtype": "bfloat16",
              **(config_extra or {})}
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    (directory / "generation_config.json").write_text('{"do_sample": false}')
    (directory / "tokenizer_config.json").write_text('{"model_max_length": 512}')
    for shard in range(shards):
        tensors: dict[str, tuple[str, tuple[int, ...]]] = {
            f"model.layers.{i}.mlp.weight": ("BF16", (hidden, hidden))
            for i in range(layers) if i % shards == shard
        }
        tensors[f"shard{shard}.norm"] = ("BF16", (hidden,))
        write_safetensors(directory / f"model-{shard + 1:05d}-of-{shards:05d}.safetensors", tensors)
    return directory


ROCM_SEAT = """\
name = "t"
backend = "rocm"
tp = 2
cache_root = "cache"

[engine]
command = ["vllm", "serve"]
python = "/nonexistent/python"
image_digest = "sha256:{digest}"

[model]
path = "models/target"

[drafter]
method = "dflash"
path = "models/drafter"
num_speculative_tokens = 7
num_speculative_tokens_per_batch_size = [[1, 4, 7], [5, 1024, 0]]

[serve]
port_base = 8000
max_model_len = 4096
max_num_seqs = 8
extra_args = ["--enable-prefix-caching", "--port", "9999"]

[env]
RADIANCE_MXFP4 = "1"
NCCL_PROTO = "Simple"
VLLM_LOGGING_LEVEL = "INFO"

[env_classes]
key = ["RADIANCE_*"]
"""

DIGEST_A = "a" * 64


def seat_from(tmp_path: Path, text: str, name: str = "seat.toml") -> Seat:
    path = tmp_path / name
    path.write_text(text)
    return load_seat(path)


def rocm_seat(tmp_path: Path, *replacements: tuple[str, str], name: str = "seat.toml") -> Seat:
    text = ROCM_SEAT.replace("{digest}", DIGEST_A)
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    return seat_from(tmp_path, text, name)


def set_tree_mtime(root: Path, when: float) -> None:
    """Every file and directory under root (and root) gets mtime `when`."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            os.utime(os.path.join(dirpath, name), (when, when), follow_symlinks=False)
    os.utime(root, (when, when))


# ----- a cache tree for cache-audit ------------------------------------------------------------
AUDIT_NOW_TS = 1_795_958_400.0  # 2026-11-29T13:20:00Z
DAY = 86400.0

CURRENT_FACTORS: dict[str, object] = {
    "key_schema": 1, "backend": "rocm", "gpu_arch": "gfx1201",
    "engine": {"vllm": "0.33.0", "torch": "2.13.0+rocm7.2", "hip": "7.2.1"},
    "speculative": {"method": "dflash", "num_speculative_tokens": 7},
    "env": {"RADIANCE_MXFP4_MOE": "1"}, "tp": 2,
}


def _manifest(
    directory: Path, factors: Mapping[str, object], created: str,
    replaced: Mapping[str, str] | None = None,
) -> None:
    from rocmseat.cache.key import digest_of

    (directory / "rocmseat-manifest.json").write_text(json.dumps({
        "schema": "rocmseat.cache-manifest/v1", "key": digest_of(dict(factors)),
        "factors": factors, "created": created, "rocmseat_version": "0.1.0",
        "seat": "audit-seat", "replica": directory.name.split(".")[0],
        **({"replaced": dict(replaced)} if replaced is not None else {}),
    }, indent=2, sort_keys=True))


def _files(directory: Path, sizes: Mapping[str, int]) -> None:
    for rel, size in sizes.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x5a" * size)


def build_audit_tree(root: Path) -> dict[str, Path]:
    """The situation of docs/architecture.md incident 3, after rocmseat:

    r0  current cache (in use by pid 4242 through its environment), and beside it the cache
        moved aside 9 days ago because the RADIANCE toggle and the draft length changed;
    r1  a stale live cache (draft length 5 vs 7 now), not yet moved: the next launch will; it
        replaced r1.stale-... 2 days ago when the RADIANCE toggle changed;
    r2  a cache with no manifest (made by hand, unknown provenance);
    r1.stale-... moved aside 2 days ago, a file in it held open by pid 777.
    """
    old = {**CURRENT_FACTORS, "speculative": {"method": "dflash", "num_speculative_tokens": 5},
           "env": {"RADIANCE_MXFP4_MOE": "0"}}
    r1_old = {**CURRENT_FACTORS, "speculative": {"method": "dflash", "num_speculative_tokens": 5}}
    dirs = {
        "r0": root / "r0",
        "r0_stale": root / "r0.stale-20261120T101500Z",
        "r1": root / "r1",
        "r1_stale": root / "r1.stale-20261127T080000Z",
        "r2": root / "r2",
    }
    for path in dirs.values():
        path.mkdir(parents=True)
    _files(dirs["r0"], {"vllm/torch_compile_cache/aa/rank_0_0/model": 3 << 20,
                        "vllm/torch_compile_cache/aa/rank_1_0/model": 3 << 20,
                        "miopen/db/gfx1201.ukdb": 4096})
    _manifest(dirs["r0"], CURRENT_FACTORS, "2026-11-20T10:15:00Z", replaced={
        "moved_to": dirs["r0_stale"].name,
        "why": "changed: env.RADIANCE_MXFP4_MOE: 0 -> 1; "
               "speculative.num_speculative_tokens: 5 -> 7",
    })
    _files(dirs["r0_stale"], {"vllm/torch_compile_cache/bb/rank_0_0/model": 5 << 20,
                              "vllm/torch_compile_cache/bb/rank_1_0/model": 5 << 20})
    _manifest(dirs["r0_stale"], old, "2026-11-01T12:00:00Z")
    _files(dirs["r1"], {"vllm/torch_compile_cache/cc/rank_0_0/model": 2 << 20})
    _manifest(dirs["r1"], r1_old, "2026-11-27T08:00:00Z", replaced={
        "moved_to": dirs["r1_stale"].name, "why": "changed: env.RADIANCE_MXFP4_MOE: 0 -> 1",
    })
    _files(dirs["r1_stale"], {"vllm/torch_compile_cache/dd/rank_0_0/model": 1 << 20})
    _manifest(dirs["r1_stale"], old, "2026-11-02T12:00:00Z")
    _files(dirs["r2"], {"triton/abc/kernel.hsaco": 70_000})
    (root / ".r0.lock").write_text("")
    set_tree_mtime(dirs["r0"], AUDIT_NOW_TS - 600)
    set_tree_mtime(dirs["r0_stale"], AUDIT_NOW_TS - 9 * DAY)
    set_tree_mtime(dirs["r1"], AUDIT_NOW_TS - 1 * DAY)
    set_tree_mtime(dirs["r1_stale"], AUDIT_NOW_TS - 2 * DAY)
    set_tree_mtime(dirs["r2"], AUDIT_NOW_TS - 40 * DAY)
    return dirs
