"""Build the tiny GGUF models of the llama.cpp demo seat: a target and two drafters.

This file is a standalone program run by the *llama.cpp venv's* Python (the `gguf` package,
numpy), through rocmseat.runner; rocmseat itself never imports either. Usage:

    LLAMACPP_PYTHON build_gguf_models.py DEST

writes DEST/gguf-target/model.gguf, DEST/gguf-drafter/model.gguf (the target's own weights:
llama.cpp accepts every drafted token) and DEST/gguf-drafter-other/model.gguf (same shapes and
vocabulary, another seed: it accepts almost none, the "drafter that lost its mind"). Prints one
JSON document describing what it wrote on stdout.

The model is a 2-layer llama (general.architecture "llama", the tensor names of gguf-py's
constants.py MODEL_TENSORS[LLAMA]: token_embd, blk.N.attn_{norm,q,k,v,output},
blk.N.ffn_{norm,gate,up,down}, output_norm, output) in f32, hidden 128, 4 heads of 32, 2 KV
heads, with an SPM ("llama") vocabulary of the three specials and the 256 byte tokens
(`<0xNN>`, token type BYTE), so any text tokenises through llama.cpp's byte fallback
(src/llama-vocab.cpp, llm_tokenizer_spm). About 1.5 MB each; llama.cpp loads one in well under
a second on a CPU.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

TARGET_SEED = 1234
OTHER_SEED = 4321
HIDDEN = 128
LAYERS = 2
FEED_FORWARD = 256
HEADS = 4
KV_HEADS = 2
CONTEXT = 1024
WEIGHT_SCALE = 0.5
NAMES = ("gguf-target", "gguf-drafter", "gguf-drafter-other")
MODEL_FILE = "model.gguf"
NEEDED = ("gguf", "numpy")
MISSING_MODULES_EXIT = 3  # as build_tiny_models.py: "not the Python that has what I need"


def _lib(name: str) -> Any:
    # Imported by name so rocmseat's own type check never sees them.
    return importlib.import_module(name)


def vocabulary() -> tuple[list[str], list[int]]:
    """(tokens, token types): <unk>, <s>, </s>, then the 256 byte tokens (llama.cpp's
    llama_token_type: 2 UNKNOWN, 3 CONTROL, 6 BYTE)."""
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256))]
    types = [2, 3, 3, *([6] * 256)]
    return tokens, types


def write_model(path: Path, seed: int) -> None:
    gguf = _lib("gguf")
    np = _lib("numpy")
    rng = np.random.default_rng(seed)
    tokens, types = vocabulary()
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("rocmseat-demo")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_file_type(0)  # all f32
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)

    def tensor(name: str, *shape: int, ones: bool = False) -> None:
        data = (np.ones(shape, np.float32) if ones
                else (rng.standard_normal(shape) * WEIGHT_SCALE).astype(np.float32))
        writer.add_tensor(name, data)

    head_dim = HIDDEN // HEADS
    tensor("token_embd.weight", len(tokens), HIDDEN)
    tensor("output_norm.weight", HIDDEN, ones=True)
    tensor("output.weight", len(tokens), HIDDEN)
    for i in range(LAYERS):
        tensor(f"blk.{i}.attn_norm.weight", HIDDEN, ones=True)
        tensor(f"blk.{i}.attn_q.weight", HIDDEN, HIDDEN)
        tensor(f"blk.{i}.attn_k.weight", KV_HEADS * head_dim, HIDDEN)
        tensor(f"blk.{i}.attn_v.weight", KV_HEADS * head_dim, HIDDEN)
        tensor(f"blk.{i}.attn_output.weight", HIDDEN, HIDDEN)
        tensor(f"blk.{i}.ffn_norm.weight", HIDDEN, ones=True)
        tensor(f"blk.{i}.ffn_gate.weight", FEED_FORWARD, HIDDEN)
        tensor(f"blk.{i}.ffn_up.weight", FEED_FORWARD, HIDDEN)
        tensor(f"blk.{i}.ffn_down.weight", HIDDEN, FEED_FORWARD)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1].startswith("-"):
        print("usage: build_gguf_models.py DEST", file=sys.stderr)
        return 2
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        print(f"{sys.executable} has no {', '.join(missing)} (the GGUF builder needs "
              f"{', '.join(NEEDED)})", file=sys.stderr)
        return MISSING_MODULES_EXIT
    dest = Path(argv[1])
    built: dict[str, Any] = {}
    for name, seed in zip(NAMES, (TARGET_SEED, TARGET_SEED, OTHER_SEED), strict=True):
        folder = dest / name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / MODEL_FILE
        write_model(path, seed)
        data = path.read_bytes()
        built[name] = {"path": str(folder), "file": str(path), "seed": seed,
                       "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data)}
    print(json.dumps({"schema": "rocmseat.demo-gguf-models/v1",
                      "gguf": importlib.metadata.version("gguf"), "models": built},
                     indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
