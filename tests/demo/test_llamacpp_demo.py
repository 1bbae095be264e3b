"""The llama.cpp demo: llama_server.py's flags (llama-server's spelling, parsed without
xllamacpp) and `rocmseat demo gguf-models` (the builder run by the llama.cpp venv's Python
where there is one; the failure paths with this Python, which has no gguf)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from rocmseat.demo import (
    GGUF_NAMES,
    LLAMA_SERVER,
    build_gguf_models,
    default_llamacpp_python,
    parse_gguf_report,
)
from rocmseat.engines.llamacpp import serve_argv
from rocmseat.errors import ConfigError, RocmseatError
from rocmseat.seat.load import load_seat
from tests.conftest import REPO


def _server_module():
    spec = importlib.util.spec_from_file_location("llama_server", LLAMA_SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["llama_server"] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


def test_the_seats_argv_is_what_llama_server_py_takes(tmp_path):
    """Every flag the engine seam writes for the demo seat (its serve argv) parses here: the
    seat's command can be this program or a real llama-server."""
    ls = _server_module()
    for name in ("target.gguf", "drafter.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    seat = load_seat(REPO / "launchers" / "demo-cpu-llamacpp.toml")
    argv = list(serve_argv(seat, 8130))[len(seat.engine.command):]
    argv[argv.index("--model") + 1] = str(tmp_path / "target.gguf")
    argv[argv.index("--spec-draft-model") + 1] = str(tmp_path / "drafter.gguf")
    opts = ls.parse_args(argv)
    assert (opts.port, opts.ctx_size, opts.parallel, opts.alias, opts.metrics) == (
        8130, 4096, 4, "demo", True)
    assert (opts.spec_type, opts.draft_n_max) == ("draft-simple", 3)
    # the pre-2026 names llama-server still accepts
    old = ls.parse_args(["-m", str(tmp_path / "target.gguf"), "--model-draft",
                         str(tmp_path / "drafter.gguf"), "--draft-max", "5", "-c=512"])
    assert (old.draft_model, old.draft_n_max, old.ctx_size) == (
        str(tmp_path / "drafter.gguf"), 5, 512)


@pytest.mark.parametrize(("argv", "said"), [
    (["--port", "1"], "-m/--model is required"),
    (["-m", "M", "--bogus"], "'--bogus': not a flag"),
    (["-m", "M", "--port", "x"], "expects a whole number"),
    (["-m", "M", "--port", "70000"], "not a TCP port"),
    (["-m", "M", "--spec-type", "eagle9"], "--spec-type 'eagle9'"),
    (["-m", "M", "-md"], "-md: expects a value"),
    (["-m", "/nonexistent.gguf"], "no such file"),
])
def test_a_flag_it_cannot_honour_is_refused_in_one_line(tmp_path, argv, said):
    (tmp_path / "M").write_bytes(b"GGUF")
    argv = [str(tmp_path / "M") if a == "M" else a for a in argv]
    done = subprocess.run([sys.executable, str(LLAMA_SERVER), *argv], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert said in done.stderr.splitlines()[0]


def test_without_xllamacpp_it_says_which_python_to_use(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    done = subprocess.run([sys.executable, str(LLAMA_SERVER), "-m", str(tmp_path / "m.gguf")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and "has no xllamacpp" in done.stderr


def test_a_python_without_gguf_is_a_usage_error(tmp_path):
    with pytest.raises(ConfigError, match=r"not the engine's Python: .* has no gguf") as info:
        build_gguf_models(tmp_path / "m", Path(sys.executable))
    assert "ROCMSEAT_LLAMACPP_PYTHON" in str(info.value.hint)
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("text", ["", "{}", '{"models": {"gguf-target": {}}}', "[1]"])
def test_a_report_that_does_not_parse_is_one_line(text):
    with pytest.raises(RocmseatError, match="unexpected report"):
        parse_gguf_report(text)


def test_the_builder_writes_three_ggufs_the_drafter_the_targets_weights(tmp_path):
    python = default_llamacpp_python()
    if not python.exists():
        pytest.skip(f"no llama.cpp Python at {python} (.ci/setup installs it)")
    built = build_gguf_models(tmp_path / "m", python)
    assert [m.name for m in built] == list(GGUF_NAMES)
    target, drafter, other = built
    assert target.sha256 == drafter.sha256 != other.sha256
    assert all(m.path.read_bytes()[:4] == b"GGUF" and m.size_bytes > 100_000 for m in built)
    # the same shapes and vocabulary: only the weights differ, the header is the same size
    assert target.size_bytes == other.size_bytes
    again = subprocess.run([sys.executable, "-m", "rocmseat", "demo", "gguf-models",
                            str(tmp_path / "m"), "--llamacpp-python", str(python), "--json"],
                           capture_output=True, text=True, timeout=120, cwd=REPO)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert json.loads(subprocess.run(
        [sys.executable, "-m", "rocmseat", "demo", "gguf-models", str(tmp_path / "m"),
         "--llamacpp-python", str(python), "--json", "--force"], capture_output=True, text=True,
        timeout=120, cwd=REPO).stdout)["schema"] == "rocmseat.demo-gguf-models/v1"
