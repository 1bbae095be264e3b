"""What the startup-log classifier (startuplog.py) reads from vLLM's startup lines: the frozen
facts of one line (LogEvent) and of a whole start (StartupSummary)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

UNTAGGED = "model"  # compile lines of releases that print no model tag


class CompileOutcome(enum.StrEnum):
    FRESH_COMPILE = "fresh_compile"
    CACHE_LOAD = "cache_load"
    LOAD_FAILURE = "load_failure"  # an artifact was found, failed to load, compiled again


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One fact read from one line. `kind` is a stable string; `value` depends on it."""

    kind: str
    component: str | None = None
    value: str | float | int | None = None
    line: str = ""


@dataclass(frozen=True, slots=True)
class FatalSignature:
    signature: str  # stable id, e.g. "invalid_device_pointer"
    line: str


@dataclass(frozen=True, slots=True)
class ComponentCompile:
    """What one component (backbone, drafter head ...) did with its compile cache."""

    component: str
    outcomes: tuple[CompileOutcome, ...]  # in log order, duplicates (TP ranks) collapsed
    paths: tuple[str, ...]  # cache paths named by its lines
    load_failure_reasons: tuple[str, ...]

    @property
    def outcome(self) -> CompileOutcome:
        """Load failure outranks fresh compile (it compiled, but an artifact survived);
        a fresh compile outranks a load (one rank compiling means the cache was not complete)."""
        for wanted in (
            CompileOutcome.LOAD_FAILURE,
            CompileOutcome.FRESH_COMPILE,
            CompileOutcome.CACHE_LOAD,
        ):
            if wanted in self.outcomes:
                return wanted
        raise AssertionError("a ComponentCompile always has an outcome")


@dataclass(frozen=True, slots=True)
class StartupSummary:
    components: tuple[ComponentCompile, ...]
    compile_disabled: str | None  # the line saying compilation or its cache is off
    kv_cache_tokens: int | None
    kv_cache_device: str | None  # "GPU", "CPU", "GPU + host"
    max_concurrency: float | None  # "Maximum concurrency for N tokens per request: X x"
    max_concurrency_tokens_per_request: int | None
    available_kv_cache_gib: float | None
    model_memory_gib: float | None  # "Model loading took X GiB" (largest rank; drafter included)
    model_load_s: float | None
    graph_capture_gib: float | None
    init_engine_s: float | None
    compilation_s: float | None
    speculative_config: str | None  # the SpeculativeConfig(...) repr of the config line
    drafter_loaded: bool
    drafter_evidence: str | None
    server_started: bool
    fatal: tuple[FatalSignature, ...]
    warnings: tuple[LogEvent, ...]  # non-fatal trouble (shm broadcast stalls ...)
    expect_hits: Mapping[int, str]  # index of a seat expect_log pattern -> first matching line
    lines_read: int
    # Every "Model loading took X GiB" figure in log order (one per TP rank): the memory plan
    # (rocmseat.launch.memplan) judges the smallest against the checkpoint's share.
    model_memory_gib_ranks: tuple[float, ...] = ()
    # "Checkpoint size: X GiB" (vllm/model_executor/model_loader/weight_utils.py), one per
    # checkpoint loaded (target, then drafter): what the engine itself read from disk.
    checkpoint_gib: tuple[float, ...] = ()

    def component(self, name: str) -> ComponentCompile | None:
        return next((c for c in self.components if c.component == name), None)

    def to_json(self) -> dict[str, Any]:
        """The one serialisation of a startup summary: launch's startup report ("log") and
        the gate's arm records (docs/launch.md, "Startup report")."""
        return {
            "components": {
                c.component: {
                    "outcome": c.outcome.value,
                    "outcomes": [o.value for o in c.outcomes],
                    "paths": list(c.paths),
                    "load_failure_reasons": list(c.load_failure_reasons),
                }
                for c in self.components
            },
            "compile_disabled": self.compile_disabled,
            "kv_cache_tokens": self.kv_cache_tokens,
            "kv_cache_device": self.kv_cache_device,
            "max_concurrency": self.max_concurrency,
            "max_concurrency_tokens_per_request": self.max_concurrency_tokens_per_request,
            "available_kv_cache_gib": self.available_kv_cache_gib,
            "model_memory_gib": self.model_memory_gib,
            "model_memory_gib_ranks": list(self.model_memory_gib_ranks),
            "checkpoint_gib": list(self.checkpoint_gib),
            "model_load_s": self.model_load_s,
            "graph_capture_gib": self.graph_capture_gib,
            "init_engine_s": self.init_engine_s,
            "compilation_s": self.compilation_s,
            "speculative_config": self.speculative_config,
            "drafter_loaded": self.drafter_loaded,
            "drafter_evidence": self.drafter_evidence,
            "server_started": self.server_started,
            "fatal": [{"signature": f.signature, "line": f.line} for f in self.fatal],
            "warnings": [{"kind": w.kind, "line": w.line} for w in self.warnings],
            "lines_read": self.lines_read,
        }
