"""Build the speculation demo models: a deep target whose extra layers contribute little, and a
cheap drafter made of its first layer, with an acceptance you can set.

This file is a standalone program run by the *engine's* Python (torch + transformers), through
rocmseat.runner; rocmseat itself never imports torch. Usage:

    ENGINE_PYTHON build_spec_models.py DEST --eps 0.02,0.05 [--acceptance 0.9,0.6] \
        [--prompts FILE.jsonl]

On vLLM's CPU build a drafter the size of its target can never pay: speedup = E(k) / (1 + k c)
with c ~ 1 (issue 12). So the target here is 12 layers of hidden 768 and the drafter is its
first layer (same embeddings, final norm and lm_head): one draft step costs about a fifth of a
target step on the CPU build (measured, docs/demo.md). Layers 1..11 of the target have their
output projections (attention o_proj and MLP down_proj) scaled by `eps`: with eps = 0 the
target's logits are exactly the drafter's (every draft accepted), and the larger eps, the more
often the extra layers change the greedy token (acceptance falls). The compute of the target
does not depend on eps, so every target costs the same per step.

Writes DEST/spec-drafter and DEST/spec-target-eNNNN (one per eps, eps in ten-thousandths).
`--acceptance A,...` asks for targets whose offline greedy agreement with the drafter is about A:
eps is interpolated from a measured grid. The agreement is measured here with transformers on
the prompt file (greedy continuation by the target, then the drafter's argmax on the target's
path): an estimate of the per-token acceptance; the engine's own counters are what count.
Prints one JSON document describing what it wrote on stdout.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.util
import itertools
import json
import math
import sys
from pathlib import Path
from typing import Any


def _sibling(name: str) -> Any:
    """A module beside this file (this program runs as a script, not from the package)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent /
                                                  f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_TINY = _sibling("build_tiny_models")
VOCAB_SIZE: int = _TINY.VOCAB_SIZE
build_tokenizer = _TINY.build_tokenizer

SEED = 2024
HIDDEN = 768
LAYERS = 12
INTERMEDIATE = 2048
HEADS = 12
KV_HEADS = 4
DRAFTER_LAYERS = 1
GRID = (0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15)
AGREEMENT_PROMPTS = 8
AGREEMENT_TOKENS = 32


def _lib(name: str) -> Any:
    # Imported by name so rocmseat's own type check (mypy strict, no torch stubs) never sees them.
    return importlib.import_module(name)


def base_model() -> Any:
    torch = _lib("torch")
    transformers = _lib("transformers")
    torch.manual_seed(SEED)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        torch_dtype="bfloat16",
    )
    return transformers.LlamaForCausalLM(config).to(torch.bfloat16)


def target_with(base: Any, eps: float) -> Any:
    torch = _lib("torch")
    model = copy.deepcopy(base)
    with torch.no_grad():
        for layer in model.model.layers[DRAFTER_LAYERS:]:
            layer.self_attn.o_proj.weight.mul_(eps)
            layer.mlp.down_proj.weight.mul_(eps)
    return model


def drafter_of(base: Any) -> Any:
    model = copy.deepcopy(base)
    model.model.layers = model.model.layers[:DRAFTER_LAYERS]
    model.config.num_hidden_layers = DRAFTER_LAYERS
    return model


def prompt_ids(prompts_file: Path | None, tokenizer_dir: Path) -> list[Any]:
    torch = _lib("torch")
    transformers = _lib("transformers")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir))
    texts: list[str] = []
    if prompts_file is not None:
        for line in prompts_file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                texts.append(json.loads(line)["prompt"])
    if not texts:
        texts = ["the state of the world", "people work here every day"]
    out = []
    for text in texts[:AGREEMENT_PROMPTS]:
        ids = tokenizer(text + " ")["input_ids"][:64]
        out.append(torch.tensor(ids or [3]))
    return out


def agreement(target: Any, drafter: Any, prompts: list[Any]) -> float:
    """Share of the target's greedy tokens that the drafter's argmax predicts (teacher-forced)."""
    torch = _lib("torch")
    agree = total = 0
    with torch.no_grad():
        for ids in prompts:
            out = target.generate(ids[None], max_new_tokens=AGREEMENT_TOKENS, do_sample=False,
                                  pad_token_id=0)
            start = len(ids) - 1
            t = target(out).logits[0, start:-1].argmax(-1)
            d = drafter(out).logits[0, start:-1].argmax(-1)
            agree += int((t == d).sum().item())
            total += len(t)
    return agree / total if total else math.nan


def eps_for(wanted: float, grid: list[tuple[float, float]]) -> float:
    """Interpolate eps for an agreement from a measured (eps, agreement) grid: linear from
    (0, 1.0) (eps 0 makes the target the drafter) to the first point, log-eps after it."""
    points = sorted(grid)
    e0, a0 = points[0]
    if wanted >= a0:
        return e0 * (1.0 - wanted) / max(1.0 - a0, 1e-6)
    for (lo, a_lo), (hi, a_hi) in itertools.pairwise(points):
        if a_hi <= wanted <= a_lo and a_lo != a_hi:
            share = (a_lo - wanted) / (a_lo - a_hi)
            return math.exp(math.log(lo) + share * (math.log(hi) - math.log(lo)))
    return points[-1][0]


def save(model: Any, dest: Path) -> dict[str, Any]:
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(dest), safe_serialization=True)
    build_tokenizer(dest)
    files = {}
    for path in sorted(dest.iterdir()):
        if path.is_file():
            files[path.name] = {"size_bytes": path.stat().st_size,
                                "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    return {"path": str(dest), "files": files}


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def main(argv: list[str]) -> int:
    args = argv[1:]
    if not args or args[0].startswith("-"):
        print("usage: build_spec_models.py DEST [--eps E,..] [--acceptance A,..] "
              "[--prompts FILE]", file=sys.stderr)
        return 2
    if (status := _TINY.missing_modules()) is not None:
        return int(status)
    dest = Path(args[0])
    options = dict(zip(args[1::2], args[2::2], strict=False))
    eps_list = _floats(options.get("--eps", ""))
    wanted = _floats(options.get("--acceptance", ""))
    prompts_file = Path(options["--prompts"]) if "--prompts" in options else None
    torch = _lib("torch")
    torch.set_num_threads(1)
    base = base_model()
    drafter = drafter_of(base)
    saved = save(drafter, dest / "spec-drafter")
    built: dict[str, Any] = {"spec-drafter": {"layers": DRAFTER_LAYERS, **saved}}
    prompts = prompt_ids(prompts_file, dest / "spec-drafter")
    grid: list[tuple[float, float]] = []
    if wanted:
        grid = [(e, agreement(target_with(base, e), drafter, prompts)) for e in GRID]
        eps_list += [round(eps_for(a, grid), 4) for a in wanted]
    for eps in sorted(set(eps_list)):
        target = target_with(base, eps)
        name = f"spec-target-e{round(eps * 10000):04d}"
        built[name] = {"eps": eps, "layers": LAYERS,
                       "offline_agreement": round(agreement(target, drafter, prompts), 4),
                       **save(target, dest / name)}
    print(json.dumps({"schema": "rocmseat.demo-spec-models/v1", "torch": torch.__version__,
                      "grid": [{"eps": e, "offline_agreement": round(a, 4)} for e, a in grid],
                      "models": built}, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
