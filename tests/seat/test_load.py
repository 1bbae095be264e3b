"""Seat files: the shipped launchers load; every malformed input gives one located error."""

# ruff: noqa: E501  (the table of malformed inputs reads best one case per line)

from __future__ import annotations

from pathlib import Path

import pytest

from rocmseat.errors import ConfigError
from rocmseat.seat.envclass import FORBIDDEN_SEAT_ENV
from rocmseat.seat.load import load_seat
from rocmseat.seat.naming import planned_port, replica_name
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
    assert seat.drafter.num_speculative_tokens_per_batch_size == ((1, 2, 7), (3, 4, 3), (5, 1024, 1))
    assert seat.serve.max_model_len == 262144 and seat.serve.max_num_seqs == 8
    assert seat.serve.gpu_memory_utilization == 0.97
    assert seat.replicas.mode == "auto" and seat.replicas.names == ("r0", "r1")
    assert (replica_name(seat, 0), replica_name(seat, 1)) == ("r0", "r1")
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
    assert seat.serve.port_base == 8100 and planned_port(seat, 1) == 8101
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
     ":18: key 'drafter.extra.tensor_parallel_size': vLLM rejects 'tensor_parallel_size'"),
    (_replace("num_speculative_tokens = 3", "num_speculative_tokens = 3\n\n[drafter.extra]\ndraft_tensor_parallel_size = 1\nnum_speculative_tokens = 2"),
     ":21: key 'drafter.extra.num_speculative_tokens': 'num_speculative_tokens' is set by the [drafter] table itself"),
    (_replace("num_speculative_tokens = 3", "num_speculative_tokens = 3\n\n[drafter.extra]\ndisable_by_batch_size = 4"),
     ":20: key 'drafter.extra.disable_by_batch_size': current vLLM rejects"),
    (_replace("num_speculative_tokens = 3", "num_speculative_tokens = 3\nextra.disable_by_batch_size = 4"),
     ":18: key 'drafter.extra.disable_by_batch_size': current vLLM rejects"),
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
     ":23: key 'serve.bogus': unknown key"),
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
    (MINIMAL + "\n[watch]\ninterval_s = 0\n", ":25: key 'watch.interval_s': Input should be greater than or equal to 0.05"),
    # an unknown key in every table, nested ones included
    (_replace('name = "t"', 'name = "t"\nnmae = "u"'), ":2: key 'nmae': unknown key"),
    (_replace('model_flag = "--model"', 'model_flag = "--model"\npyhton = "x"'), ":9: key 'engine.pyhton': unknown key"),
    (_replace('path = "../models/target"', 'path = "../models/target"\nserved = "x"'), ":13: key 'model.served': unknown key"),
    (_replace("num_speculative_tokens = 3", "num_speculative_tokens = 3\nnum_spec_tokens = 3"), ":18: key 'drafter.num_spec_tokens': unknown key"),
    (MINIMAL + '\n[replicas]\nmdoe = "auto"\n', ":25: key 'replicas.mdoe': unknown key"),
    (MINIMAL + '\n[env_classes]\nkeys = ["A_*"]\n', ":25: key 'env_classes.keys': unknown key"),
    (MINIMAL + "\n[preflight]\nhipp = true\n", ":25: key 'preflight.hipp': unknown key"),
    (MINIMAL + "\n[readiness]\ntimeout = 5\n", ":25: key 'readiness.timeout': unknown key"),
    (MINIMAL + "\n[watch]\ninterval = 5\n", ":25: key 'watch.interval': unknown key"),
    (MINIMAL + "\n[[expect_log]]\npattern = 'a'\n\n[[expect_log]]\npattern = 'b'\nseverty = 'warn'\n", ":29: key 'expect_log[1].severty': unknown key"),
    (MINIMAL + "\n[[expect_log]]\npattern = 'a'\nwhen = 'sometimes'\n", ":26: key 'expect_log[0].when': Input should be 'must_appear' or 'must_not_appear'"),
    # wrong types and ranges
    (_replace("tp = 1", "tp = 1.0"), ":3: key 'tp': Input should be a valid integer"),
    (_replace("command = [", 'command = "python" #['), ":7: key 'engine.command': Input should be a valid tuple"),
    (MINIMAL + "\n[preflight]\nhip = 1\n", ":25: key 'preflight.hip': Input should be a valid boolean"),
    (_replace("max_num_seqs = 4", "max_num_seqs = 4\ngpu_memory_utilization = 1.5"), ":23: key 'serve.gpu_memory_utilization': Input should be less than or equal to 1"),
    (_replace("port_base = 8100", "port_base = 0"), ":20: key 'serve.port_base': Input should be greater than or equal to 1"),
    # missing required keys: the table's line; several at once are all named
    (_replace("max_model_len = 256\n", ""), ":19: key 'serve.max_model_len': Field required"),
    ('name = "t"\n', ": key 'backend': Field required (missing required keys: backend, tp, cache_root, engine, model, serve)"),
    # duplicate keys and tables (TOML): the line and the key
    (_replace("tp = 1", "tp = 1\ntp = 2"), ":4: invalid TOML: key 'tp' is set twice (Cannot overwrite a value)"),
    (MINIMAL + '\n[serve]\ndtype = "auto"\n', ":24: invalid TOML: key 'serve' is set twice"),
    # disable_by_batch_size through --speculative-config / -sc in extra_args
    (_replace("max_num_seqs = 4", 'max_num_seqs = 4\nextra_args = ["--speculative-config", \'{"disable_by_batch_size": 4}\']'),
     ":23: key 'serve.extra_args[0]': current vLLM rejects disable_by_batch_size"),
    (_replace("max_num_seqs = 4", 'max_num_seqs = 4\nextra_args = ["-sc.disable_by_batch_size=4"]'),
     ":23: key 'serve.extra_args[0]': current vLLM rejects disable_by_batch_size"),
    # port collisions
    (MINIMAL + '\n[watch]\nexporter_listen = "127.0.0.1:8100"\n', ":25: key 'watch.exporter_listen': port 8100 is replica r0's port"),
    (MINIMAL + '\n[watch]\nexporter_listen = "localhost"\n', ":25: key 'watch.exporter_listen': 'localhost' is not HOST:PORT or 'off'"),
    (_replace("port_base = 8100", "port_base = 65535").replace('backend = "cpu"', 'backend = "rocm"').replace("tp = 1", "tp = 2") + '\n[replicas]\nnames = ["a", "b"]\n',
     ":20: key 'serve.port_base': 2 replica(s) need ports 65535..65536, past 65535"),
]

# Every way a seat could point a compiler cache outside the store is refused, naming the key.
CACHE_ESCAPES = [
    *[(MINIMAL + f'\n[env]\n{name} = "/tmp/elsewhere"\n', f":25: key 'env.{name}': points a compiler cache outside the cache store")
      for name in sorted(FORBIDDEN_SEAT_ENV)],
    *[(_replace("max_num_seqs = 4", f"max_num_seqs = 4\nextra_args = {args}"), f":23: key 'serve.extra_args[{index}]': a compilation-config cache_dir bypasses")
      for args, index in [
          ('["--compilation-config", \'{"cache_dir": "/x"}\']', 0),
          ('[\'--compilation-config={"cache_dir": "/x", "level": 3}\']', 0),
          ('["--enforce-eager", "-cc", \'{"cache_dir": "/x"}\']', 1),
          ('[\'-cc={"cache_dir": "/x"}\']', 0),
          ('["-cc.cache_dir", "/x"]', 0),
          ('["-cc.cache_dir=/x"]', 0),
          ('["--compilation-config.cache_dir=/x"]', 0),
          ('["--compilation-config.cache-dir", "/x"]', 0),
          ('["--compilation_config.cache_dir=/x"]', 0),
          ('["--compilation_config", \'{"cache_dir": "/x"}\']', 0),
      ]],
]


@pytest.mark.parametrize(("text", "expected"), MALFORMED + CACHE_ESCAPES)
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
    assert replica_name(seat, 0) == "a"
    bad = text.replace('"0000:09:00.0"', '"05:00.0"')
    with pytest.raises(ConfigError, match=r"x.toml:26: key 'replicas.pairs': '05:00.0' is not a PCI address"):
        load_seat(write(tmp_path, bad))


def test_gpu_in_two_pairs(tmp_path: Path) -> None:
    text = _replace('backend = "cpu"', 'backend = "rocm"').replace("tp = 1", "tp = 2")
    text += '\n[replicas]\nmode = "explicit"\npairs = [["0000:05:00.0", "0000:09:00.0"],\n         ["0000:0c:00.0", "0000:05:00.0"]]\n'
    with pytest.raises(ConfigError, match=r"x.toml:26: key 'replicas.pairs': GPU 0000:05:00.0 is in pair 0 and pair 1"):
        load_seat(write(tmp_path, text))
    same = text.replace('"0000:0c:00.0", "0000:05:00.0"', '"0000:0c:00.0", "0000:0c:00.0"')
    with pytest.raises(ConfigError, match=r"names the same GPU twice"):
        load_seat(write(tmp_path, same))


def test_compilation_config_without_cache_dir_is_fine(tmp_path: Path) -> None:
    text = _replace("max_num_seqs = 4", 'max_num_seqs = 4\nextra_args = ["-cc", \'{"level": 3}\', "--speculative-config-unrelated"]')
    assert load_seat(write(tmp_path, text)).serve.extra_args[0] == "-cc"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: cannot read the seat file"):
        load_seat(tmp_path / "nope.toml")


def test_a_misspelt_key_is_named_first_with_the_nearest_key_then_every_other_problem(tmp_path):
    """Issue 19: `num_speculative_token = 3` gave "key 'drafter.num_speculative_tokens': Field
    required (and 1 more)": the cause hidden behind its effect, the other problem unnamed. The
    unknown key comes first, with the nearest valid key, then every other problem, each with
    its line."""
    text = MINIMAL.replace("num_speculative_tokens = 3", "num_speculative_token = 3").replace(
        "max_num_seqs = 4", 'max_num_seqs = "4"')
    path = tmp_path / "launchers" / "t.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_seat(path)
    line = {k: i for i, t in enumerate(text.split("\n"), 1) for k in ("num_speculative_token",
                                                                      "[drafter]", "max_num_seqs")
            if t.startswith(k)}
    assert str(info.value) == (
        f"{path}:{line['num_speculative_token']}: key 'drafter.num_speculative_token': unknown key "
        "(did you mean 'num_speculative_tokens'?); "
        f"and {path}:{line['[drafter]']}: key 'drafter.num_speculative_tokens': Field required; "
        f"and {path}:{line['max_num_seqs']}: key 'serve.max_num_seqs': Input should be a valid "
        "integer")
    assert "more)" not in str(info.value) and "\n" not in str(info.value)


def test_an_unknown_key_far_from_every_key_lists_the_tables_keys(tmp_path):
    path = tmp_path / "launchers" / "t.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(MINIMAL + "\n[readiness]\nzzz = 5\n")
    with pytest.raises(ConfigError, match=r"key 'readiness\.zzz': unknown key \(known here: "
                                          r"timeout_s, "):
        load_seat(path)
