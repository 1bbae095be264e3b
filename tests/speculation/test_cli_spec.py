"""`rocmseat spec gate` and `spec advise` refusals that need no engine: one line, exit 2, and
nothing started (docs/spec.md "Exit codes")."""

from __future__ import annotations

import sys

import psutil
import pytest

from tests.conftest import REPO

DEMO_SEAT = (REPO / "launchers" / "demo-cpu.toml").read_text()


def _seat(tmp_path, name: str, *, drafter: bool = True, python: str | None = None,
          extra: str = "") -> str:
    text = DEMO_SEAT.replace('name = "demo-cpu"', f'name = "{name}"')
    if not drafter:
        start = text.index("[drafter]")
        end = text.index("[serve]")
        text = text[:start] + text[end:]
    if python is not None:
        text = text.replace('python = "/opt/rocmseat/vllm-venv/bin/python"',
                            f'python = "{python}"')
    path = tmp_path / f"{name}.toml"
    path.write_text(text + extra)
    return str(path)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_candidate_without_a_drafter(rocmseat_cli, tmp_path):
    base = _seat(tmp_path, "base", drafter=False)
    before = _children()
    result = rocmseat_cli("spec", "gate", base, base, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == (
        f"rocmseat: error: {base}: the candidate seat has no [drafter]: there is no speculation "
        "to gate")
    assert "--aa" in result.stderr
    assert not (tmp_path / "out").exists() and _children() == before


def test_missing_benchmark_client(rocmseat_cli, tmp_path):
    # an engine Python without vLLM: the real check runs it and says why, before any launch
    base = _seat(tmp_path, "base", drafter=False, python=sys.executable)
    cand = _seat(tmp_path, "cand", python=sys.executable)
    result = rocmseat_cli("spec", "gate", base, cand, "--out", str(tmp_path / "out"),
                          "--no-progress")
    assert result.exit_code == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"rocmseat: error: vllm bench serve is not available with "
                            f"{sys.executable}: ")
    assert "ModuleNotFoundError" in first and "vllm" in first
    assert not (tmp_path / "out" / "arms").exists()


def test_benchmark_client_that_is_not_python(rocmseat_cli, tmp_path, fake_engine_python):
    base = _seat(tmp_path, "base", drafter=False, python=str(fake_engine_python))
    cand = _seat(tmp_path, "cand", python=str(fake_engine_python))
    result = rocmseat_cli("spec", "gate", base, cand, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    assert "vllm bench serve is not available" in result.stderr.splitlines()[0]


def test_malformed_gate_table_is_located(rocmseat_cli, tmp_path):
    base = _seat(tmp_path, "base", drafter=False)
    cand = _seat(tmp_path, "cand", extra="\n[gate]\nrepeats = -1\n")
    result = rocmseat_cli("spec", "gate", base, cand, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2
    line = (tmp_path / "cand.toml").read_text().splitlines().index("repeats = -1") + 1
    assert result.stderr.splitlines()[0] == (
        f"rocmseat: error: {cand}:{line}: key 'gate.repeats': Input should be greater than or "
        "equal to 1")


def test_bad_concurrency_flag(rocmseat_cli, tmp_path):
    base = _seat(tmp_path, "base", drafter=False)
    cand = _seat(tmp_path, "cand")
    for value in ("4,1", "1,x", "0", ""):
        result = rocmseat_cli("spec", "gate", base, cand, "--concurrency", value)
        assert result.exit_code == 2, value
        assert "--concurrency" in result.stderr.splitlines()[0]


def test_advise_needs_exactly_one_source(rocmseat_cli, tmp_path):
    result = rocmseat_cli("spec", "advise")
    assert result.exit_code == 2
    assert "exactly one of SEAT, --target URL or --from-gate DIR" in result.stderr
    result = rocmseat_cli("spec", "advise", "--target", "http://127.0.0.1:1/metrics",
                          "--from-gate", str(tmp_path))
    assert result.exit_code == 2


def test_advise_from_a_directory_that_is_no_gate(rocmseat_cli, tmp_path):
    result = rocmseat_cli("spec", "advise", "--from-gate", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0].startswith(f"rocmseat: error: {tmp_path}/gate.json: ")
    (tmp_path / "gate.json").write_text('{"schema": "rocmseat.watch/v1"}')
    result = rocmseat_cli("spec", "advise", "--from-gate", str(tmp_path))
    assert result.exit_code == 2 and "not a rocmseat.gate/v1 document" in result.stderr


def test_advise_target_that_refuses(rocmseat_cli):
    result = rocmseat_cli("spec", "advise", "--target", "http://127.0.0.1:9/metrics",
                          "--window", "0.1")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0].startswith("rocmseat: error: http://127.0.0.1:9/metrics")


def test_advise_window_must_be_positive(rocmseat_cli):
    result = rocmseat_cli("spec", "advise", "--target", "http://127.0.0.1:9/metrics",
                          "--window", "nan")
    assert result.exit_code == 2 and "--window" in result.stderr


def test_progress_display(monkeypatch, capsys):
    from rocmseat.cli.spec import _Display
    from rocmseat.speculation.gate.arms import Progress

    events = [Progress("base", "launch", 0, 12, 3.0, None, "compiling (backbone)"),
              Progress("base", "decode@4", 5, 12, 95.0, 130.0, "repeat 2"),
              Progress("candidate", "prefix", 11, 12, 400.0, 8.0, "repeat 1")]
    plain = _Display(enabled=True)
    for e in events:
        plain.update(e)
    plain.close()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "rocmseat spec gate: base: launch compiling (backbone) (0/12 runs, 3s elapsed, ~? left)",
        "rocmseat spec gate: base: decode@4 repeat 2 (5/12 runs, 1m35s elapsed, ~2m10s left)",
        "rocmseat spec gate: candidate: prefix repeat 1 (11/12 runs, 6m40s elapsed, ~8s left)",
    ]
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setenv("TERM", "xterm")
    bar = _Display(enabled=True)
    for e in events:
        bar.update(e)
    bar.close()
    assert "candidate: prefix repeat 1" in capsys.readouterr().err
    quiet = _Display(enabled=False)
    quiet.update(events[0])
    assert capsys.readouterr().err == ""


def _bench_ready_python(tmp_path) -> str:
    """An engine Python whose `vllm_bench.py --check` says vLLM's client and pandas are there
    (it is not an engine: nothing may get as far as starting one)."""
    program = tmp_path / "bench-ready-python"
    program.write_text(f"#!{sys.executable}\nimport json\n"
                       "print(json.dumps({'vllm': '0.32.0', 'pandas': True}))\n")
    program.chmod(0o755)
    return str(program)


def test_a_seat_too_small_for_the_battery(rocmseat_cli, tmp_path):
    python = _bench_ready_python(tmp_path)
    base = _seat(tmp_path, "base", drafter=False, python=python)
    cand = _seat(tmp_path, "cand", python=python)
    small = (tmp_path / "base.toml").read_text().replace("max_model_len = 256",
                                                         "max_model_len = 40")
    (tmp_path / "base.toml").write_text(small)
    line = small.splitlines().index("max_model_len = 40") + 1
    before = _children()
    result = rocmseat_cli("spec", "gate", base, cand, "--out", str(tmp_path / "out"),
                          "--no-progress")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"rocmseat: error: {base}:{line}: key 'serve.max_model_len': 40 is too small for the "
        "gate's battery: it leaves 24 prompt tokens for the TTFT runs (at least 16) and 0 "
        "output tokens for the decode runs (at least 8)")
    assert not (tmp_path / "out").exists() and _children() == before
    # a [gate] size of the candidate is named where it is set, a flag as the flag
    (tmp_path / "base.toml").write_text(small.replace("max_model_len = 40",
                                                      "max_model_len = 4096"))
    text = (tmp_path / "cand.toml").read_text() + "\n[gate]\noutput_tokens = 4\n"
    (tmp_path / "cand.toml").write_text(text)
    result = rocmseat_cli("spec", "gate", base, cand, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"rocmseat: error: {cand}:{len(text.splitlines())}: key 'gate.output_tokens': 4 tokens "
        "is too short for the decode runs (at least 8)")
    result = rocmseat_cli("spec", "gate", base, cand, "--out", str(tmp_path / "out"),
                          "--output-tokens", "5")
    assert result.stderr.splitlines()[0] == (
        "rocmseat: error: --output-tokens: 5 tokens is too short for the decode runs "
        "(at least 8)")
    assert not (tmp_path / "out").exists() and _children() == before


def test_battery_error_is_a_located_config_error():
    from rocmseat.errors import ConfigError
    from rocmseat.speculation.gate.battery import BatteryError, sizes
    from rocmseat.speculation.gate.settings import Battery

    assert issubclass(BatteryError, ConfigError)  # exit 2, never a traceback
    try:
        sizes(Battery(), 64)
    except BatteryError as exc:
        assert exc.key == "serve.max_model_len" and exc.message.startswith(
            "key 'serve.max_model_len': 64 is too small")


@pytest.mark.parametrize(
    ("flag", "value", "why"),
    [
        # each of these once made its gate always PASS
        ("--kv-pool-min-ratio", "0", "Input should be greater than or equal to 0.01"),
        ("--prefix-hit-max-drop", "999", "Input should be less than or equal to 1"),
        ("--aggregate-min-ratio", "0", "Input should be greater than or equal to 0.01"),
        ("--cold-ttft-max-ratio", "0.5", "Input should be greater than or equal to 1"),
        ("--aggregate-min-ratio", "nan", "Input should be a finite number"),
        ("--drift", "0.9", "Input should be less than or equal to 0.5"),
        ("--repeats", "0", "Input should be greater than or equal to 1"),
        ("--stall-after", "0.5", "Input should be greater than or equal to 1"),
    ],
)
def test_threshold_flags_take_the_schema_bounds(rocmseat_cli, tmp_path, flag, value, why):
    base = _seat(tmp_path, "base", drafter=False, python=sys.executable)
    cand = _seat(tmp_path, "cand", python=sys.executable)
    result = rocmseat_cli("spec", "gate", base, cand, "--out", str(tmp_path / "out"), flag,
                          value)
    assert result.exit_code == 2
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"rocmseat: error: {flag} {value}: "), first
    assert why in first
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "extra",
    [("--iteration-log", "/nonexistent"), ("--window", "-5"), ("--window", "30"),
     ("--iteration-log", "/nonexistent", "--window", "-5")],
)
def test_from_gate_refuses_live_replica_options(rocmseat_cli, tmp_path, extra):
    # they were silently ignored (exit 1 with the gate's advice and no word about them)
    import shutil

    gate = tmp_path / "gate"
    shutil.copytree(REPO / "tests" / "fixtures" / "spec" / "gate-cpu-deep", gate)
    result = rocmseat_cli("spec", "advise", "--from-gate", str(gate), *extra)
    assert result.exit_code == 2
    assert result.stdout == ""
    first = result.stderr.splitlines()[0]
    assert first.startswith("rocmseat: error: --from-gate reads acceptance and step costs from "
                            "the gate's records: ") and extra[0] in first


@pytest.mark.parametrize("value", ["-5", "0", "inf", "nan"])
def test_window_must_be_positive_and_finite(rocmseat_cli, value):
    result = rocmseat_cli("spec", "advise", "--target", "http://127.0.0.1:9/metrics",
                          "--window", value)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[0].startswith(f"rocmseat: error: --window {value}: ")
