"""The startup report (`startup.json` and every `history/<stamp>-<pid>.json` beside it, schema
`rocmseat.startup/v1`, rocmseat.launch.report) as a strict model: what the next start compares
its KV pool with and what remediation reads of the last start, so a damaged or edited report is
one located line (the entry is skipped), never a KeyError or a KV pool of 1e400 tokens.
Launch writes the report; launch, watch (remediation) and the speculation gate read it (both
rooms above launch).

Reports of older rocmseat versions lack keys added since (`signal_received`, `refused`, the
per-rank figures): every key but the schema, `started_at` and `log` has a default. Free text
(the engine's log lines, its argv, a reason) is bounded, not filtered: it is what the engine
wrote; identifiers (seat, replica, component, signature) carry no control character.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from rocmseat.docmodel import Finite, Line, NonNegative, StrictDoc, UtcStamp
from rocmseat.findings_doc import FindingDoc

SCHEMA = "rocmseat.startup/v1"
MAX_TEXT = 1 << 16  # one log line, one argv item, one reason
MAX_ITEMS = 10_000  # argv items, warnings, paths ...
MAX_COUNT = (1 << 63) - 1

Text = Annotated[str, Field(max_length=MAX_TEXT)]
Ident = Annotated[Line, Field(max_length=255)]
Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
CompileOutcome = Literal["fresh_compile", "cache_load", "load_failure"]


class ComponentDoc(StrictDoc):
    outcome: CompileOutcome
    outcomes: Annotated[list[CompileOutcome], Field(max_length=MAX_ITEMS, default_factory=list)]
    paths: Annotated[list[Text], Field(max_length=MAX_ITEMS, default_factory=list)]
    load_failure_reasons: Annotated[list[Text], Field(max_length=MAX_ITEMS, default_factory=list)]


class FatalDoc(StrictDoc):
    signature: Ident
    line: Text


class WarningDoc(StrictDoc):
    kind: Ident
    line: Text


class LogDoc(StrictDoc):
    """StartupSummary.to_json (rocmseat.launch.startupfacts). The GiB figures are what vLLM
    logged, which may be negative (an "Available KV cache memory" below zero), so finite only."""

    components: Annotated[dict[Ident, ComponentDoc], Field(max_length=256, default_factory=dict)]
    compile_disabled: Text | None = None
    kv_cache_tokens: Count | None = None
    kv_cache_device: Ident | None = None
    max_concurrency: NonNegative | None = None
    max_concurrency_tokens_per_request: Count | None = None
    available_kv_cache_gib: Finite | None = None
    model_memory_gib: Finite | None = None
    model_memory_gib_ranks: Annotated[list[Finite], Field(max_length=MAX_ITEMS,
                                                          default_factory=list)]
    checkpoint_gib: Annotated[list[Finite], Field(max_length=MAX_ITEMS, default_factory=list)]
    model_load_s: NonNegative | None = None
    graph_capture_gib: Finite | None = None
    init_engine_s: NonNegative | None = None
    compilation_s: NonNegative | None = None
    speculative_config: Text | None = None
    drafter_loaded: bool = False
    drafter_evidence: Text | None = None
    server_started: bool = False
    fatal: Annotated[list[FatalDoc], Field(max_length=MAX_ITEMS, default_factory=list)]
    warnings: Annotated[list[WarningDoc], Field(max_length=MAX_ITEMS, default_factory=list)]
    lines_read: Count = 0


class ConfigKeyDoc(StrictDoc):
    digest: Ident | None = None
    reason: Text = ""


class CacheDoc(StrictDoc):
    dir: Text | None = None
    moved_aside: Text | None = None
    changed_factors: Annotated[list[Text], Field(max_length=MAX_ITEMS, default_factory=list)]


class PlanDoc(StrictDoc):
    pci_pair: Annotated[list[Ident], Field(max_length=64, default_factory=list)]
    hip_indices: (
        Annotated[list[Annotated[int, Field(ge=0, le=4095)]], Field(max_length=64)] | None
    ) = None
    hip_index_source: Ident | None = None
    numa_node: Annotated[int, Field(ge=-1, le=4095)] | None = None
    binding: Ident | None = None
    port: Annotated[int, Field(ge=0, le=65535)] | None = None
    argv: Annotated[list[Text], Field(max_length=MAX_ITEMS, default_factory=list)]


class OutcomeDoc(StrictDoc):
    ready: bool = False
    ready_after_s: NonNegative | None = None
    timed_out: bool = False
    exit_code: Annotated[int, Field(ge=0, le=255)] | None = None
    engine_returncode: Annotated[int, Field(ge=-255, le=255)] | None = None
    signal_received: Annotated[int, Field(ge=1, le=128)] | None = None
    refused: bool = False
    reason: Text | None = None


class StartupReportDoc(StrictDoc):
    schema_: Literal["rocmseat.startup/v1"] = Field(alias="schema")
    seat: Ident | None = None
    replica: Ident | None = None
    started_at: UtcStamp
    written_at: UtcStamp | None = None
    config_key: Annotated[ConfigKeyDoc, Field(default_factory=ConfigKeyDoc)]
    cache: Annotated[CacheDoc, Field(default_factory=CacheDoc)]
    plan: Annotated[PlanDoc, Field(default_factory=PlanDoc)]
    outcome: OutcomeDoc | None = None
    log: LogDoc
    findings: Annotated[list[FindingDoc], Field(max_length=MAX_ITEMS, default_factory=list)]
    # the pair's partition modes and pm_policy levels at the start (launch/report.py)
    node_policy: Annotated[dict[Ident, Annotated[dict[Ident, Ident], Field(max_length=16)]],
                           Field(max_length=64)] | None = None
