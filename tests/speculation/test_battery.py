"""The battery's runs and their vllm bench serve arguments
(rocmseat/speculation/gate/battery.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rocmseat.speculation.gate.battery import (
    PROMPTS_FILE,
    BatteryError,
    bench_argv,
    plan,
    prefix_sizes,
    sizes,
)
from rocmseat.speculation.gate.settings import Battery


def test_the_shipped_prompt_file():
    import json

    lines = PROMPTS_FILE.read_text().splitlines()
    prompts = [json.loads(line)["prompt"] for line in lines]
    assert len(prompts) >= 40 and len(set(prompts)) == len(prompts)
    assert max(len(p.split()) for p in prompts) < 40  # fits PROMPT_ALLOWANCE_TOKENS


def test_default_battery_order_and_sizes():
    runs = plan(Battery(), 4096, block_size=16)
    phases = [r.phase for r in runs]
    assert phases[:2] == ["cold_ttft", "warm_ttft"]
    assert phases.count("decode") == 3 * 4 and phases.count("prefix") == 3
    decode = [r for r in runs if r.phase == "decode"]
    assert [r.concurrency for r in decode[:4]] == [1, 4, 16, 64]
    assert decode[3].num_prompts == 256  # 4 c requests at concurrency 64
    assert "--num-warmups" in decode[3].args and decode[3].args[
        decode[3].args.index("--num-warmups") + 1] == "64"
    cold = runs[0]
    assert cold.args[cold.args.index("--random-input-len") + 1] == str(int(4096 * 0.75))
    assert "--save-detailed" in cold.args and cold.num_prompts == 1
    assert len({r.name for r in runs}) == len(runs)


def test_prefix_runs_share_at_least_one_full_kv_block():
    # vLLM's CPU build uses 128-token blocks: a 96-token shared prefix never hits (it did on the
    # first CI-sized gates: hit rate 0.000 on both arms with 1152 queried tokens)
    prefix, suffix = prefix_sizes(192, 256, 128)
    assert prefix >= 128 and prefix + suffix + 16 <= 256
    assert prefix_sizes(192, 256, None) == (96, 48)
    assert prefix_sizes(100, 150, 128) is None  # no full block fits: the gate says UNKNOWN
    runs = plan(replace(Battery(), concurrency=(1, 4), repeats=2), 256, block_size=128)
    prefix_runs = [r for r in runs if r.phase == "prefix"]
    assert len(prefix_runs) == 2
    args = prefix_runs[0].args
    assert int(args[args.index("--prefix-repetition-prefix-len") + 1]) >= 128
    assert [r.args[r.args.index("--seed") + 1] for r in prefix_runs] == ["4000", "4001"]
    assert not any(r.phase == "prefix" for r in plan(Battery(), 150, block_size=128))


def test_sizes_fit_max_model_len():
    long_tokens, output = sizes(Battery(), 256)
    assert long_tokens + 8 <= 256 and output == 256 - 96
    with pytest.raises(BatteryError, match="too small"):
        sizes(Battery(), 64)


def test_phases_can_be_chosen():
    runs = plan(replace(Battery(), phases=("decode",), concurrency=(1, 4), repeats=2), 512)
    assert {r.phase for r in runs} == {"decode"} and len(runs) == 4


def test_bench_argv():
    run = plan(replace(Battery(), concurrency=(4,), repeats=1), 512)[2]
    argv = bench_argv(run, base_url="http://127.0.0.1:8110", model="/m/target", served_name="demo",
                      result_dir=Path("/out/arms/base/results"), arm="base", k=0)
    assert argv[argv.index("--base-url") + 1] == "http://127.0.0.1:8110"  # the root, not /v1
    assert argv[argv.index("--served-model-name") + 1] == "demo"
    assert argv[argv.index("--tokenizer") + 1] == "/m/target"
    assert argv[argv.index("--temperature") + 1] == "0" and "--ignore-eos" in argv
    assert argv[argv.index("--result-filename") + 1] == "decode-c4-r0.json"
    # --metadata takes every following word: it must come last
    assert argv[argv.index("--metadata"):] == [
        "--metadata", "rocmseat_arm=base", "rocmseat_phase=decode", "rocmseat_repeat=0",
        "rocmseat_k=0"]
