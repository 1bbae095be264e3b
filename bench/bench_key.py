"""Benchmark: the config key of a 20 GB, 64-shard model vs sha256 over its bytes.

The model is built from sparse files (real safetensors headers, holes for the weights), so the
benchmark costs no disk; hashing holes still reads 20 GB of zeros through the page cache, which
is the honest baseline for "hash the weights". Budget: well under 100 ms, >= 100x.

    python bench/bench_key.py [--size-gb 20] [--shards 64] [--repeat 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import struct
import tempfile
import time
from pathlib import Path

from rocmseat.cache.fingerprint import fingerprint_model
from rocmseat.cache.key import compute_key
from rocmseat.seat.load import parse_seat

SEAT = """\
name = "bench"
backend = "rocm"
tp = 2
cache_root = "cache"
[engine]
command = ["vllm", "serve"]
python = "/usr/bin/python3"
[model]
path = "{model}"
[serve]
port_base = 8000
max_model_len = 262144
max_num_seqs = 8
"""
ENGINE = {"vllm": "0.33.0", "torch": "2.13.0", "triton": "3.9.0", "hip": "7.2.1"}


def build_sparse_model(directory: Path, size_bytes: int, shards: int) -> None:
    """An HF-layout checkpoint whose shards are real safetensors files with sparse bodies."""
    (directory / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"],
                                                       "hidden_size": 5120}))
    (directory / "generation_config.json").write_text("{}")
    (directory / "tokenizer_config.json").write_text("{}")
    per_shard = size_bytes // shards
    layers_per_shard = 4
    for shard in range(shards):
        header: dict[str, object] = {}
        offset = 0
        tensor_bytes = per_shard // layers_per_shard // 2 * 2
        for layer in range(layers_per_shard):
            elements = tensor_bytes // 2
            name = f"model.layers.{shard * layers_per_shard + layer}.mlp.experts.weight"
            header[name] = {"dtype": "BF16", "shape": [elements // 5120, 5120],
                            "data_offsets": [offset, offset + (elements // 5120) * 5120 * 2]}
            offset += (elements // 5120) * 5120 * 2
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        path = directory / f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        with open(path, "wb") as handle:
            handle.write(struct.pack("<Q", len(raw)))
            handle.write(raw)
            handle.truncate(8 + len(raw) + offset)


def key_once(seat_text: str, model: Path) -> str:
    seat = parse_seat(seat_text, model.parent / "seat.toml")
    return compute_key(seat, engine=ENGINE, gpu_arch="gfx1201",
                       model=fingerprint_model(model), drafter=None).digest


def sha256_bytes(model: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    total = 0
    buffer = bytearray(8 << 20)
    view = memoryview(buffer)
    for path in sorted(model.iterdir()):
        with open(path, "rb", buffering=0) as handle:
            while count := handle.readinto(buffer):
                digest.update(view[:count])
                total += count
    return digest.hexdigest(), total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gb", type=float, default=20.0)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocmseat-bench-") as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        build_sparse_model(model, int(args.size_gb * 1e9), args.shards)
        apparent = sum(p.stat().st_size for p in model.iterdir())
        on_disk = sum(p.stat().st_blocks * 512 for p in model.iterdir())
        seat_text = SEAT.replace("{model}", str(model))
        print(f"model: {args.shards} shards, {apparent / 1e9:.2f} GB apparent, "
              f"{on_disk / 1e6:.2f} MB on disk (sparse)")
        key_once(seat_text, model)  # warm the page cache for the headers, as a second run would
        timings = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            key_once(seat_text, model)
            timings.append(time.perf_counter() - start)
        key_s = statistics.median(timings)
        start = time.perf_counter()
        _, hashed = sha256_bytes(model)
        base_s = time.perf_counter() - start
        print(f"config key (headers + sizes + configs), median of {args.repeat}: "
              f"{key_s * 1000:.1f} ms")
        print(f"baseline sha256 over all {hashed / 1e9:.2f} GB of bytes: {base_s:.2f} s")
        ratio = base_s / key_s
        fast = "met" if key_s < 0.1 else "MISSED"
        hundred = "met" if ratio >= 100 else "MISSED"
        print(f"ratio: {ratio:,.0f}x faster; budget < 100 ms: {fast}, >= 100x: {hundred}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
