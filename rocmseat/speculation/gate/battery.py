"""The battery one arm runs: which `vllm bench serve` runs, with which arguments (pure).

Per arm, in this order (docs/spec.md "The battery"):

1. `cold_ttft`: the first long request after the start (random tokens, one request, no warmup);
2. `warm_ttft`: more long requests of other random prompts (no shared prefix): the warm TTFT and
   the TTFT noise of the arm;
3. `decode@c` for each concurrency c, `repeats` times: the shipped realistic prompt file
   (`custom` dataset), greedy (`--temperature 0`), fixed output length (`--ignore-eos`);
   c = 1 is the single-stream figure;
4. `prefix`: the `prefix_repetition` dataset, `repeats` times: the prefix-cache hit rate from
   the /metrics deltas around it.

Random prompts misstate speculation (NVIDIA's SPEED-Bench: ~23 % throughput overestimate), so
decode and acceptance use the realistic prompt file; random prompts serve TTFT and the prefix
cache only. Every run has the same seed on every arm: both arms see the same prompts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rocmseat.errors import ConfigError
from rocmseat.speculation.gate.settings import Battery

PROMPTS_FILE = Path(__file__).resolve().parent / "data" / "prompts.jsonl"
TTFT_OUTPUT_TOKENS = 8
PREFIX_OUTPUT_TOKENS = 16
PREFIX_NUM_PREFIXES = 2
# The longest shipped prompt is ~40 words; with a chat template it stays under this many tokens.
PROMPT_ALLOWANCE_TOKENS = 96
MIN_LONG_TOKENS = 16
MIN_OUTPUT_TOKENS = 8
DEFAULT_OUTPUT_TOKENS = Battery().output_tokens


class BatteryError(ConfigError):
    """The battery does not fit the seat (exit 2). `key` is the seat key to change:
    `serve.max_model_len`, or the `[gate]` size that is too small."""

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(f"key '{key}': {message}")
        self.key = key
        self.why = message


_CACHE_INFO = re.compile(r'^vllm:cache_config_info\{(?P<labels>[^}]*)\}', re.MULTILINE)
_BLOCK = re.compile(r'(?:^|,)block_size="(?P<n>\d{1,7})"')


def block_size_from_page(text: str) -> int | None:
    """The KV block size the engine runs with, from `vllm:cache_config_info{block_size=...}`
    (vllm/v1/metrics/loggers.py: every CacheConfig field as a label). Prefix caching reuses
    full blocks only, so a shared prefix shorter than one block never hits."""
    m = _CACHE_INFO.search(text)
    if m is None:
        return None
    b = _BLOCK.search(m.group("labels"))
    return int(b.group("n")) if b is not None and int(b.group("n")) > 0 else None


@dataclass(frozen=True, slots=True)
class RunSpec:
    phase: str  # cold_ttft, warm_ttft, decode, prefix
    concurrency: int
    repeat: int
    args: tuple[str, ...]  # dataset and load arguments of vllm bench serve
    num_prompts: int
    output_tokens: int

    @property
    def name(self) -> str:
        return f"{self.phase}-c{self.concurrency}-r{self.repeat}"


def sizes(battery: Battery, max_model_len: int) -> tuple[int, int]:
    """(long prompt tokens, decode output tokens) that fit the seat's max_model_len."""
    long_room = max_model_len - TTFT_OUTPUT_TOKENS - 8
    output_room = max_model_len - PROMPT_ALLOWANCE_TOKENS
    # a size that was asked for is never clamped silently (issue 18): only the defaults (3/4 of
    # max_model_len, 256 output tokens) shrink to what the seat holds
    if battery.long_prompt_tokens is not None and battery.long_prompt_tokens > long_room:
        raise BatteryError(f"{battery.long_prompt_tokens} prompt tokens do not fit max_model_len "
                           f"{max_model_len} (at most {long_room}, leaving room for "
                           f"{TTFT_OUTPUT_TOKENS} output tokens)", key="gate.long_prompt_tokens")
    if battery.output_tokens != DEFAULT_OUTPUT_TOKENS and battery.output_tokens > output_room:
        raise BatteryError(f"{battery.output_tokens} output tokens do not fit max_model_len "
                           f"{max_model_len} (at most {output_room}, leaving "
                           f"{PROMPT_ALLOWANCE_TOKENS} for the prompt)", key="gate.output_tokens")
    long_tokens = min(battery.long_prompt_tokens or int(max_model_len * 0.75), long_room)
    output = min(battery.output_tokens, output_room)
    if battery.long_prompt_tokens is not None and battery.long_prompt_tokens < MIN_LONG_TOKENS:
        raise BatteryError(f"{battery.long_prompt_tokens} tokens is too short for the TTFT runs "
                           f"(at least {MIN_LONG_TOKENS})", key="gate.long_prompt_tokens")
    if battery.output_tokens < MIN_OUTPUT_TOKENS:
        raise BatteryError(f"{battery.output_tokens} tokens is too short for the decode runs "
                           f"(at least {MIN_OUTPUT_TOKENS})", key="gate.output_tokens")
    if long_tokens < MIN_LONG_TOKENS or output < MIN_OUTPUT_TOKENS:
        raise BatteryError(
            f"{max_model_len} is too small for the gate's battery: it leaves {long_tokens} "
            f"prompt tokens for the TTFT runs (at least {MIN_LONG_TOKENS}) and {max(output, 0)} "
            f"output tokens for the decode runs (at least {MIN_OUTPUT_TOKENS})",
            key="serve.max_model_len")
    return long_tokens, output


def prefix_sizes(long_tokens: int, max_model_len: int,
                 block_size: int | None) -> tuple[int, int] | None:
    """(shared prefix, suffix) tokens of the prefix-cache runs: at least one full KV block of
    shared prefix, inside max_model_len; None when no full block fits."""
    suffix = max(4, min(long_tokens // 4, 64))
    room = max_model_len - suffix - PREFIX_OUTPUT_TOKENS - 8
    prefix = min(max(long_tokens // 2, block_size or 0), room)
    if prefix < max(block_size or 16, 8):
        return None
    return prefix, suffix


def plan(battery: Battery, max_model_len: int, prompts_file: Path = PROMPTS_FILE, *,
         block_size: int | None = None) -> list[RunSpec]:
    long_tokens, output = sizes(battery, max_model_len)
    runs = _all_runs(battery, max_model_len, prompts_file, long_tokens=long_tokens,
                     output=output, block_size=block_size)
    return [r for r in runs if r.phase in battery.phases]


def _all_runs(battery: Battery, max_model_len: int, prompts_file: Path, *, long_tokens: int,
              output: int, block_size: int | None) -> list[RunSpec]:
    runs = [
        RunSpec("cold_ttft", 1, 0, (
            "--dataset-name", "random", "--random-input-len", str(long_tokens),
            "--random-output-len", str(TTFT_OUTPUT_TOKENS), "--num-prompts", "1",
            "--max-concurrency", "1", "--num-warmups", "0", "--save-detailed", "--seed", "1000",
        ), 1, TTFT_OUTPUT_TOKENS),
        RunSpec("warm_ttft", 1, 0, (
            "--dataset-name", "random", "--random-input-len", str(long_tokens),
            "--random-output-len", str(TTFT_OUTPUT_TOKENS), "--num-prompts",
            str(battery.warm_ttft_samples), "--max-concurrency", "1", "--num-warmups", "0",
            "--save-detailed", "--seed", "2000",
        ), battery.warm_ttft_samples, TTFT_OUTPUT_TOKENS),
    ]
    for repeat in range(battery.repeats):
        for c in battery.concurrency:
            prompts = max(battery.prompts, 4 * c)
            runs.append(RunSpec("decode", c, repeat, (
                "--dataset-name", "custom", "--dataset-path", str(prompts_file),
                "--custom-output-len", str(output), "--num-prompts", str(prompts),
                "--max-concurrency", str(c), "--request-rate", "inf", "--num-warmups", str(c),
                "--seed", "3000",
            ), prompts, output))
    sized = prefix_sizes(long_tokens, max_model_len, block_size)
    if sized is None:
        return runs  # the prefix-cache gate is then UNKNOWN, and says why
    prefix_len, suffix_len = sized
    c_prefix = min(4, max(battery.concurrency))
    prefix_prompts = max(8, 2 * c_prefix)
    for repeat in range(battery.repeats):
        runs.append(RunSpec("prefix", c_prefix, repeat, (
            "--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len",
            str(prefix_len), "--prefix-repetition-suffix-len", str(suffix_len),
            "--prefix-repetition-num-prefixes", str(PREFIX_NUM_PREFIXES),
            "--prefix-repetition-output-len", str(PREFIX_OUTPUT_TOKENS), "--num-prompts",
            str(prefix_prompts), "--max-concurrency", str(c_prefix), "--seed",
            str(4000 + repeat),
        ), prefix_prompts, PREFIX_OUTPUT_TOKENS))
    return runs


def bench_argv(run: RunSpec, *, base_url: str, model: str, served_name: str, result_dir: Path,
               arm: str, k: int) -> list[str]:
    """The whole `vllm bench serve` argument list of one run."""
    return [
        "--backend", "vllm", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", model, "--served-model-name", served_name,
        *run.args,
        "--temperature", "0", "--ignore-eos",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--result-dir", str(result_dir), "--result-filename",
        f"{run.name}.json", "--disable-tqdm",
        "--metadata", f"rocmseat_arm={arm}", f"rocmseat_phase={run.phase}",
        f"rocmseat_repeat={run.repeat}", f"rocmseat_k={k}",
    ]
