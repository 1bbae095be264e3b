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


# GGUF (llama.cpp's file, ggml/docs/gguf.md "File Structure"): magic, version, tensor count, KV
# count, the KV metadata, the tensor infos (name, dims, type, offset), padding, then the tensor
# data. The identity is everything before the data: architecture, hyper-parameters, tokenizer,
# every tensor's name, shape and type (a drafter with other weights keeps it: weight bytes are
# inputs, as for safetensors).
_GGUF_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


class _GgufCursor:
    def __init__(self, handle: Any, path: Path) -> None:
        self.handle, self.path, self.read_bytes = handle, path, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.read_bytes + n > MAX_HEADER_BYTES:
            raise ParseError(self.path, "", f"GGUF header larger than {MAX_HEADER_BYTES:,} bytes")
        data = self.handle.read(n)
        if len(data) != n:
            raise ParseError(self.path, "", "truncated GGUF header")
        self.read_bytes += n
        return bytes(data)

    def u32(self) -> int:
        return int(struct.unpack("<I", self.take(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.take(8))[0])

    def skip_value(self, kind: int, depth: int = 0) -> None:
        if kind in _GGUF_FIXED:
            self.take(_GGUF_FIXED[kind])
        elif kind == _GGUF_STRING:
            self.take(self.u64())
        elif kind == _GGUF_ARRAY and depth < 4:
            item, count = self.u32(), self.u64()
            if item in _GGUF_FIXED:
                self.take(_GGUF_FIXED[item] * count)
            else:
                for _ in range(count):
                    self.skip_value(item, depth + 1)
        else:
            raise ParseError(self.path, "", f"GGUF value type {kind} unknown")


def read_gguf_header(path: Path) -> dict[str, Any]:
    """{size_bytes, header_sha256, tensors} of a GGUF file: the sha256 of the bytes before the
    tensor data (ParseError on a file that is not GGUF)."""
    try:
        with open(path, "rb") as handle:
            cursor = _GgufCursor(handle, path)
            if cursor.take(4) != b"GGUF":
                raise ParseError(path, "", "not a GGUF file (no GGUF magic)")
            version = cursor.u32()
            if version not in (2, 3):
                raise ParseError(path, "", f"GGUF version {version} (rocmseat reads 2 and 3)")
            tensors, kvs = cursor.u64(), cursor.u64()
            for _ in range(kvs):
                cursor.take(cursor.u64())  # the key
                cursor.skip_value(cursor.u32())
            for _ in range(tensors):
                cursor.take(cursor.u64())  # the name
                dims = cursor.u32()
                cursor.take(8 * dims + 4 + 8)  # dims, type, offset
            end = cursor.read_bytes
            handle.seek(0)
            header = handle.read(end)
            size = os.fstat(handle.fileno()).st_size
    except OSError as exc:
        raise ReadError(path, exc.strerror or str(exc)) from None
    return {"size_bytes": size, "header_sha256": hashlib.sha256(header).hexdigest(),
            "tensors": tensors}


def fingerprint_model(model_dir: Path) -> dict[str, Any]:
    """The identity factors of a checkpoint directory (top level; HF layout).

    Returns {"config_files": {name: sha256}, "safetensors": {name: {size_bytes, header_sha256,
    tensors}}, "other_weights": {name: size_bytes}}. A missing or unreadable directory raises
    ReadError; a checkpoint with neither config.json nor weights raises ParseError. A GGUF file
    (a llama.cpp seat's model or drafter) is {"gguf": {name: read_gguf_header(...)}}.
    """
    if model_dir.suffix == ".gguf" and model_dir.is_file():
        return {"gguf": {model_dir.name: read_gguf_header(model_dir)}}
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
