"""Seat files: the shipped launchers load; every malformed input gives one located error."""

# ruff: noqa: E501  (the table of malformed inputs reads best one case per line)

from __future__ import annotations

from pathlib import Path

import pytest

from rocmseat.errors import ConfigError
from rocmseat.seat.load import load_seat
from tests.conftest import REPO

R9700 = REPO / "launchers" / "r9700-mxfp4-dflash.toml"
DEMO = REPO / "launchers" / "demo-cpu.toml"

MINIMAL = """\
name = "t"
backend = "cpu"
tp = 1
cache_root = "cache"

[engine]
command = ["python", "-m", "vllm.entrypoints.openai.api_server"]
model_flag = "--model"
python = "~/venv/bin/python"

[model]
path = "../models/target"

[drafter]
method = "draft_model"
path = "../models/drafter"
num_speculative_tokens = 3

[serve]
port_base = 8100
max_model_len = 256
max_num_seqs = 4
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "launchers" / "x.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_r9700_seat() -> None:
    seat = load_seat(R9700)
    assert seat.name == "r9700-mxfp4-dflash" and seat.backend == "rocm" and seat.tp == 2
    assert seat.drafter is not None
    assert seat.drafter.method == "dflash" and seat.drafter.num_speculative_tokens == 7
    assert seat.drafter.num_speculative_tokens_per_batch_size == ((1, 2, 7), (3, 4, 3), (5, 1024, 0))
    assert seat.serve.max_model_len == 262144 and seat.serve.max_num_seqs == 8
    assert seat.serve.gpu_memory_utilization == 0.97
    assert seat.replicas.mode == "auto" and seat.replica_names(2) == ("r0", "r1")
    assert seat.env["NCCL_PROTO"] == "Simple"
    assert any(k.startswith("RADIANCE_") for k in seat.env)
    assert seat.env_classes.key == ("RADIANCE_*",)
    assert seat.preflight.profile == REPO / "checks" / "x99-r9700.toml"
    assert seat.readiness.timeout_s == 900.0
    assert seat.source_path == R9700


def test_demo_seat() -> None:
    seat = load_seat(DEMO)
    assert seat.backend == "cpu" and seat.tp == 1
    assert seat.engine.command[-1] == "vllm.entrypoints.openai.api_server"
    assert seat.engine.model_flag == "--model"
    assert seat.engine.python == Path("/opt/rocmseat/vllm-venv/bin/python")
    assert seat.drafter is not None and seat.drafter.method == "draft_model"
    assert seat.drafter.num_speculative_tokens == 3
    assert seat.serve.port_base == 8100 and seat.port_of(1) == 8101
    assert seat.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert seat.watch.interval_s == 5.0 and seat.readiness.timeout_s == 300.0


def test_relative_and_home_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    seat = load_seat(write(tmp_path, MINIMAL))
    assert seat.cache_root == tmp_path / "launchers" / "cache"
    assert seat.model.path == tmp_path / "models" / "target"
    assert seat.engine.python == tmp_path / "home" / "venv" / "bin" / "python"
    assert seat.model.served_name == "t"  # defaults to the seat name
    assert seat.drafter is not None and seat.drafter.extra == {}


def _replace(old: str, new: str) -> str:
    assert old in MINIMAL
    return MINIMAL.replace(old, new, 1)


MALFORMED = [
    # (text, expected message after "x.toml")
    (_replace("num_speculative_tokens = 3", "num_speculative_tokens = 0"),
     ":17: key 'drafter.num_speculative_tokens': Input should be greater than 0"),
    (_replace("num_speculative_tokens = 3", "num_speculative_tokens = 3\ndisable_by_batch_size = 4"),
     ":18: key 'drafter.disable_by_batch_size': current vLLM rejects disable_by_batch_size"),
    (_replace("num_speculative_tokens = 3", "num_speculative_tokens = 3\nextra = { disable_by_batch_size = 4 }"),
     ":18: key 'drafter.extra.disable_by_batch_size': current vLLM rejects"),
    (_replace("num_speculative_tokens = 3", "num_speculative_tokens = 3\nextra = { tensor_parallel_size = 2 }"),
     ":18: key 'drafter.extra': vLLM rejects 'tensor_parallel_size'"),
    (_replace("num_speculative_tokens = 3", "num_speculative_tokens = 3\nnum_speculative_tokens_per_batch_size = [[2, 8, 3]]"),
     ":18: key 'drafter.num_speculative_tokens_per_batch_size': the first batch-size range must start at 1"),
    (_replace("num_speculative_tokens = 3", "num_speculative_tokens = 3\nnum_speculative_tokens_per_batch_size = [[1, 8, 3], [5, 9, 0]]"),
     ":18: key 'drafter.num_speculative_tokens_per_batch_size': batch-size ranges must not overlap"),
    (_replace("num_speculative_tokens = 3", "num_speculative_tokens = 3\nnum_speculative_tokens_per_batch_size = [[1, 8, 5]]"),
     ":18: key 'drafter.num_speculative_tokens_per_batch_size': drafts up to 5 tokens"),
    (_replace('method = "draft_model"', 'method = "medusa"'),
     ":15: key 'drafter.method': unknown speculative method 'medusa'"),
    (_replace('path = "../models/drafter"\n', ""),
     ":15: key 'drafter.method': method 'draft_model' needs a drafter 'path'"),
    (_replace("max_num_seqs = 4", 'max_num_seqs = "4"'),
     ":22: key 'serve.max_num_seqs': Input should be a valid integer"),
    (_replace("max_num_seqs = 4", "max_num_seqs = 4\nbogus = 1"),
     ":23: key 'serve.bogus': Extra inputs are not permitted"),
    (_replace('name = "t"', 'name = "Bad Name"'),
     ":1: key 'name': String should match pattern"),
    (_replace("tp = 1", "tp = 2"), ":3: key 'tp': backend 'cpu' runs with tp = 1"),
    (_replace('backend = "cpu"', 'backend = "cuda"'), ":2: key 'backend': Input should be 'rocm' or 'cpu'"),
    (_replace("port_base = 8100", "port_base = 70000"),
     ":20: key 'serve.port_base': Input should be less than or equal to 65535"),
    (_replace('[model]\npath = "../models/target"\n', ""), ": key 'model': Field required"),
    (MINIMAL + '\n[env]\nVLLM_CACHE_ROOT = "/tmp/elsewhere"\n',
     ":25: key 'env.VLLM_CACHE_ROOT': points a compiler cache outside the cache store"),
    (MINIMAL + '\n[env]\nMIOPEN_USER_DB_PATH = "/tmp/db"\n',
     ":25: key 'env.MIOPEN_USER_DB_PATH': points a compiler cache outside"),
    (MINIMAL + '\n[env]\nX = 1\n', ":25: key 'env.X': Input should be a valid string"),
    (_replace("max_num_seqs = 4", 'max_num_seqs = 4\nextra_args = ["--enforce-eager", "-cc", \'{"cache_dir": "/x"}\']'),
     ":23: key 'serve.extra_args[1]': a compilation-config cache_dir bypasses"),
    (_replace("max_num_seqs = 4", 'max_num_seqs = 4\nextra_args = ["--compilation-config.cache_dir=/x"]'),
     ":23: key 'serve.extra_args[0]': a compilation-config cache_dir bypasses"),
    (MINIMAL + '\n[replicas]\nmode = "explicit"\n', ":25: key 'replicas.mode': mode 'explicit' needs 'pairs'"),
    (_replace("tp = 1", "tp = = 1"), ":3: invalid TOML: Invalid value (column 6)"),
    (MINIMAL + "\n[[expect_log]]\npattern = '(unclosed'\n", ":25: key 'expect_log[0].pattern': not a Python regex"),
    (MINIMAL + "\n[watch]\ninterval_s = 0\n", ":25: key 'watch.interval_s': Input should be greater than 0"),
]


@pytest.mark.parametrize(("text", "expected"), MALFORMED)
def test_malformed(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_seat(path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}{expected}"), message


def test_explicit_pairs(tmp_path: Path) -> None:
    text = _replace('backend = "cpu"', 'backend = "rocm"').replace("tp = 1", "tp = 2")
    text += '\n[replicas]\nmode = "explicit"\npairs = [["0000:05:00.0", "0000:09:00.0"]]\nnames = ["a"]\n'
    seat = load_seat(write(tmp_path, text))
    assert seat.replicas.pairs == (("0000:05:00.0", "0000:09:00.0"),)
    assert seat.replica_names(1) == ("a",)
    bad = text.replace('"0000:09:00.0"', '"05:00.0"')
    with pytest.raises(ConfigError, match=r"x.toml:26: key 'replicas.pairs': '05:00.0' is not a PCI address"):
        load_seat(write(tmp_path, bad))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read the seat file"):
        load_seat(tmp_path / "nope.toml")
