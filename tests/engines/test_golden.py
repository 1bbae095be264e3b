"""Launch, key and units of an SGLang and a llama.cpp seat (golden), and the kind check.

The seats are the R9700 seat (launchers/r9700-mxfp4-dflash.toml) with its `[engine]` table for
each engine; `launch --dry-run --json` gives each replica's argv and environment (the engine's
cache variables), `build_factors` the config key's factors. SGLang's flags are checked against
tests/fixtures/engines/sglang-0.5.23-flags.txt (its --help needs torch, which the package's
pages cannot have here: the list is every field of sglang/srt/arg_groups/fields/*.py of the
installed sglang 0.5.23, as `--field-name`, their aliases and server_args.py's add_argument).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rocmseat.launch.flow
from rocmseat.cache.key import build_factors
from rocmseat.cache.versions import EngineVersions
from rocmseat.engines.command import kind_problem
from rocmseat.launch.plan import engine_argv
from rocmseat.seat.load import load_seat
from tests.conftest import FIXTURES, REPO

R9700 = REPO / "launchers" / "r9700-mxfp4-dflash.toml"
X99 = str(FIXTURES / "sysfs" / "x99-r9700")
SGLANG_FLAGS = FIXTURES / "engines" / "sglang-0.5.23-flags.txt"
VLLM_ENGINE = '''command = ["/opt/vllm/bin/vllm", "serve"]
model_flag = ""                          # `vllm serve DIR`: the model path is positional
python = "/opt/vllm/bin/python"          # asked for vllm/torch/triton/HIP versions (config key)'''
ENGINES = {
    "sglang": '''kind = "sglang"
command = ["/opt/sglang/bin/python", "-m", "sglang.launch_server"]
python = "/opt/sglang/bin/python"''',
    "llamacpp": '''kind = "llamacpp"
command = ["/opt/llama.cpp/bin/llama-server"]
python = "/usr/bin/python3"''',
}


def seat_text(kind: str) -> str:
    text = R9700.read_text()
    assert VLLM_ENGINE in text
    text = text.replace(VLLM_ENGINE, ENGINES[kind])
    if kind == "llamacpp":
        text = (text.replace('path = "/models/qwen3.8-27b-mxfp4"',
                             'path = "/models/qwen3.8-27b-q4_k_m.gguf"')
                .replace('method = "dflash"\npath = "/models/qwen3.8-27b-dflash-fp8"',
                         'method = "draft_model"\npath = "/models/qwen3-0.6b-q8_0.gguf"')
                .replace('extra_args = ["--enable-prefix-caching"]', 'extra_args = []')
                .replace("num_speculative_tokens_per_batch_size = [[1, 2, 7], [3, 4, 3], "
                         "[5, 1024, 1]]\n", "")
                .replace("extra = { draft_tensor_parallel_size = 1 }\n", ""))
    if kind == "sglang":
        text = (text.replace('extra_args = ["--enable-prefix-caching"]', 'extra_args = []')
                .replace("num_speculative_tokens_per_batch_size = [[1, 2, 7], [3, 4, 3], "
                         "[5, 1024, 1]]\n", "")
                .replace("extra = { draft_tensor_parallel_size = 1 }\n", ""))
    return text


@pytest.fixture
def seat_file(tmp_path):
    def make(kind: str) -> Path:
        path = tmp_path / f"{kind}.toml"
        path.write_text(seat_text(kind))
        return path
    return make


@pytest.mark.parametrize("kind", ["sglang", "llamacpp"])
def test_dry_run_argv_and_cache_vars_golden(kind, seat_file, rocmseat_cli, golden, monkeypatch):
    for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(rocmseat.launch.flow, "find_numactl", lambda: None)
    path = seat_file(kind)
    result = rocmseat_cli("launch", str(path), "--dry-run", "--json", "--sysfs-root", X99)
    assert result.exit_code == 2, result.stderr  # the engine and models are not installed here
    doc = json.loads(result.stdout)
    r0 = doc["replicas"][0]
    cache_vars = sorted(k for k in r0["env"] if r0["env"][k].startswith("/var/cache/"))
    shown = {"argv": r0["argv"], "cache_vars": cache_vars}
    golden(f"engines/launch-{kind}-r0.json", json.dumps(shown, indent=2) + "\n")
    if kind == "llamacpp":
        assert cache_vars == []  # llama.cpp has no compile cache
        argv = r0["argv"]
        for flag in ("--spec-type", "--spec-draft-model", "--spec-draft-n-max", "--metrics"):
            assert flag in argv
        assert "--draft-max" not in argv and "--model-draft" not in argv
    else:
        assert {"SGLANG_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"} <= set(
            cache_vars)
        assert "VLLM_CACHE_ROOT" not in cache_vars


def test_sglang_argv_flags_are_sglangs(seat_file):
    known = {line for line in SGLANG_FLAGS.read_text().splitlines()
             if line and not line.startswith("#")}
    argv = engine_argv(load_seat(seat_file("sglang")), 8000)
    flags = [word for word in argv[3:] if word.startswith("--")]
    assert flags and not set(flags) - known, set(flags) - known


@pytest.mark.parametrize("kind", ["sglang", "llamacpp"])
def test_key_factors_golden(kind, seat_file, golden):
    seat = load_seat(seat_file(kind))
    versions = (EngineVersions(None, None, "2.9.1", None, "3.5.0", "triton", "7.2.1",
                               sglang="0.5.23", kind="sglang") if kind == "sglang" else
                EngineVersions(None, None, None, None, None, None, None,
                               llama_server="version: 7012 (1f2e3d4)", kind="llamacpp"))
    factors = build_factors(seat, engine=versions, gpu_arch="gfx1201",
                            model={"model": "fingerprint"}, drafter={"drafter": "fingerprint"})
    golden(f"engines/key-{kind}.json", json.dumps(factors, indent=2, sort_keys=True) + "\n")
    assert factors["engine_kind"] == kind


def test_a_command_of_another_engine_is_refused_in_one_line_naming_both(tmp_path):
    text = R9700.read_text().replace('command = ["/opt/vllm/bin/vllm", "serve"]',
                                     'command = ["nice", "-n", "5", "/opt/llama/llama-server"]')
    path = tmp_path / "seat.toml"
    path.write_text(text)
    problem = kind_problem(load_seat(path))
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"{path}:13: key 'engine.command'")
    assert "vLLM" in problem and "llama.cpp" in problem and 'kind = "llamacpp"' in problem
    # an SGLang environment that carries vllm: refused too
    sg = tmp_path / "sg.toml"
    sg.write_text(R9700.read_text().replace(
        'command = ["/opt/vllm/bin/vllm", "serve"]',
        'command = ["/opt/sglang/bin/python", "-m", "sglang.launch_server"]'))
    assert "SGLang" in (kind_problem(load_seat(sg)) or "")
    # and the other way round: kind llamacpp with vLLM's command
    ll = tmp_path / "ll.toml"
    ll.write_text(R9700.read_text().replace(
        'command = ["/opt/vllm/bin/vllm", "serve"]',
        'kind = "llamacpp"\ncommand = ["/opt/vllm/bin/vllm", "serve"]'))
    assert "llama.cpp" in (kind_problem(load_seat(ll)) or "") and "vLLM" in (
        kind_problem(load_seat(ll)) or "")


def test_every_vllm_seat_of_the_house_passes_the_kind_check():
    for path in sorted((REPO / "launchers").glob("*.toml")):
        assert kind_problem(load_seat(path)) is None, path


def test_cache_audit_says_no_compile_cache_for_a_llamacpp_seat(seat_file, rocmseat_cli):
    path = seat_file("llamacpp")
    result = rocmseat_cli("cache-audit", str(path), "--sysfs-root", X99)
    assert result.exit_code == 0, result.stderr
    assert "no compile cache" in result.stdout and "llama.cpp" in result.stdout
    assert "absent" not in result.stdout  # not a table of dirs that hold no cache
    doc = json.loads(rocmseat_cli("cache-audit", str(path), "--json", "--sysfs-root",
                                  X99).stdout)
    (seat,) = doc["seats"]
    assert seat["compile_cache"] is None and "no compile cache" in seat["no_compile_cache"]


def test_remediate_status_says_what_applies_per_engine(seat_file, rocmseat_cli, tmp_path):
    for kind, absent in (("llamacpp", "move-cache-aside-restart"), ("sglang", None)):
        path = seat_file(kind)
        result = rocmseat_cli("remediate", "status", "--seat", str(path), "--state-dir",
                              str(tmp_path / kind))
        assert result.exit_code == 0, result.stderr
        line = next(ln for ln in result.stdout.splitlines() if ln.startswith("engine "))
        assert "restart-without-drafter" in line.split("; not:")[0]
        if absent:
            assert line.split("; not: ")[1].startswith(f"1 {absent}")
            assert "no compile cache" in line
        else:
            assert "; not:" not in line
        doc = json.loads(rocmseat_cli("remediate", "status", "--seat", str(path), "--json",
                                      "--state-dir", str(tmp_path / kind)).stdout)
        assert doc["engine"] == kind
        assert (absent in doc["steps_not_applying"]) if absent else not doc[
            "steps_not_applying"]


def test_launch_refuses_a_kind_mismatch_in_one_located_line(tmp_path, rocmseat_cli,
                                                           monkeypatch):
    monkeypatch.setattr(rocmseat.launch.flow, "find_numactl", lambda: None)
    path = tmp_path / "seat.toml"
    path.write_text(R9700.read_text().replace(
        'command = ["/opt/vllm/bin/vllm", "serve"]',
        'command = ["sudo", "-u", "llm", "/opt/llama/llama-server"]'))
    result = rocmseat_cli("launch", str(path), "--dry-run", "--sysfs-root", X99)
    assert result.exit_code == 2
    (line,) = [ln for ln in result.stderr.splitlines() if "[engine] kind" in ln]
    assert f"{path}:13: key 'engine.command'" in line
    assert "vLLM" in line and "llama.cpp" in line
