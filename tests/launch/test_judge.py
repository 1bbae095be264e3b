from __future__ import annotations

from pathlib import Path

import pytest

from rocmseat.findings import Severity
from rocmseat.launch.judge import ExpectRule, JudgeContext, PreviousStart, judge_startup
from rocmseat.launch.startuplog import classify_text
from tests.conftest import FIXTURES

LOGS = FIXTURES / "logs"
RECORDED = FIXTURES / "recorded"
STALE = Path("/var/cache/rocmseat/s/r0.stale-20261129T100000Z")


def ctx(**kw):
    base = dict(replica="r0", moved_aside=None, cache_dir=None, drafter_configured=True,
                previous=None)
    base.update(kw)
    return JudgeContext(**base)


def by_id(findings, check_id):
    return [f for f in findings if f.check_id == check_id]


def test_cache_hit_after_move_aside_is_loud():
    s = classify_text((LOGS / "rocm-0.33-aot-hit-eagle3.log").read_text())
    [f] = by_id(judge_startup(s, ctx(moved_aside=STALE)), "launch.cache.warm_after_invalidation")
    assert f.severity is Severity.WARN
    assert f.message.startswith("WARNING: the invalidation hit a warm cache")
    assert "backbone, eagle_head" in f.message
    assert str(STALE) in f.message


def test_fresh_compile_after_move_aside_is_ok():
    s = classify_text((LOGS / "rocm-0.33-fresh-dflash.log").read_text())
    [f] = by_id(judge_startup(s, ctx(moved_aside=STALE)), "launch.cache.fresh_after_invalidation")
    assert f.severity is Severity.OK
    assert "backbone, dflash_head" in f.message


def test_no_compile_lines_after_move_aside_warns():
    s = classify_text("GPU KV cache size: 1,000 tokens\n")
    [f] = by_id(judge_startup(s, ctx(moved_aside=STALE)), "launch.cache.warm_after_invalidation")
    assert f.severity is Severity.WARN
    assert "no fresh compile" in f.message


def test_recorded_restart_with_load_failure_after_move_aside():
    """Real vLLM CPU log: an artifact was found after the 'move aside' and failed to load."""
    s = classify_text((RECORDED / "startup-restart-same-cache.log").read_text())
    findings = judge_startup(s, ctx(moved_aside=STALE))
    artifacts = by_id(findings, "launch.cache.artifact_after_invalidation")
    assert [f.severity for f in artifacts] == [Severity.WARN, Severity.WARN]
    assert "'function' object has no attribute 'finalize_loading'" in artifacts[0].message
    assert by_id(findings, "launch.cache.warm_after_invalidation") == []


def test_cache_paths_outside_the_store():
    s = classify_text((RECORDED / "startup-fresh-compile.log").read_text())
    findings = judge_startup(s, ctx(cache_dir=Path("/var/cache/rocmseat/demo/r0")))
    [f] = by_id(findings, "launch.cache.outside_store")
    assert "/var/tmp/rocmseat-e2e/manual/cache/torch_compile_cache" in f.message
    inside = judge_startup(s, ctx(cache_dir=Path("/var/tmp/rocmseat-e2e/manual/cache")))
    assert by_id(inside, "launch.cache.outside_store") == []


@pytest.mark.parametrize(
    ("previous", "now", "severity", "check_id"),
    [
        (600_000, 495_000, Severity.WARN, "launch.kv.shrunk"),  # 17.5 %: the drafter case
        (600_000, 180_000, Severity.WARN, "launch.kv.shrunk"),  # ~70 %
        (600_000, 540_000, Severity.OK, "launch.kv.pool"),  # exactly 10 %: not more than
        (600_000, 700_000, Severity.OK, "launch.kv.pool"),  # grew
    ],
)
def test_kv_pool_against_previous_start(previous, now, severity, check_id):
    s = classify_text(f"GPU KV cache size: {now:,} tokens, Maximum concurrency for 32,768 tokens "
                      f"per request: 8.00x")
    prev = PreviousStart(previous, "2026-11-28T10:00:00Z", "abc")
    [f] = by_id(judge_startup(s, ctx(previous=prev)), check_id)
    assert f.severity is severity
    if severity is Severity.WARN:
        assert f"{now:,} tokens now, {previous:,} at the previous start" in f.message
        assert f.data["previous_kv_cache_tokens"] == previous


def test_kv_unknown_when_never_stated():
    [f] = by_id(judge_startup(classify_text("nothing"), ctx()), "launch.kv.pool")
    assert f.severity is Severity.UNKNOWN
    # an engine that died early is judged on what it said, not on what it never reached
    assert by_id(judge_startup(classify_text("x"), ctx(complete=False)), "launch.kv.pool") == []


def test_drafter_not_loaded():
    s = classify_text((LOGS / "musa-nonaot-hit-two-line-kv.log").read_text())
    [f] = by_id(judge_startup(s, ctx()), "launch.drafter.loaded")
    assert f.severity is Severity.WARN
    assert by_id(judge_startup(s, ctx(drafter_configured=False)), "launch.drafter.loaded") == []


def test_expect_log_rules():
    rules = [
        ExpectRule("experts resident", "must_appear", Severity.WARN),
        ExpectRule(r"speculative_config=SpeculativeConfig\(method='dflash'", "must_appear",
                   Severity.FAIL),
        ExpectRule("EmulationMxfp4LinearKernel", "must_not_appear", Severity.FAIL),
        ExpectRule("paged fallback", "must_not_appear", Severity.WARN),
    ]
    s = classify_text((LOGS / "rocm-0.33-fresh-dflash.log").read_text(),
                      [r.pattern for r in rules])
    got = [(f.severity, f.data["pattern"]) for f in by_id(judge_startup(s, ctx(expect=rules)),
                                                          "launch.expect_log")]
    assert got == [
        (Severity.WARN, "experts resident"),
        (Severity.OK, r"speculative_config=SpeculativeConfig\(method='dflash'"),
        (Severity.FAIL, "EmulationMxfp4LinearKernel"),
        (Severity.OK, "paged fallback"),
    ]


def test_fatal_signatures_fail():
    s = classify_text((LOGS / "rocm-ipc-fatal.log").read_text())
    fatal = by_id(judge_startup(s, ctx(complete=False)), "launch.log.fatal")
    assert [f.data["signature"] for f in fatal] == [
        "cuda_error", "invalid_device_pointer", "engine_core_fatal"
    ]
    assert all(f.severity is Severity.FAIL for f in fatal)
    assert "hip" in fatal[1].hint.lower()


@pytest.mark.parametrize(
    ("previous_key", "current_key", "said"),
    [("abc", "abc", " (same config key)"), ("abc", "def", " (config key changed)"),
     (None, "def", ""), ("abc", None, "")],
)
def test_kv_shrink_says_the_key_changed_only_when_it_did(previous_key, current_key, said):
    """Issue 10: the warning said "(config key changed)" whenever the previous start had a key,
    because the judge never saw the current one."""
    s = classify_text("GPU KV cache size: 495,000 tokens\n")
    prev = PreviousStart(600_000, "2026-11-28T10:00:00Z", previous_key)
    [f] = by_id(judge_startup(s, ctx(previous=prev, key_digest=current_key)), "launch.kv.shrunk")
    assert f.message.endswith(f"at the previous start 2026-11-28T10:00:00Z{said}")
    expected = None if previous_key is None or current_key is None else (
        previous_key != current_key)
    assert f.data["key_changed"] is expected


GIB = 1 << 30


@pytest.mark.parametrize(
    ("checkpoint_gib", "tp", "severity", "words"),
    [
        (26.0, 2, Severity.OK, "14.07 GiB on the smallest of 1 rank(s)"),  # 13 GiB share
        (180.6, 2, Severity.WARN, "far below the checkpoint's share"),  # incident 4's figures
        (None, 2, Severity.UNKNOWN, "checkpoint's size is not known"),
    ],
)
def test_memory_plan_of_a_recorded_rocm_start(checkpoint_gib, tp, severity, words):
    """The recorded ROCm log states 14.07 GiB on rank 0; against a 180.6 GiB checkpoint over
    TP2 (90.3 GiB a rank) that is the paged fallback of incident 4, and launch says so."""
    s = classify_text((LOGS / "rocm-0.33-fresh-dflash.log").read_text())
    assert s.model_memory_gib_ranks == (14.07,)
    size = None if checkpoint_gib is None else int(checkpoint_gib * GIB)
    [f] = by_id(judge_startup(s, ctx(checkpoint_bytes=size, tp=tp)), "launch.memory.plan")
    assert f.severity is severity
    assert words in f.message


def test_memory_plan_on_the_cpu_build_is_unknown_never_ok():
    """vLLM's CPU build states no model memory: the plan is unknown and says why."""
    s = classify_text((RECORDED / "startup-fresh-compile.log").read_text())
    assert s.server_started and s.model_memory_gib_ranks == ()
    [f] = by_id(judge_startup(s, ctx(checkpoint_bytes=GIB)), "launch.memory.plan")
    assert f.severity is Severity.UNKNOWN
    assert "stated no model memory" in f.message


def test_no_memory_plan_for_a_start_that_never_became_ready():
    s = classify_text((LOGS / "rocm-0.33-fresh-dflash.log").read_text())
    assert by_id(judge_startup(s, ctx(checkpoint_bytes=GIB, complete=False)),
                 "launch.memory.plan") == []
