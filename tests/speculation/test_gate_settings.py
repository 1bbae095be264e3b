"""The [gate] table of a candidate seat: thresholds and battery, one located error per problem
(rocmseat/speculation/gate/settings.py)."""

from __future__ import annotations

import os

import pytest

from rocmseat.errors import ConfigError
from rocmseat.speculation.gate.judge import GateConfig
from rocmseat.speculation.gate.settings import Battery, load_seat_with_gate
from tests.conftest import REPO

DEMO_SEAT = (REPO / "launchers" / "demo-cpu.toml").read_text()


def seat_with(tmp_path, gate: str):
    path = tmp_path / "seat.toml"
    path.write_text(DEMO_SEAT + "\n[gate]\n" + gate)
    return path


def gate_line(path) -> int:
    return path.read_text().splitlines().index("[gate]") + 1


def test_defaults_without_a_gate_table(tmp_path):
    path = tmp_path / "seat.toml"
    path.write_text(DEMO_SEAT)
    loaded = load_seat_with_gate(path)
    assert loaded.config == GateConfig() and loaded.battery == Battery()
    assert (loaded.config.aggregate_min_ratio, loaded.config.cold_ttft_max_ratio,
            loaded.config.prefix_hit_max_drop, loaded.config.kv_pool_min_ratio) == (
        0.95, 1.5, 0.05, 0.85)


def test_a_gate_table(tmp_path):
    path = seat_with(tmp_path, "aggregate_min_ratio = 0.9\ncold_ttft_max_ratio = 2\n"
                               "concurrency = [1, 2, 8]\nrepeats = 5\nprompts = 12\n"
                               "output_tokens = 64\nmax_failed_requests = 1\n")
    loaded = load_seat_with_gate(path)
    assert loaded.config.aggregate_min_ratio == 0.9 and loaded.config.cold_ttft_max_ratio == 2.0
    assert loaded.config.max_failed_requests == 1
    assert loaded.battery.concurrency == (1, 2, 8) and loaded.battery.repeats == 5
    assert loaded.seat.name == "demo-cpu" and "gate" in loaded.data


@pytest.mark.parametrize(
    ("gate", "key", "why"),
    [
        ("repeat = 3\n", "gate.repeat", "unknown key (did you mean 'repeats'?)"),
        ("repeats = true\n", "gate.repeats", "valid integer"),
        ("repeats = \"3\"\n", "gate.repeats", "valid integer"),
        ("repeats = 2.5\n", "gate.repeats", "valid integer"),
        ("repeats = 0\n", "gate.repeats", "greater than or equal to 1"),
        ("aggregate_min_ratio = nan\n", "gate.aggregate_min_ratio", "not a finite number"),
        ("aggregate_min_ratio = inf\n", "gate.aggregate_min_ratio", "not a finite number"),
        ("noise_floor = -0.1\n", "gate.noise_floor", "greater than or equal to 0"),
        ("concurrency = [4, 1]\n", "gate.concurrency", "increasing"),
        ("concurrency = [1, 1]\n", "gate.concurrency", "without repeats"),
        ("concurrency = []\n", "gate.concurrency", "at least one"),
        ("concurrency = [1, \"4\"]\n", "gate.concurrency[1]", "valid integer"),
        ("concurrency = [0, 4]\n", "gate.concurrency[0]", "greater than or equal to 1"),
        ("prompts = 99999999999\n", "gate.prompts", "less than or equal to 100000"),
    ],
)
def test_malformed_gate_tables(tmp_path, gate, key, why):
    path = seat_with(tmp_path, gate)
    with pytest.raises(ConfigError) as info:
        load_seat_with_gate(path)
    message = info.value.message
    assert message.startswith(f"{path}:{gate_line(path) + 1}: key '{key}': ")
    assert why in message
    assert "\n" not in message


def test_rocmseat_launch_accepts_a_candidate_seat_with_a_gate_table(tmp_path):
    """The candidate is also the seat that ships: the seat loader (launch, key, watch) reads
    its [gate] table and ignores it, and the config key does not change with it."""
    from rocmseat.cache.key import build_factors
    from rocmseat.seat.load import load_seat

    plain = tmp_path / "plain.toml"
    plain.write_text(DEMO_SEAT)
    gated = seat_with(tmp_path, "repeats = 5\naggregate_min_ratio = 0.9\n")
    assert load_seat(gated).gate.repeats == 5
    inputs = {"engine": {"vllm": "0.32.0"}, "gpu_arch": "cpu-x86_64",
              "model": {"config_sha256": "0" * 64}, "drafter": {"config_sha256": "1" * 64}}
    assert (build_factors(load_seat(plain), **inputs)
            == build_factors(load_seat(gated), **inputs))


def test_control_characters_in_a_gate_value(tmp_path):
    path = seat_with(tmp_path, 'note = "a\\u001b[31mred"\n')
    with pytest.raises(ConfigError, match="control character"):
        load_seat_with_gate(path)


def test_other_seat_errors_keep_their_line(tmp_path):
    path = tmp_path / "seat.toml"
    text = DEMO_SEAT.replace("[replicas]", "[gate]\nrepeats = 2\n\n[replicas]")
    path.write_text(text.replace("timeout_s = 300", "timeout_s = \"300\""))
    with pytest.raises(ConfigError) as info:
        load_seat_with_gate(path)
    line = path.read_text().splitlines().index('timeout_s = "300"') + 1
    assert info.value.message.startswith(f"{path}:{line}: key 'readiness.timeout_s'")


def test_invalid_toml_inside_the_gate_table(tmp_path):
    path = seat_with(tmp_path, "repeats = = 2\n")
    with pytest.raises(ConfigError, match=r"seat.toml:\d+: invalid TOML"):
        load_seat_with_gate(path)


@pytest.mark.parametrize("kind", ["fifo", "directory", "huge"])
def test_hostile_seat_files(tmp_path, kind):
    path = tmp_path / "seat.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_text("#" * (2 << 20))
    with pytest.raises(ConfigError, match="cannot read the seat file"):
        load_seat_with_gate(path)
