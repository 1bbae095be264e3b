"""Judgements on a startup summary (pure): what the startup log says that someone must hear.

- After a move-aside the log must show a fresh compile: a cache load then means the engine found
  a warm cache the invalidation did not reach, the no-op failure of docs/architecture.md incident 3.
- A KV pool more than 10 % smaller than the previous start of the same seat and replica is
  reported with both figures: enabling a drafter cut it 17.5 % and ~70 % in the field (incident 4).
- The memory plan (rocmseat.launch.memplan): model memory per rank against the checkpoint's
  bytes / TP; far below means weights in a paged or host fallback (incident 4 of
  docs/architecture.md: 9.5 GB pinned instead of 180.6, nothing logged).
- The seat's `[[expect_log]]` rules: a line that must appear (e.g. "experts resident") or must
  not (a paged-fallback warning), at warn or fail.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocmseat.findings import Finding, Severity
from rocmseat.launch.memplan import judge_memory_plan
from rocmseat.launch.startuplog import CompileOutcome, StartupSummary

KV_SHRINK_LIMIT = 0.10


@dataclass(frozen=True, slots=True)
class ExpectRule:
    pattern: str  # Python regex
    when: str  # "must_appear" | "must_not_appear"
    severity: Severity  # warn | fail


@dataclass(frozen=True, slots=True)
class PreviousStart:
    kv_cache_tokens: int
    started_at: str  # UTC stamp of that start
    key_digest: str | None


@dataclass(frozen=True, slots=True)
class JudgeContext:
    replica: str
    moved_aside: Path | None  # the stale dir of this start's move-aside, None if kept
    cache_dir: Path | None  # the replica's cache dir in the store
    drafter_configured: bool
    previous: PreviousStart | None
    expect: Sequence[ExpectRule] = ()
    complete: bool = True  # False when the engine died or timed out before ready
    key_digest: str | None = None  # this start's config key (None: not known)
    checkpoint_bytes: int | None = None  # target + drafter weights on disk (None: not known)
    tp: int = 1


def judge_startup(summary: StartupSummary, ctx: JudgeContext) -> list[Finding]:
    findings: list[Finding] = []
    findings += _judge_cache(summary, ctx)
    findings += _judge_kv(summary, ctx)
    findings += _judge_drafter(summary, ctx)
    findings += _judge_expect(summary, ctx)
    if ctx.complete:  # a start that died before ready has not loaded everything it would
        findings.append(judge_memory_plan(summary.model_memory_gib_ranks, ctx.checkpoint_bytes,
                                          ctx.tp, subject=ctx.replica))
    for fatal in summary.fatal:
        findings.append(Finding(
            "launch.log.fatal", Severity.FAIL, ctx.replica,
            f"fatal signature {fatal.signature!r} in the engine log: {fatal.line.strip()}",
            hint=_FATAL_HINTS.get(fatal.signature, ""),
            data={"signature": fatal.signature, "line": fatal.line},
        ))
    for warning in summary.warnings:
        findings.append(Finding(
            f"launch.log.{warning.kind}", Severity.WARN, ctx.replica,
            f"engine log: {warning.line.strip()}", data={"line": warning.line},
        ))
    return findings


_FATAL_HINTS: Mapping[str, str] = {
    "invalid_device_pointer": "HIP IPC failed (error 17): run "
    "`rocmseat preflight --pair A,B --hip`; a pair across sockets or root complexes cannot "
    "share memory",
    "cuda_error": "the custom all-reduce exited without a traceback (csrc/custom_all_reduce.cuh)",
    "rpc_timeout": "a TP worker hung for VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS; try NCCL_PROTO=Simple "
    "on gfx12 (vllm#40980)",
    "compile_failed": "a previous compile left a corrupt artifact: `rocmseat cache-audit`",
}


def _under(path: str, root: Path) -> bool:
    try:
        return Path(os.path.normpath(path)).is_relative_to(os.path.normpath(root))
    except ValueError:
        return False


def _judge_cache(summary: StartupSummary, ctx: JudgeContext) -> list[Finding]:
    findings: list[Finding] = []
    if ctx.cache_dir is not None:
        outside = sorted({
            p for c in summary.components for p in c.paths
            if p.startswith("/") and not _under(p, ctx.cache_dir)
        })
        if outside:
            findings.append(Finding(
                "launch.cache.outside_store", Severity.WARN, ctx.replica,
                f"the engine used compile caches outside the store {ctx.cache_dir}: "
                + ", ".join(outside),
                hint="a move-aside cannot reach them; remove cache_dir / *_CACHE_DIR overrides",
                data={"paths": outside, "cache_dir": str(ctx.cache_dir)},
            ))
    if ctx.moved_aside is None:
        return findings
    loaded = [c.component for c in summary.components if c.outcome is CompileOutcome.CACHE_LOAD]
    failed = [c for c in summary.components if c.outcome is CompileOutcome.LOAD_FAILURE]
    fresh = [c.component for c in summary.components if c.outcome is CompileOutcome.FRESH_COMPILE]
    data = {"moved_aside": str(ctx.moved_aside), "loaded": loaded, "fresh": fresh}
    if loaded:
        findings.append(Finding(
            "launch.cache.warm_after_invalidation", Severity.WARN, ctx.replica,
            "WARNING: the invalidation hit a warm cache: the cache was moved aside to "
            f"{ctx.moved_aside} but the engine loaded compiled graphs for {', '.join(loaded)}",
            hint="the engine reads a cache outside the store (VLLM_CACHE_ROOT, "
            "--compilation-config cache_dir, TORCHINDUCTOR_CACHE_DIR ...): find it in the log "
            "('Directly load ... from path') and move it aside",
            data=data,
        ))
    for comp in failed:
        findings.append(Finding(
            "launch.cache.artifact_after_invalidation", Severity.WARN, ctx.replica,
            f"[{comp.component}] an artifact survived the move-aside to {ctx.moved_aside} "
            f"(load failure, compiled again): {'; '.join(comp.load_failure_reasons)}",
            data={**data, "paths": list(comp.paths)},
        ))
    if loaded or failed:
        return findings
    if fresh:
        findings.append(Finding(
            "launch.cache.fresh_after_invalidation", Severity.OK, ctx.replica,
            f"fresh compile after the move-aside to {ctx.moved_aside}: {', '.join(fresh)}",
            data=data,
        ))
    elif summary.compile_disabled is not None:
        findings.append(Finding(
            "launch.cache.fresh_after_invalidation", Severity.OK, ctx.replica,
            "compilation is off, nothing to load from a stale cache: "
            + summary.compile_disabled.strip(), data=data,
        ))
    else:
        severity = Severity.WARN if ctx.complete else Severity.UNKNOWN
        findings.append(Finding(
            "launch.cache.warm_after_invalidation", severity, ctx.replica,
            f"the cache was moved aside to {ctx.moved_aside} but the log shows no fresh compile"
            + ("" if ctx.complete else " (the engine stopped before it compiled)")
            + ": the invalidation may have hit a warm cache",
            data=data,
        ))
    return findings


def _judge_kv(summary: StartupSummary, ctx: JudgeContext) -> list[Finding]:
    tokens = summary.kv_cache_tokens
    if tokens is None:
        if not ctx.complete:
            return []
        return [Finding(
            "launch.kv.pool", Severity.UNKNOWN, ctx.replica,
            "the engine log states no KV cache size ('KV cache size: N tokens' not seen)",
        )]
    conc = summary.max_concurrency
    plan = f"{tokens:,} tokens" + (f", max concurrency {conc:.2f}x" if conc is not None else "")
    data: dict[str, object] = {"kv_cache_tokens": tokens, "max_concurrency": conc}
    prev = ctx.previous
    if prev is None:
        return [Finding("launch.kv.pool", Severity.OK, ctx.replica,
                        f"KV pool {plan} (first recorded start)", data=data)]
    data |= {"previous_kv_cache_tokens": prev.kv_cache_tokens, "previous_started_at":
             prev.started_at}
    shrink = 1.0 - tokens / prev.kv_cache_tokens if prev.kv_cache_tokens > 0 else 0.0
    data["shrink_ratio"] = round(shrink, 4)
    if shrink > KV_SHRINK_LIMIT:
        # Only a comparison of both keys says whether the key changed; either one unknown says
        # nothing (a shrink under the same key is the drafter-free surprise to look into).
        changed = ""
        if prev.key_digest is not None and ctx.key_digest is not None:
            changed = (" (config key changed)" if prev.key_digest != ctx.key_digest
                       else " (same config key)")
        data["key_changed"] = (None if prev.key_digest is None or ctx.key_digest is None
                               else prev.key_digest != ctx.key_digest)
        return [Finding(
            "launch.kv.shrunk", Severity.WARN, ctx.replica,
            f"KV pool shrank {shrink:.1%}: {tokens:,} tokens now, {prev.kv_cache_tokens:,} at "
            f"the previous start {prev.started_at}{changed}",
            hint="a drafter or a new memory plan took KV memory: the concurrency ceiling fell",
            data=data,
        )]
    return [Finding("launch.kv.pool", Severity.OK, ctx.replica,
                    f"KV pool {plan} (previous start {prev.kv_cache_tokens:,} tokens)",
                    data=data)]


def _judge_drafter(summary: StartupSummary, ctx: JudgeContext) -> list[Finding]:
    if not ctx.drafter_configured:
        return []
    if summary.drafter_loaded:
        return [Finding("launch.drafter.loaded", Severity.OK, ctx.replica,
                        "drafter loaded: " + (summary.drafter_evidence or "").strip())]
    if not ctx.complete:
        return []
    return [Finding(
        "launch.drafter.loaded", Severity.WARN, ctx.replica,
        "the seat configures a drafter but the engine log never shows it loaded",
        hint="look for 'Loading drafter model...' or a drafter compile tag in the journal",
    )]


def _judge_expect(summary: StartupSummary, ctx: JudgeContext) -> list[Finding]:
    findings: list[Finding] = []
    for index, rule in enumerate(ctx.expect):
        hit = summary.expect_hits.get(index)
        data = {"pattern": rule.pattern, "when": rule.when, "line": hit}
        if rule.when == "must_appear":
            if hit is not None:
                findings.append(Finding("launch.expect_log", Severity.OK, ctx.replica,
                                        f"expected line seen /{rule.pattern}/", data=data))
            elif ctx.complete:
                findings.append(Finding(
                    "launch.expect_log", rule.severity, ctx.replica,
                    f"the engine log never matched /{rule.pattern}/ (must_appear)", data=data))
        elif hit is not None:
            findings.append(Finding(
                "launch.expect_log", rule.severity, ctx.replica,
                f"the engine log matched /{rule.pattern}/ (must_not_appear): {hit.strip()}",
                data=data))
        elif ctx.complete:
            findings.append(Finding("launch.expect_log", Severity.OK, ctx.replica,
                                    f"no line matched /{rule.pattern}/", data=data))
    return findings
