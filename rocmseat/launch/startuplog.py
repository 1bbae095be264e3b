"""The startup-log classifier: vLLM's startup lines -> what the engine did (pure).

The engine states its compile-cache behaviour and its memory plan in its startup log
(docs/architecture.md, incidents 3 and 4); nobody reads it. `StartupLogReader.feed(line)`
reads one line at a time as the log streams and returns the events of that line;
`summary()` is a frozen snapshot.

Line formats: vLLM 0.33.0 sources (vllm/compilation/decorators.py, backends.py,
vllm/v1/core/kv_cache_utils.py) and the CPU build 0.32.0 as seen running (docs/demo.md).
Every pattern is searched anywhere in the line, so the
`(EngineCore pid=N) INFO MM-DD HH:MM:SS [file.py:N]` prefix, a
`VLLM_LOGGING_PREFIX` or a journald prefix does not matter. Compile lines carry the model tag of
the component as `[backbone] `, `[draft_model] `, `[eagle_head] `, `[dflash_head] ` ...
(vllm/compilation/backends.py: `local_cache_dir = .../rank_R_D/<prefix>`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rocmseat.engines.base import Engine
from rocmseat.launch.startupfacts import (
    UNTAGGED,
    CompileOutcome,
    ComponentCompile,
    FatalSignature,
    LogEvent,
    StartupSummary,
)

# The facts live in startupfacts.py; they are part of this module's interface too
# (docs/architecture.md names rocmseat.launch.startuplog).
__all__ = [
    "UNTAGGED",
    "CompileOutcome",
    "ComponentCompile",
    "FatalSignature",
    "LogEvent",
    "StartupLogReader",
    "StartupSummary",
    "classify_text",
]

_TAG = r"(?:\[(?P<component>[A-Za-z][A-Za-z0-9_]*)\] )?"

# (kind, outcome, regex). The tag group precedes the phrase; the [file.py:N] prefix cannot match
# it because the tag class has no '.' or ':'.
_COMPILE_PATTERNS: tuple[tuple[CompileOutcome, re.Pattern[str]], ...] = (
    # (b) cache hits (vllm/compilation/decorators.py)
    (CompileOutcome.CACHE_LOAD,
     re.compile(_TAG + r"Directly load AOT compilation from path (?P<path>\S+)")),
    (CompileOutcome.CACHE_LOAD,
     re.compile(_TAG + r"Directly load the compiled graph\(s\) for compile range")),
    # (c) load failure: found, failed, compiled again
    (CompileOutcome.LOAD_FAILURE,
     re.compile(_TAG + r"Compiling model again due to a load failure from (?P<path>\S+?),?"
                r"(?: reason: (?P<reason>.*))?$")),
    # (a) fresh compile
    (CompileOutcome.FRESH_COMPILE,
     re.compile(_TAG + r"saved AOT compiled function to (?P<path>\S+)")),
    (CompileOutcome.FRESH_COMPILE,
     re.compile(_TAG + r"Compiling a graph for compile range")),
    (CompileOutcome.FRESH_COMPILE,
     re.compile(_TAG + r"Cache the graph of compile range")),
)
_CACHE_DIR = re.compile(_TAG + r"Using cache directory: (?P<path>\S+) for vLLM's torch\.compile")
_COMPILE_OFF = re.compile(
    r"Enforce eager set, disabling torch\.compile|vLLM's torch\.compile cache is disabled"
    r"|Cudagraph is disabled under eager mode"
)

# Numbers are bounded in the patterns: "1.2.3" or 400 digits never reach float()/int() (a
# ValueError or an inf); such a line simply does not match and the figure stays unknown.
_TOKENS = r"\d{1,3}(?:,?\d{3}){0,5}|\d{1,18}"
_NUM = r"\d{1,12}(?:\.\d{1,12})?"
_KV_SIZE = re.compile(
    r"(?:(?P<device>GPU \+ host|GPU|CPU|XPU|TPU|NPU|HPU) )?KV cache size: "
    r"(?P<tokens>" + _TOKENS + r") tokens"
)
_MAX_CONC = re.compile(
    r"Maximum concurrency for (?P<per_req>" + _TOKENS + r") tokens per request: "
    r"(?P<conc>\d{1,12}(?:\.\d{1,12})?)x"
)
_AVAILABLE_KV = re.compile(r"Available KV cache memory: (?P<gib>\d{1,12}(?:\.\d{1,12})?) GiB")
_MODEL_MEM = re.compile(
    r"Model loading took (?P<gib>" + _NUM + r") GiB(?: memory)? and (?P<s>" + _NUM
    + r") s(?:econds)?"
)
_CHECKPOINT = re.compile(r"Checkpoint size: (?P<gib>\d{1,12}(?:\.\d{1,12})?) GiB")
_GRAPH = re.compile(
    r"Graph capturing finished in (?P<s>" + _NUM + r") secs?, took (?P<gib>" + _NUM + r") GiB"
)
_INIT = re.compile(
    r"init engine \(profile, create kv cache, warmup model\) took (?P<s>\d{1,12}(?:\.\d{1,12})?) s"
    r"(?: \(compilation: (?P<c>\d{1,12}(?:\.\d{1,12})?) s\))?"
)
_SPEC = re.compile(r"speculative_config=(?P<repr>SpeculativeConfig\([^)]*\)|None)")
_DRAFTER = re.compile(
    r"Loading drafter model\.\.\."
    r"|Detected (?:EAGLE|MTP) model\b.*(?:Sharing|distinct)"
    r"|Using Eagle3 auxiliary layers from"
    r"|Capturing model for speculator"
)
_DRAFTER_TAGS = frozenset(
    {"draft_model", "eagle_head", "dflash_head", "dspark_head", "extract_hidden_states"}
)
_SERVER = re.compile(r"Starting vLLM (?:API )?server on|Application startup complete")

# Fatal signatures: the custom all-reduce CUDACHECK printf exits with no
# traceback (csrc/custom_all_reduce.cuh); HIP error 17; EngineCore death; the TP>1 RPC timeout.
_FATAL: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cuda_error", re.compile(r"Failed: Cuda error")),
    ("invalid_device_pointer", re.compile(r"invalid device pointer|hipErrorInvalidDevicePointer")),
    ("engine_core_fatal", re.compile(r"EngineCore encountered a fatal error")),
    ("rpc_timeout", re.compile(r"RPC call to execute_model timed out")),
    ("compile_failed", re.compile(r"vLLM failed to compile the model")),
)
_WARN: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("shm_broadcast_stall", re.compile(r"No available shared memory broadcast block found")),
    ("rocm_profiling_fallback", re.compile(r"Free memory grew by \S+ GiB during profiling")),
)


def _number(text: str) -> int:
    return int(text.replace(",", ""))


class StartupLogReader:
    """Accumulates what the startup log says. Not thread-safe: feed it from one thread."""

    def __init__(self, expect_patterns: Sequence[str] = (),
                 engine: Engine | None = None) -> None:
        self._expect = [re.compile(p) for p in expect_patterns]
        # another engine's memory lines (rocmseat.engines: Engine.memory_facts); vLLM's are
        # this module's own patterns
        self._engine = engine if engine is not None and engine.kind != "vllm" else None
        self._expect_hits: dict[int, str] = {}
        self._outcomes: dict[str, list[CompileOutcome]] = {}
        self._paths: dict[str, list[str]] = {}
        self._reasons: dict[str, list[str]] = {}
        self._compile_disabled: str | None = None
        self._kv_tokens: int | None = None
        self._kv_device: str | None = None
        self._max_conc: float | None = None
        self._max_conc_tokens: int | None = None
        self._available_kv: float | None = None
        self._model_mem: float | None = None
        self._model_mem_ranks: list[float] = []
        self._checkpoint_gib: list[float] = []
        self._model_load_s: float | None = None
        self._graph_gib: float | None = None
        self._init_s: float | None = None
        self._compilation_s: float | None = None
        self._spec: str | None = None
        self._drafter_evidence: str | None = None
        self._server = False
        self._fatal: list[FatalSignature] = []
        self._warnings: list[LogEvent] = []
        self._lines = 0

    def feed(self, line: str) -> list[LogEvent]:
        line = line.rstrip("\r\n")
        self._lines += 1
        events: list[LogEvent] = []
        for index, pattern in enumerate(self._expect):
            if index not in self._expect_hits and pattern.search(line):
                self._expect_hits[index] = line
        self._compile_events(line, events)
        self._memory_events(line, events)
        if (m := _SPEC.search(line)) and m.group("repr") != "None":
            self._spec = m.group("repr")
        if self._drafter_evidence is None and _DRAFTER.search(line):
            self._drafter_evidence = line
            events.append(LogEvent("drafter_loaded", line=line))
        if _SERVER.search(line):
            self._server = True
            events.append(LogEvent("server_started", line=line))
        for signature, pattern in _FATAL:
            if pattern.search(line):
                self._fatal.append(FatalSignature(signature, line))
                events.append(LogEvent("fatal", value=signature, line=line))
        for kind, pattern in _WARN:
            if pattern.search(line):
                event = LogEvent(kind, line=line)
                self._warnings.append(event)
                events.append(event)
        return events

    def _compile_events(self, line: str, events: list[LogEvent]) -> None:
        if (m := _CACHE_DIR.search(line)) is not None:
            component = m.group("component") or UNTAGGED
            self._note_path(component, m.group("path"))
        if self._compile_disabled is None and _COMPILE_OFF.search(line):
            self._compile_disabled = line
            events.append(LogEvent("compile_disabled", line=line))
        for outcome, pattern in _COMPILE_PATTERNS:
            m = pattern.search(line)
            if m is None:
                continue
            component = m.group("component") or UNTAGGED
            seen = self._outcomes.setdefault(component, [])
            if outcome not in seen:
                seen.append(outcome)
            groups = m.groupdict()
            if groups.get("path"):
                self._note_path(component, groups["path"])
            if outcome is CompileOutcome.LOAD_FAILURE:
                reason = (groups.get("reason") or "").strip() or "(no reason given)"
                if reason not in self._reasons.setdefault(component, []):
                    self._reasons[component].append(reason)
            if component in _DRAFTER_TAGS and self._drafter_evidence is None:
                self._drafter_evidence = line
                events.append(LogEvent("drafter_loaded", component=component, line=line))
            events.append(LogEvent(outcome.value, component=component, line=line))
            break

    def _note_path(self, component: str, path: str) -> None:
        paths = self._paths.setdefault(component, [])
        if path not in paths:
            paths.append(path)

    def _engine_memory(self, line: str, events: list[LogEvent]) -> None:
        """SGLang's and llama.cpp's memory lines, into the same summary fields: the KV pool in
        tokens, its size (GiB), the model's memory (GiB; the largest of several lines)."""
        if self._engine is None:
            return
        for fact in self._engine.memory_facts(line):
            gib = fact.value / 1024.0 if fact.unit == "MiB" else fact.value
            if fact.name == "kv_cache_tokens":
                self._kv_tokens = int(fact.value)
                events.append(LogEvent("kv_cache_tokens", value=self._kv_tokens, line=line))
            elif fact.name in ("kv_cache_gib", "kv_cache_mib"):
                self._available_kv = gib
            elif fact.name in ("model_weights_gib", "model_buffer_mib"):
                self._model_mem = gib if self._model_mem is None else max(self._model_mem, gib)
                self._model_mem_ranks.append(gib)
                events.append(LogEvent("model_memory_gib", value=gib, line=line))

    def _memory_events(self, line: str, events: list[LogEvent]) -> None:
        if self._engine is not None:
            self._engine_memory(line, events)
            return
        if (m := _KV_SIZE.search(line)) is not None:
            self._kv_tokens = _number(m.group("tokens"))
            self._kv_device = m.group("device")
            events.append(LogEvent("kv_cache_tokens", value=self._kv_tokens, line=line))
        if (m := _MAX_CONC.search(line)) is not None:
            self._max_conc_tokens = _number(m.group("per_req"))
            self._max_conc = float(m.group("conc"))
            events.append(LogEvent("max_concurrency", value=self._max_conc, line=line))
        if (m := _AVAILABLE_KV.search(line)) is not None:
            self._available_kv = float(m.group("gib"))
        if (m := _MODEL_MEM.search(line)) is not None:
            gib = float(m.group("gib"))
            # Every TP rank prints its own share; the largest is the one that limits the pool.
            self._model_mem = gib if self._model_mem is None else max(self._model_mem, gib)
            self._model_mem_ranks.append(gib)
            self._model_load_s = float(m.group("s"))
            events.append(LogEvent("model_memory_gib", value=gib, line=line))
        if (m := _CHECKPOINT.search(line)) is not None:
            self._checkpoint_gib.append(float(m.group("gib")))
        if (m := _GRAPH.search(line)) is not None:
            self._graph_gib = float(m.group("gib"))
        if (m := _INIT.search(line)) is not None:
            self._init_s = float(m.group("s"))
            self._compilation_s = float(m.group("c")) if m.group("c") else None
            events.append(LogEvent("init_engine_s", value=self._init_s, line=line))

    def summary(self) -> StartupSummary:
        components = tuple(
            ComponentCompile(
                component=name,
                outcomes=tuple(outcomes),
                paths=tuple(self._paths.get(name, ())),
                load_failure_reasons=tuple(self._reasons.get(name, ())),
            )
            for name, outcomes in self._outcomes.items()
        )
        return StartupSummary(
            components=components,
            compile_disabled=self._compile_disabled,
            kv_cache_tokens=self._kv_tokens,
            kv_cache_device=self._kv_device,
            max_concurrency=self._max_conc,
            max_concurrency_tokens_per_request=self._max_conc_tokens,
            available_kv_cache_gib=self._available_kv,
            model_memory_gib=self._model_mem,
            model_load_s=self._model_load_s,
            graph_capture_gib=self._graph_gib,
            init_engine_s=self._init_s,
            compilation_s=self._compilation_s,
            speculative_config=self._spec,
            drafter_loaded=self._drafter_evidence is not None,
            drafter_evidence=self._drafter_evidence,
            server_started=self._server,
            fatal=tuple(self._fatal),
            warnings=tuple(self._warnings),
            expect_hits=dict(self._expect_hits),
            lines_read=self._lines,
            model_memory_gib_ranks=tuple(self._model_mem_ranks),
            checkpoint_gib=tuple(self._checkpoint_gib),
        )


def classify_text(text: str, expect_patterns: Sequence[str] = ()) -> StartupSummary:
    """Classify a whole log at once (tests, `launch` replays)."""
    reader = StartupLogReader(expect_patterns)
    for line in text.splitlines():
        reader.feed(line)
    return reader.summary()

