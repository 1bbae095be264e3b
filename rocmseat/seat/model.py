"""The seat file schema (docs/seat.md).

Pydantic v2 models with extra="forbid": a misspelt key is an error, never silently ignored.
Paths are resolved by the loader's validation context (`base_dir`: the seat file's directory),
so `seat.model.path` is always absolute. `load_seat` (rocmseat.seat.load) is the entry point.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
)

from rocmseat.sysfs.parse import is_pci_address

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# User-facing SpeculativeConfig methods of vLLM 0.33.0 (vllm/config/speculative.py,
# `SpeculativeMethod`, vLLM 0.33.0). Model-specific `*_mtp` names are accepted by
# vLLM and rewritten to `mtp`, so they are accepted here as well.
SPECULATIVE_METHODS = frozenset(
    {
        "ngram", "ngram_gpu", "suffix", "draft_model", "custom_class", "eagle", "eagle3",
        "extract_hidden_states", "mtp", "dflash", "dspark",
    }
)
# Methods that need a drafter checkpoint of their own; ngram/suffix need none and mtp/dspark
# reuse the target checkpoint when `model` is absent (vllm/config/speculative.py, vLLM 0.33.0).
METHODS_NEEDING_PATH = frozenset({"draft_model", "eagle", "eagle3", "dflash", "custom_class"})
# Keys the seat sets itself in --speculative-config; [drafter] extra may not repeat them
# (checked with the other cross-key rules in rocmseat.seat.rules, which name the key's line).
RESERVED_EXTRA_KEYS = frozenset(
    {"method", "model", "num_speculative_tokens", "num_speculative_tokens_per_batch_size"}
)


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    """`~` expands; a relative path is relative to the seat file's directory."""
    expanded = value.expanduser()
    if expanded.is_absolute():
        return expanded
    base = (info.context or {}).get("base_dir")
    if base is None:
        return Path(os.path.normpath(expanded.absolute()))
    return Path(os.path.normpath(Path(base) / expanded))


# strict=False: TOML gives strings, and a strict Path field would accept only Path objects.
SeatPath = Annotated[Path, Field(strict=False), AfterValidator(_resolve_path)]
PositiveInt = Annotated[int, Field(gt=0, strict=True)]
Bool = Annotated[bool, Field(strict=True)]


class _Section(BaseModel):
    # Lax for containers (TOML arrays are lists, the model keeps tuples); scalars are strict
    # through strict=True on their Field (PositiveInt, Bool ...): "8" or true is not an int.
    model_config = ConfigDict(extra="forbid", frozen=True)


class Engine(_Section):
    command: tuple[str, ...] = Field(min_length=1)
    model_flag: str = ""
    python: SeatPath
    image_digest: str | None = None
    host: str = "127.0.0.1"

    @field_validator("image_digest")
    @classmethod
    def _digest_shape(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9]+:[0-9a-f]{32,}", value):
            raise ValueError("expected an image digest such as 'sha256:<64 hex>'")
        return value


class ModelSection(_Section):
    path: SeatPath
    served_name: str | None = None  # the loader fills in the seat name when absent


class Drafter(_Section):
    method: str
    path: SeatPath | None = None
    num_speculative_tokens: PositiveInt
    num_speculative_tokens_per_batch_size: (
        tuple[tuple[PositiveInt, PositiveInt, Annotated[int, Field(ge=0, strict=True)]], ...] | None
    ) = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @field_validator("method")
    @classmethod
    def _known_method(cls, value: str) -> str:
        if value not in SPECULATIVE_METHODS and not value.endswith("_mtp"):
            known = ", ".join(sorted(SPECULATIVE_METHODS))
            raise ValueError(f"unknown speculative method {value!r} (vLLM knows: {known})")
        return value

    @field_validator("num_speculative_tokens_per_batch_size")
    @classmethod
    def _schedule(
        cls, value: tuple[tuple[int, int, int], ...] | None
    ) -> tuple[tuple[int, int, int], ...] | None:
        # The same rules as vLLM's validate_and_normalize_dynamic_sd_schedule
        # (vllm/v1/spec_decode/dynamic/utils.py), checked before the engine starts.
        if value is None:
            return None
        if not value:
            raise ValueError("must not be empty (omit the key for a static draft length)")
        previous_end = 0
        for start, end, _k in sorted(value):
            if start > end:
                raise ValueError(f"range ({start}, {end}) starts after it ends")
            if start <= previous_end:
                raise ValueError("batch-size ranges must not overlap")
            previous_end = end
        if min(start for start, _, _ in value) != 1:
            raise ValueError("the first batch-size range must start at 1")
        return tuple(sorted(value))


class Serve(_Section):
    port_base: Annotated[int, Field(ge=1, le=65535, strict=True)]
    max_model_len: PositiveInt
    max_num_seqs: PositiveInt
    max_num_batched_tokens: PositiveInt | None = None
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1, strict=True)] | None = None
    dtype: str = "auto"
    quantization: str | None = None
    extra_args: tuple[str, ...] = ()

    @field_validator("quantization")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None


class Replicas(_Section):
    mode: Literal["auto", "explicit"] = "auto"
    pairs: tuple[tuple[str, str], ...] | None = None
    names: tuple[str, ...] | None = None

    @field_validator("pairs")
    @classmethod
    def _pci(cls, value: tuple[tuple[str, str], ...] | None) -> tuple[tuple[str, str], ...] | None:
        for pair in value or ():
            for address in pair:
                if not is_pci_address(address):
                    raise ValueError(f"{address!r} is not a PCI address like '0000:05:00.0'")
            if pair[0] == pair[1]:
                raise ValueError(f"pair {list(pair)} names the same GPU twice")
        # A GPU in two pairs would be driven by two replicas at once (two engines on one GPU).
        seen: dict[str, int] = {}
        for index, pair in enumerate(value or ()):
            for address in pair:
                if address in seen:
                    raise ValueError(
                        f"GPU {address} is in pair {seen[address]} and pair {index}: a GPU serves "
                        "one replica"
                    )
                seen[address] = index
        return value

    @field_validator("names")
    @classmethod
    def _names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for name in value or ():
            if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", name):
                raise ValueError(f"replica name {name!r} must match [a-z0-9][a-z0-9-]*")
        if value is not None and len(set(value)) != len(value):
            raise ValueError("replica names must be unique")
        return value


class EnvClasses(_Section):
    key: tuple[str, ...] = ()
    neutral: tuple[str, ...] = ()


class Preflight(_Section):
    refuse_on_fail: Bool = True
    profile: SeatPath | None = None
    hip: Bool = True


class Readiness(_Section):
    timeout_s: Annotated[float, Field(gt=0, strict=True)] = 900.0
    canary_prompt: str = "Hello"
    canary_max_tokens: PositiveInt = 4

    @field_validator("timeout_s", mode="before")
    @classmethod
    def _int_ok(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class ExpectLog(_Section):
    pattern: str
    when: Literal["must_appear", "must_not_appear"] = "must_appear"
    severity: Literal["warn", "fail"] = "warn"

    @field_validator("pattern")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a Python regex: {exc}") from None
        return value


class Watch(_Section):
    expected_acceptance_length: Annotated[float, Field(ge=1, strict=True)] | None = None
    interval_s: Annotated[float, Field(gt=0, strict=True)] = 10.0
    webhook_url: str | None = None
    command_hook: tuple[str, ...] | None = None
    exporter_listen: str | None = None

    @field_validator("expected_acceptance_length", "interval_s", mode="before")
    @classmethod
    def _int_ok(cls, value: Any) -> Any:
        return float(value) if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("command_hook")
    @classmethod
    def _argv(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is not None and not value:
            raise ValueError("an argv list needs at least the program")
        return value


class Seat(_Section):
    name: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]*$")]
    backend: Literal["rocm", "cpu"]
    tp: PositiveInt
    cache_root: SeatPath
    state_dir: SeatPath | None = None
    engine: Engine
    model: ModelSection
    drafter: Drafter | None = None
    serve: Serve
    replicas: Replicas = Field(default_factory=Replicas)
    env: dict[str, str] = Field(default_factory=dict)
    env_classes: EnvClasses = Field(default_factory=EnvClasses)
    preflight: Preflight = Field(default_factory=Preflight)
    readiness: Readiness = Field(default_factory=Readiness)
    expect_log: tuple[ExpectLog, ...] = ()
    watch: Watch = Field(default_factory=Watch)

    _source_path: Path | None = PrivateAttr(default=None)
    _source_text: str | None = PrivateAttr(default=None)

    @property
    def source_path(self) -> Path | None:
        """The seat file this seat was loaded from (None when built in code)."""
        return self._source_path

    @property
    def source_text(self) -> str | None:
        """The text it was parsed from: later errors locate keys in it without reading again."""
        return self._source_text

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return value

    def replica_names(self, count: int) -> tuple[str, ...]:
        """Names of `count` replicas: [replicas].names when given, else r0, r1, ..."""
        names = self.replicas.names
        if names is not None:
            if len(names) < count:
                # launch (rocmseat.launch.plan) turns this into a located ConfigError.
                raise ValueError(f"[replicas] names lists {len(names)} names for {count} replicas")
            return names[:count]
        return tuple(f"r{i}" for i in range(count))

    def port_of(self, index: int) -> int:
        """Replica i listens on port_base + i."""
        return self.serve.port_base + index
