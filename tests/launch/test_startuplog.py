from __future__ import annotations

import json
import math
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmseat.cache.fingerprint import fingerprint_model
from rocmseat.findings import Severity
from rocmseat.launch.memplan import GIB, checkpoint_bytes, judge_memory_plan
from rocmseat.launch.startuplog import (
    UNTAGGED,
    CompileOutcome,
    StartupLogReader,
    classify_text,
)
from tests.conftest import FIXTURES

LOGS = FIXTURES / "logs"
RECORDED = FIXTURES / "recorded"


def _summary(name: str, expect: tuple[str, ...] = ()):
    return classify_text((LOGS / name).read_text(), expect)


def test_cpu_first_start_fresh_compile_of_backbone_and_drafter():
    s = _summary("cpu-0.32-fresh-draft-model.log")
    assert {c.component: c.outcome for c in s.components} == {
        "backbone": CompileOutcome.FRESH_COMPILE,
        "draft_model": CompileOutcome.FRESH_COMPILE,
    }
    assert s.kv_cache_tokens == 524_288
    assert s.kv_cache_device == "CPU"
    assert s.max_concurrency == 2048.0
    assert s.max_concurrency_tokens_per_request == 256
    assert s.init_engine_s == 23.16
    assert s.compilation_s is None
    assert s.drafter_loaded
    assert "Loading drafter model..." in (s.drafter_evidence or "")
    assert s.speculative_config == (
        "SpeculativeConfig(method='draft_model', model='/models/tinyA', num_spec_tokens=3)"
    )
    assert s.server_started
    assert s.fatal == ()
    backbone = s.component("backbone")
    assert backbone is not None and backbone.paths[0].endswith("/rank_0_0/model")


def test_cpu_restart_load_failure_then_compiled_again():
    s = _summary("cpu-0.32-restart-load-failure.log")
    backbone = s.component("backbone")
    assert backbone is not None
    assert backbone.outcomes == (CompileOutcome.LOAD_FAILURE, CompileOutcome.FRESH_COMPILE)
    assert backbone.outcome is CompileOutcome.LOAD_FAILURE
    assert backbone.load_failure_reasons == (
        "Source code has changed since the last compilation. Recompiling the model.",
    )
    # the path stops before the ", reason:" separator
    assert backbone.paths[0].endswith("/rank_0_0/model")
    drafter = s.component("draft_model")
    assert drafter is not None and drafter.outcome is CompileOutcome.FRESH_COMPILE


def test_gpu_aot_cache_hit_with_eagle3_tp2():
    s = _summary("rocm-0.33-aot-hit-eagle3.log")
    assert {c.component: c.outcome for c in s.components} == {
        "backbone": CompileOutcome.CACHE_LOAD,
        "eagle_head": CompileOutcome.CACHE_LOAD,
    }
    backbone = s.component("backbone")
    assert backbone is not None and len(backbone.paths) == 2  # one per TP rank
    assert backbone.outcomes == (CompileOutcome.CACHE_LOAD,)  # ranks collapsed
    assert s.kv_cache_device == "GPU"
    assert s.kv_cache_tokens == 1_234_560
    assert s.max_concurrency == 37.68
    assert s.max_concurrency_tokens_per_request == 32_768
    assert s.model_memory_gib == 8.63  # the largest rank
    assert s.model_load_s == pytest.approx(29.38881)
    assert s.available_kv_cache_gib == 17.72
    assert s.graph_capture_gib == 0.62
    assert s.init_engine_s == 60.55
    assert s.compilation_s == 4.12
    assert s.drafter_loaded


def test_gpu_fresh_dflash_and_cache_directory():
    s = _summary("rocm-0.33-fresh-dflash.log", (r"EmulationMxfp4LinearKernel", r"experts resident"))
    assert {c.component: c.outcome for c in s.components} == {
        "backbone": CompileOutcome.FRESH_COMPILE,
        "dflash_head": CompileOutcome.FRESH_COMPILE,
    }
    backbone = s.component("backbone")
    assert backbone is not None
    assert backbone.paths[0].endswith("torch_compile_cache/a599c65868/rank_0_0/backbone")
    assert s.drafter_loaded  # by the dflash_head compile tag, no "Loading drafter" line
    assert s.kv_cache_tokens == 299_008
    assert s.max_concurrency == 1.14
    assert 0 in s.expect_hits and 1 not in s.expect_hits


def test_older_untagged_non_aot_hit_and_two_line_kv():
    s = _summary("musa-nonaot-hit-two-line-kv.log")
    assert [(c.component, c.outcome) for c in s.components] == [
        (UNTAGGED, CompileOutcome.CACHE_LOAD)
    ]
    assert s.kv_cache_tokens == 98_304
    assert s.max_concurrency == 3.0
    assert s.max_concurrency_tokens_per_request == 32_768
    assert s.model_memory_gib == 14.99  # older "took X GiB and Y seconds" shape
    assert s.init_engine_s == 31.84
    assert not s.drafter_loaded
    assert not s.server_started


def test_fatal_ipc_log():
    s = _summary("rocm-ipc-fatal.log")
    assert [f.signature for f in s.fatal] == [
        "cuda_error", "invalid_device_pointer", "engine_core_fatal"
    ]
    assert s.speculative_config is None


@pytest.mark.parametrize(
    ("line", "signature"),
    [
        ("Failed: Cuda error /build/csrc/custom_all_reduce.cuh:368 'invalid device pointer'",
         "cuda_error"),
        ("RuntimeError: HIP error: invalid device pointer", "invalid_device_pointer"),
        ("hipIpcOpenMemHandle failed: hipErrorInvalidDevicePointer", "invalid_device_pointer"),
        ("(EngineCore pid=3) ERROR 11-29 09:00:41 [core.py:932] EngineCore encountered a fatal "
         "error.", "engine_core_fatal"),
        ("TimeoutError: RPC call to execute_model timed out.", "rpc_timeout"),
        ("vLLM failed to compile the model. The most likely reason for this is that a previous "
         "compilation failed", "compile_failed"),
    ],
)
def test_fatal_signatures(line, signature):
    reader = StartupLogReader()
    events = reader.feed(line + "\n")
    assert ("fatal", signature) in [(e.kind, e.value) for e in events]


@pytest.mark.parametrize(
    ("line", "tokens", "device", "conc"),
    [
        ("GPU KV cache size: 1,234,560 tokens, Maximum concurrency for 32,768 tokens per "
         "request: 37.68x", 1_234_560, "GPU", 37.68),
        ("GPU + host KV cache size: 2,000,000 tokens, Maximum concurrency for 4,096 tokens per "
         "request: 488.28x", 2_000_000, "GPU + host", 488.28),
        ("CPU KV cache size: 524,288 tokens, Maximum concurrency for 256 tokens per request: "
         "2048.00x", 524_288, "CPU", 2048.0),
        ("GPU KV cache size: 98304 tokens", 98_304, "GPU", None),
    ],
)
def test_kv_line_shapes(line, tokens, device, conc):
    s = classify_text(f"(EngineCore pid=1) INFO 11-29 09:05:41 [kv_cache_utils.py:1418] {line}")
    assert (s.kv_cache_tokens, s.kv_cache_device, s.max_concurrency) == (tokens, device, conc)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "KV cache size: tokens",
        "GPU KV cache size: 1,2a tokens",
        "Model loading took GiB memory",
        "init engine (profile, create kv cache, warmup model) took s",
        "[backbone Directly load AOT compilation from path",
        "[file.py:12] saved AOT compiled function",  # no path: not a compile line
        "Maximum concurrency for tokens per request: x",
    ],
)
def test_malformed_lines_are_not_facts(line):
    s = classify_text(line)
    assert s.components == ()
    assert s.kv_cache_tokens is None and s.max_concurrency is None
    assert s.model_memory_gib is None and s.init_engine_s is None


# The three lines vLLM logs when compilation or its cache is off (the startup log reader's
# _COMPILE_OFF), in the log's own format: --enforce-eager and eager mode's graph note
# (VllmConfig.__post_init__, vllm/config/vllm.py), VLLM_DISABLE_COMPILE_CACHE=1
# (VllmBackend.__call__, vllm/compilation/backends.py).
ENFORCE_EAGER = ("(APIServer pid=1) WARNING 11-25 08:00:42 [vllm.py:1172] Enforce eager set, "
                 "disabling torch.compile and CUDAGraphs. This is equivalent to setting "
                 "-cc.mode=none -cc.cudagraph_mode=none")
CACHE_OFF = ("(EngineCore_DP0 pid=270) INFO 11-25 08:00:51 [backends.py:650] "
             "vLLM's torch.compile cache is disabled.")
GRAPHS_OFF = ("(APIServer pid=1) INFO 11-25 08:00:42 [vllm.py:1401] Cudagraph is disabled "
              "under eager mode")


@pytest.mark.parametrize("line", [ENFORCE_EAGER, CACHE_OFF, GRAPHS_OFF])
def test_compile_disabled_line(line):
    """The summary carries the line itself (the launch judge quotes it in its finding), and the
    reader's event names it."""
    text = "\n".join(["INFO [core.py:93] Initializing a V1 LLM engine", line,
                      "INFO [core.py:210] init engine took 3.1 s"])
    s = classify_text(text)
    assert s.compile_disabled == line
    reader = StartupLogReader()
    reader.feed("INFO [core.py:93] Initializing a V1 LLM engine")
    assert [(e.kind, e.line) for e in reader.feed(line) if e.kind == "compile_disabled"] == [
        ("compile_disabled", line)]


def test_compile_disabled_keeps_the_first_line_and_ignores_lookalikes():
    s = classify_text("\n".join([ENFORCE_EAGER, CACHE_OFF, GRAPHS_OFF]))
    assert s.compile_disabled == ENFORCE_EAGER
    # a line that names torch.compile without saying it is off is not the line
    s = classify_text("INFO [backends.py:215] Using cache directory: /c/torch_compile_cache/x "
                      "for vLLM's torch.compile\nINFO [monitor.py:34] torch.compile takes 5.2 s")
    assert s.compile_disabled is None


def test_shm_stall_is_a_warning_not_fatal():
    s = classify_text(
        "(EngineCore pid=3) WARNING [shm_broadcast.py:466] No available shared memory broadcast "
        "block found in 60 seconds. This typically happens when some processes are hanging"
    )
    assert s.fatal == ()
    assert [w.kind for w in s.warnings] == ["shm_broadcast_stall"]


@given(st.lists(st.text(max_size=200), max_size=30))
def test_reader_never_raises_and_counts_lines(lines):
    reader = StartupLogReader([r"experts resident"])
    for line in lines:
        reader.feed(line)
    assert reader.summary().lines_read == len(lines)


@given(st.integers(min_value=0, max_value=10**12), st.sampled_from(["GPU", "CPU", "GPU + host"]))
def test_kv_tokens_roundtrip(tokens, device):
    s = classify_text(f"{device} KV cache size: {tokens:,} tokens")
    assert s.kv_cache_tokens == tokens
    assert s.kv_cache_device == device


def _recorded_logs():
    return sorted(RECORDED.glob("**/*.log")) if RECORDED.is_dir() else []


@pytest.mark.parametrize("path", _recorded_logs(), ids=lambda p: p.name)
def test_recorded_real_vllm_logs(path):
    """Logs recorded by the e2e tier from the real vLLM CPU build: every started engine states
    its KV pool and an init time, and every compile line is classified to a known component."""
    s = classify_text(path.read_text(errors="replace"))
    if not s.server_started:
        pytest.skip(f"{path.name}: the engine did not reach 'Starting vLLM server'")
    assert s.kv_cache_tokens is not None and s.kv_cache_tokens > 0
    assert s.init_engine_s is not None
    assert s.components, "a started engine logs at least one compile or load line"


# ----- the real vLLM CPU build (tests/fixtures/recorded, see its README) ---------------------
def _recorded(name: str):
    return classify_text((RECORDED / name).read_text())


def test_recorded_fresh_compile():
    s = _recorded("startup-fresh-compile.log")
    assert {c.component: c.outcome for c in s.components} == {
        "backbone": CompileOutcome.FRESH_COMPILE,
        "draft_model": CompileOutcome.FRESH_COMPILE,
    }
    assert (s.kv_cache_device, s.kv_cache_tokens, s.max_concurrency) == ("CPU", 524_288, 2048.0)
    assert s.init_engine_s == 30.61
    assert s.drafter_loaded and s.server_started and s.fatal == ()
    assert s.model_memory_gib is None  # the CPU build states no "Model loading took"


def test_recorded_restart_load_failure():
    s = _recorded("startup-restart-same-cache.log")
    for name in ("backbone", "draft_model"):
        comp = s.component(name)
        assert comp is not None
        assert comp.outcomes == (CompileOutcome.LOAD_FAILURE, CompileOutcome.FRESH_COMPILE)
        assert comp.load_failure_reasons == (
            "'function' object has no attribute 'finalize_loading'",
        )
    assert s.init_engine_s == 13.83


def test_recorded_other_drafter_fresh():
    s = _recorded("startup-drafter-other.log")
    assert [c.outcome for c in s.components] == [CompileOutcome.FRESH_COMPILE] * 2
    assert s.speculative_config is not None and "drafter-other" in s.speculative_config


# ----- the memory plan's inputs (issue 12 item 3) ------------------------------------------
def test_every_rank_of_the_memory_plan_is_kept():
    s = _summary("rocm-0.33-aot-hit-eagle3.log")
    assert s.model_memory_gib_ranks == (8.61, 8.63)  # Worker_TP0, Worker_TP1 in log order
    assert s.model_memory_gib == max(s.model_memory_gib_ranks)
    older = _summary("musa-nonaot-hit-two-line-kv.log")
    assert older.model_memory_gib_ranks == (14.99,)  # "took X GiB and Y seconds"


def test_recorded_checkpoint_sizes_target_then_drafter():
    s = _recorded("startup-fresh-compile.log")
    assert s.checkpoint_gib == (0.0, 0.0)  # the tiny target, then its drafter
    assert s.model_memory_gib_ranks == ()


@pytest.mark.parametrize(
    ("line", "ranks", "checkpoint"),
    [
        ("(Worker_TP0 pid=1) INFO 11-29 08:00:40 [gpu_model_runner.py:4180] Model loading took "
         "9.5 GiB memory and 484.6 seconds", (9.5,), ()),
        ("(Worker pid=7958) INFO 11-29 14:30:22 [weight_utils.py:1108] Filesystem type for "
         "checkpoints: EXT4. Checkpoint size: 180.60 GiB. Available RAM: 21.89 GiB.", (), (180.6,)),
        ("Model loading took GiB memory and 1 seconds", (), ()),
        ("Checkpoint size: lots GiB", (), ()),
    ],
)
def test_memory_plan_lines(line, ranks, checkpoint):
    s = classify_text(line)
    assert s.model_memory_gib_ranks == ranks and s.checkpoint_gib == checkpoint


# ----- the memory plan itself (rocmseat/launch/memplan.py) ------------------------------------
def test_the_field_incident_warns():
    # a drafter's experts pushed the model onto a paged fallback: 9.5 GB instead of 180.6
    f = judge_memory_plan((9.5 * 1e9 / GIB,), int(180.6e9), 1, subject="r0")
    assert f.severity is Severity.WARN and f.check_id == "launch.memory.plan"
    assert f.data["ratio"] == pytest.approx(9.5 / 180.6, abs=1e-3)
    assert "far below" in f.message


def test_tp2_share_from_a_real_startup_log():
    s = classify_text((FIXTURES / "logs" / "rocm-0.33-aot-hit-eagle3.log").read_text())
    # 8.61 / 8.63 GiB per rank against a 17 GiB checkpoint over TP 2: about its share
    f = judge_memory_plan(s.model_memory_gib_ranks, 17 * GIB, 2, subject="r0")
    assert f.severity is Severity.OK
    assert f.data["share_gib"] == 8.5 and f.data["rank_memory_gib"] == [8.61, 8.63]
    low = judge_memory_plan((8.61, 2.0), 17 * GIB, 2, subject="r0")  # one rank fell back
    assert low.severity is Severity.WARN


def test_the_cpu_build_states_no_model_memory():
    s = classify_text((FIXTURES / "recorded" / "startup-fresh-compile.log").read_text())
    f = judge_memory_plan(s.model_memory_gib_ranks, 2_600_000, 1, subject="r0")
    assert f.severity is Severity.UNKNOWN and "stated no model memory" in f.message


def test_unknown_checkpoint_size_and_bad_tp():
    assert judge_memory_plan((3.0,), None, 1, subject="r0").severity is Severity.UNKNOWN
    with pytest.raises(ValueError):
        judge_memory_plan((3.0,), 10, 0, subject="r0")


def _safetensors(path, payload: int) -> None:
    header = json.dumps({"w": {"dtype": "BF16", "shape": [payload // 2], "data_offsets":
                               [0, payload]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * payload)


def test_checkpoint_bytes_from_the_fingerprint_of_a_checkpoint_dir(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    _safetensors(tmp_path / "model-00001.safetensors", 1000)
    _safetensors(tmp_path / "model-00002.safetensors", 500)
    (tmp_path / "extra.bin").write_bytes(b"x" * 7)
    total = checkpoint_bytes(fingerprint_model(tmp_path))
    sizes = sum(p.stat().st_size for p in tmp_path.iterdir() if p.name != "config.json")
    assert total == sizes
    assert checkpoint_bytes({"config_files": {}, "safetensors": {}, "other_weights": {}}) is None


@pytest.mark.parametrize(
    "line",
    [
        "Model loading took 1.2.3 GiB memory and 4.5 seconds",
        "Model loading took 9" + "9" * 400 + " GiB memory and 4.5 seconds",
        "Checkpoint size: 1.2.3 GiB",
        "GPU KV cache size: " + "9" * 5000 + " tokens",
        "Maximum concurrency for 1.2.3 tokens per request: 1.2.3x",
        "Available KV cache memory: 1e999 GiB",
        "init engine (profile, create kv cache, warmup model) took 1.2.3 s",
    ],
)
def test_malformed_numbers_are_unknown_never_a_crash_or_inf(line):
    """A log line whose number is not one (1.2.3, 400 digits) leaves the figure unknown: no
    ValueError (int() refuses > 4300 digits), no inf from float()."""
    s = classify_text(line + "\n")
    for value in (s.model_memory_gib, s.kv_cache_tokens, s.max_concurrency,
                  s.available_kv_cache_gib, s.init_engine_s, *s.checkpoint_gib,
                  *s.model_memory_gib_ranks):
        assert value is None or math.isfinite(value)
