"""The seat the benches start on the vLLM CPU engine (bench_advise, bench_interleave): one
template, so the two measure the same engine settings unless a bench says otherwise."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

_SEAT = """\
name = "{name}"
backend = "cpu"
tp = 1
cache_root = "{out}/seat-cache"

[engine]
command = ["{python}", "-m", "vllm.entrypoints.openai.api_server"]
model_flag = "--model"
python = "{python}"
host = "127.0.0.1"

[model]
path = "{target}"
served_name = "demo"

[serve]
port_base = {port}
max_model_len = 512
max_num_seqs = {max_num_seqs}
dtype = "bfloat16"

[env]
VLLM_CPU_KVCACHE_SPACE = "{kv_cache_gib}"
{env}
[preflight]
refuse_on_fail = false
hip = false

[readiness]
timeout_s = 600
"""


def cpu_seat_text(*, name: str, out: Path, python: str | Path, target: Path, port: int,
                  max_num_seqs: int = 16, kv_cache_gib: int = 1,
                  env: Mapping[str, str] | None = None, neutral: Sequence[str] = ()) -> str:
    """The seat file's text; `env` adds variables, `neutral` names those of them that do not
    change compiled graphs ([env_classes], docs/seat.md)."""
    extra = "".join(f"{key} = {json.dumps(value)}\n" for key, value in (env or {}).items())
    if neutral:
        extra += f"\n[env_classes]\nneutral = {json.dumps(list(neutral))}\n"
    return _SEAT.format(name=name, out=out, python=python, target=target, port=port,
                        max_num_seqs=max_num_seqs, kv_cache_gib=kv_cache_gib, env=extra)
