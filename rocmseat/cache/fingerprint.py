"""Model identity without reading weight bytes.

A checkpoint's graph-relevant identity is its config files (architecture, dtype, quantization,
rope, vocabulary), its tokenizer files, and the safetensors headers: the JSON header maps every
tensor to dtype, shape and byte range, so a changed shape or dtype changes the header. Weight
bytes are graph *inputs*, not constants (VllmConfig.compute_hash, vLLM 0.33.0), so they are
not read: a safetensors file is its 8-byte little-endian header length, the header, and its size.
Format: https://github.com/huggingface/safetensors ("Format").
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.errors import ParseError, ReadError

# Small files hashed whole: configs, tokenizer, chat template, custom model code
# (trust_remote_code modules change the traced graph).
CONFIG_NAMES = frozenset(
    {
        "config.json", "generation_config.json", "tokenizer_config.json", "tokenizer.json",
        "special_tokens_map.json", "tokenizer.model", "vocab.json", "merges.txt",
        "added_tokens.json", "chat_template.jinja", "chat_template.json",
        "preprocessor_config.json", "quant_config.json", "hf_quant_config.json",
        "quantize_config.json", "model.safetensors.index.json", "params.json",
    }
)
CONFIG_SUFFIXES = (".py",)
OTHER_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".gguf", ".npz")
# The safetensors reference implementation refuses headers above 100 MB.
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    size_bytes: int
    header_sha256: str
    tensor_count: int


def read_safetensors_header(path: Path) -> SafetensorsHeader:
    """Read the header of one .safetensors file: 8 bytes, then the JSON header, nothing else."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise ParseError(path, prefix.hex(), "shorter than a safetensors header length")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES or length + 8 > size:
                raise ParseError(
                    path, str(length), f"safetensors header length does not fit a {size}-byte file"
                )
            header = handle.read(length)
    except OSError as exc:
        raise ReadError(path, exc.strerror or str(exc)) from None
    try:
        parsed = json.loads(header)
    except (UnicodeDecodeError, ValueError) as exc:
        shown = header[:80].decode("utf-8", "replace")
        raise ParseError(path, shown, f"bad header JSON: {exc}") from None
    except RecursionError:
        shown = header[:80].decode("utf-8", "replace")
        raise ParseError(path, shown, "bad header JSON: nested too deeply") from None
    if not isinstance(parsed, dict):
        raise ParseError(path, header[:80].decode("utf-8", "replace"), "header is not an object")
    tensors = sum(1 for name in parsed if name != "__metadata__")
    return SafetensorsHeader(size, hashlib.sha256(header).hexdigest(), tensors)


def fingerprint_model(model_dir: Path) -> dict[str, Any]:
    """The identity factors of a checkpoint directory (top level; HF layout).

    Returns {"config_files": {name: sha256}, "safetensors": {name: {size_bytes, header_sha256,
    tensors}}, "other_weights": {name: size_bytes}}. A missing or unreadable directory raises
    ReadError; a checkpoint with neither config.json nor weights raises ParseError.
    """
    try:
        entries = sorted(os.scandir(model_dir), key=lambda e: e.name)
    except OSError as exc:
        raise ReadError(model_dir, exc.strerror or str(exc)) from None
    config_files: dict[str, str] = {}
    safetensors: dict[str, dict[str, Any]] = {}
    other: dict[str, int] = {}
    for entry in entries:
        if not entry.is_file():
            continue
        path = Path(entry.path)
        name = entry.name
        if name.endswith(".safetensors"):
            header = read_safetensors_header(path)
            safetensors[name] = {
                "size_bytes": header.size_bytes,
                "header_sha256": header.header_sha256,
                "tensors": header.tensor_count,
            }
        elif name in CONFIG_NAMES or name.endswith(CONFIG_SUFFIXES):
            config_files[name] = _sha256_file(path)
        elif name.endswith(OTHER_WEIGHT_SUFFIXES):
            other[name] = entry.stat().st_size
    if "config.json" not in config_files and not safetensors and not other:
        raise ParseError(model_dir, "", "no config.json and no weights: not a model checkpoint")
    return {"config_files": config_files, "safetensors": safetensors, "other_weights": other}


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:
        raise ReadError(path, exc.strerror or str(exc)) from None
    return digest.hexdigest()
