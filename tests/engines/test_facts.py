"""Per engine: the startup log's memory facts, /health while loading, GGUF identity."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

from rocmseat.cache.fingerprint import fingerprint_model
from rocmseat.engines import by_kind
from rocmseat.errors import ParseError
from rocmseat.launch.readiness import Canary, probe
from rocmseat.launch.startuplog import StartupLogReader

# sglang 0.5.23 model_runner.py and mem_cache/memory_pool.py (the f-strings, filled in)
SGLANG_LOG = [
    "[2026-12-02 10:00:01 TP0] Load weight end. elapsed=12.31 s, type=Qwen3ForCausalLM, "
    "avail mem=41.20 GB, mem usage=15.27 GB.",
    "[2026-12-02 10:00:02 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 412160, "
    "K size: 9.43 GB, V size: 9.43 GB",
]
# llama.cpp src/llama-kv-cache.cpp, src/llama-model.cpp load_tensors (the printf formats)
LLAMA_LOG = [
    "load_tensors:        ROCm0 model buffer size =  7865.42 MiB",
    "load_tensors:   CPU_Mapped model buffer size =   417.66 MiB",
    "llama_kv_cache:      ROCm0 KV buffer size =  2048.00 MiB",
    "llama_kv_cache: size = 2048.00 MiB ( 16384 cells,  32 layers,  4/4 seqs), "
    "K (f16): 1024.00 MiB, V (f16): 1024.00 MiB",
]


@pytest.mark.parametrize("kind, lines, tokens, kv_gib, model_gib", [
    ("sglang", SGLANG_LOG, 412160, 18.86, 15.27),
    ("llamacpp", LLAMA_LOG, 16384, 2.0, 7865.42 / 1024),
])
def test_each_engines_memory_lines_are_startup_facts(kind, lines, tokens, kv_gib, model_gib):
    reader = StartupLogReader((), by_kind(kind))
    events = [e for line in lines for e in reader.feed(line)]
    summary = reader.summary()
    assert summary.kv_cache_tokens == tokens
    assert summary.available_kv_cache_gib == pytest.approx(kv_gib)
    assert summary.model_memory_gib == pytest.approx(model_gib)
    assert {e.kind for e in events} >= {"kv_cache_tokens", "model_memory_gib"}


def test_a_vllm_reader_ignores_other_engines_lines():
    reader = StartupLogReader((), by_kind("vllm"))
    for line in LLAMA_LOG + SGLANG_LOG:
        reader.feed(line)
    assert reader.summary().kv_cache_tokens is None


def test_llama_server_503_while_loading_is_waited_on_and_said():
    engine = by_kind("llamacpp")
    canary = Canary("http://127.0.0.1:1", "tiny", "Hello", 4,
                    loading=engine.readiness.loading_statuses, engine=engine.label)
    result = probe(canary, timeout_s=1.0,
                   fetch=lambda url, body, t, h: (503, b'{"error":{"message":"Loading model"}}'))
    assert not result.ready and result.stage == "health"
    assert result.detail == "/health answered 503 (llama.cpp: still loading)"


def _gguf(path: Path, *, dims: tuple[int, ...], data: bytes) -> Path:
    """A GGUF v3 file (ggml/docs/gguf.md): one string KV, one array KV, one f32 tensor."""
    def string(text: str) -> bytes:
        raw = text.encode()
        return struct.pack("<Q", len(raw)) + raw
    kvs = (string("general.architecture") + struct.pack("<I", 8) + string("llama")
           + string("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + string("a")
           + string("b"))
    tensor = string("blk.0.attn_q.weight") + struct.pack("<I", len(dims)) + b"".join(
        struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", 0, 0)
    header = b"GGUF" + struct.pack("<IQQ", 3, 1, 2) + kvs + tensor
    pad = b"\0" * (-len(header) % 32)
    path.write_bytes(header + pad + data)
    return path


def test_gguf_identity_is_its_header_not_its_weights(tmp_path):
    a = fingerprint_model(_gguf(tmp_path / "a.gguf", dims=(4, 4), data=b"\1" * 64))
    b = fingerprint_model(_gguf(tmp_path / "b.gguf", dims=(4, 4), data=b"\7" * 64))
    c = fingerprint_model(_gguf(tmp_path / "c.gguf", dims=(8, 2), data=b"\1" * 64))
    strip = lambda fp: next(iter(fp["gguf"].values()))  # noqa: E731
    assert strip(a) == strip(b)  # scrambled weights behind the same key
    assert strip(a)["header_sha256"] != strip(c)["header_sha256"]  # another shape
    assert strip(a)["tensors"] == 1
    assert strip(a)["header_sha256"] != hashlib.sha256(
        (tmp_path / "a.gguf").read_bytes()).hexdigest()


def test_a_file_that_is_not_gguf_is_a_parse_error(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1, 10**12))  # claims 10^12 KVs
    with pytest.raises(ParseError):
        fingerprint_model(bad)
    (tmp_path / "x.gguf").write_bytes(b"not gguf at all")
    with pytest.raises(ParseError, match="not a GGUF"):
        fingerprint_model(tmp_path / "x.gguf")
