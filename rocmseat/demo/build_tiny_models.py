"""Build the tiny local models of the CPU demo seat: a target and two drafters.

This file is a standalone program run by the *engine's* Python (the venv that has torch,
transformers and tokenizers), through rocmseat.runner; rocmseat itself never imports torch.
Usage:

    ENGINE_PYTHON build_tiny_models.py DEST

writes DEST/target, DEST/drafter (the target's own weights: vLLM accepts every drafted token)
and DEST/drafter-other (same shapes, another seed: vLLM accepts almost none; the "drafter that
lost its mind"). Prints one JSON document describing what it wrote on stdout.

Shapes follow docs/demo.md: head_dim must be >= 32 on vLLM's CPU
attention (hidden 64 / 4 heads failed with "Unsupported CPU attention configuration:
head_dim=16"), so hidden 256 / 4 heads = 64.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

TARGET_SEED = 1234
OTHER_SEED = 4321
SPECIALS = ("<unk>", "<s>", "</s>")
VOCAB_SIZE = 256
# 253 ordinary words + 3 specials = a 256-word vocabulary, the model's vocab_size.
WORD_TEXT = """
the of and to in is was for on that with as by at from it an be this are or his which had
not but have they one you were her all she there would their we him been has when who will
more no if out so said what up its about into than them can only other new some could time
these two may then do first any my now such like our over man me even most made after also
did many before must through back years where much your way well down should because each
just those people how too little state good very make world still own see men work long get
here between both life being under never day same another know while last might us great old
year off come since against go came right used take three states himself few house use during
without again place around however home small found thought went say part once general high
upon school every don does got united left number course war until always away something fact
though water less public put think almost hand enough far took head yet government system
better set told nothing night end why called didn eyes find going look asked later knew point
next city business give group toward young let room president side social given present order
national possible rather second face per among form important often things looked early white
case john become large big need four within felt along children saw best church ever least
power development light thing seemed family interest want members mind country area others done
turned although open god service certain kind problem began different door thus help means sense
whole matter perhaps itself york times human law line above name example action company hands
"""


# The modules both builders import, and the status a builder exits with when one is missing
# (rocmseat reads it as "the given Python is not the engine's": a usage error).
NEEDED = ("torch", "transformers", "tokenizers")
MISSING_MODULES_EXIT = 3


def missing_modules() -> int | None:
    """Say which of NEEDED this Python lacks (stderr) and return MISSING_MODULES_EXIT, or None."""
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    print(f"{sys.executable} has no {', '.join(missing)} (the demo model builders need "
          f"{', '.join(NEEDED)})", file=sys.stderr)
    return MISSING_MODULES_EXIT


def _lib(name: str) -> Any:
    # Imported by name so rocmseat's own type check (mypy strict, no torch stubs) never sees them.
    return importlib.import_module(name)


def build_tokenizer(dest: Path) -> None:
    tokenizers = _lib("tokenizers")
    transformers = _lib("transformers")
    words = list(dict.fromkeys(WORD_TEXT.split()))[: VOCAB_SIZE - len(SPECIALS)]
    if len(words) != VOCAB_SIZE - len(SPECIALS):
        raise SystemExit(f"word list too short: {len(words)} words")
    vocab = {token: i for i, token in enumerate((*SPECIALS, *words))}
    model = tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    # Decoding joins words with spaces, so completions read as text.
    tok.decoder = tokenizers.decoders.WordPiece(prefix="##")
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        model_max_length=512,
    )
    fast.chat_template = (
        "{% for message in messages %}{{ message['content'] }} {% endfor %}"
    )
    fast.save_pretrained(str(dest))


def build_model(dest: Path, seed: int) -> None:
    torch = _lib("torch")
    transformers = _lib("transformers")
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        torch_dtype="bfloat16",
    )
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(dest), safe_serialization=True)
    build_tokenizer(dest)


def describe(folder: Path) -> dict[str, Any]:
    files = {}
    for path in sorted(folder.iterdir()):
        if path.is_file():
            files[path.name] = {
                "size_bytes": path.stat().st_size,
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            }
    return {"path": str(folder), "files": files}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: build_tiny_models.py DEST", file=sys.stderr)
        return 2
    if (status := missing_modules()) is not None:
        return status
    dest = Path(argv[1])
    plan = {"target": TARGET_SEED, "drafter": TARGET_SEED, "drafter-other": OTHER_SEED}
    built = {}
    for name, seed in plan.items():
        folder = dest / name
        folder.mkdir(parents=True, exist_ok=True)
        build_model(folder, seed)
        built[name] = {"seed": seed, **describe(folder)}
    torch = _lib("torch")
    transformers = _lib("transformers")
    print(
        json.dumps(
            {
                "schema": "rocmseat.demo-models/v1",
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "models": built,
            },
            indent=2,
            sort_keys=True,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
