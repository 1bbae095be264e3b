"""The seat file schema (docs/seat.md).

Pydantic v2 models with extra="forbid": a misspelt key is an error, never silently ignored.
Paths are resolved by the loader's validation context (`base_dir`: the seat file's directory),
so `seat.model.path` is always absolute. `load_seat` (rocmseat.seat.load) is the entry point;
before this schema sees the document, the loader has refused control characters, non-finite
numbers, dates, over-long strings and deep nesting anywhere in it (rocmseat.seat.rules
`document_problems`). The ranges of numbers are docs/seat.md's.
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    field_validator,
)

from rocmseat.seat.canary_schema import Canary
from rocmseat.seat.remediate_schema import Remediate
from rocmseat.sysfs.fs import REAL_SYSFS_MOUNT
from rocmseat.sysfs.parse import is_pci_address
from rocmseat.text import control_char, printable

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Seat and replica names: unit names, state dirs, cache dirs. The one name rule of the house
# (docs/seat.md): NAME_CHARS, at most SEAT_NAME_MAX / REPLICA_NAME_MAX characters.
NAME_CHARS = r"[a-z0-9][a-z0-9-]*"
NAME_PATTERN = rf"^{NAME_CHARS}$"
SEAT_NAME_MAX = 64
REPLICA_NAME_MAX = 32
_NAME = re.compile(NAME_CHARS)
INT32_MAX = 2**31 - 1
# Linux: PATH_MAX is 4096 bytes with the terminating NUL, NAME_MAX 255 bytes per component.
PATH_MAX_BYTES = 4095
NAME_MAX_BYTES = 255
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_LISTEN = re.compile(r"(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^:\[\]]*)):(?P<port>[0-9]{1,5})")
_DTYPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_FLAG = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_-]*")

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


def is_replica_name(text: str) -> bool:
    """The replica name rule: NAME_CHARS, at most REPLICA_NAME_MAX characters."""
    return len(text) <= REPLICA_NAME_MAX and _NAME.fullmatch(text) is not None


def is_seat_name(text: str) -> bool:
    """The seat name rule: NAME_CHARS, at most SEAT_NAME_MAX characters."""
    return len(text) <= SEAT_NAME_MAX and _NAME.fullmatch(text) is not None


def is_host(text: str) -> bool:
    """A DNS host name (RFC 1123 labels, an optional final dot) or an IPv4/IPv6 literal.

    IPv6 is written without brackets (`::1`; the URL adds them) and without a zone id
    (`fe80::1%eth0` would need `%25` in a URL). Anything else, `127.0.0.1@evil.example/#` for
    one, is refused: the host becomes the authority of every probe and scrape URL.
    """
    if not text or len(text) > 253:
        return False
    try:
        ipaddress.ip_address(text)
    except ValueError:
        pass
    else:
        return "%" not in text
    labels = text.removesuffix(".").split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        return False
    # A last label of digits is a malformed IPv4 address (127.1, 1.2.3.999), never a DNS name.
    return not labels[-1].isdigit()


def check_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (HOST a host name or IPv4 literal, or `[IPv6]`; PORT 1..65535) -> parts."""
    match = _LISTEN.fullmatch(value)
    if match is None:
        raise ValueError(f"'{printable(value, 80)}' is not HOST:PORT or 'off' (IPv6: [::1]:PORT)")
    host = match.group("v6") if match.group("v6") is not None else match.group("host")
    port = int(match.group("port"))
    if match.group("v6") is not None and not (is_host(host) and ":" in host):
        raise ValueError(
            f"'{printable(value, 80)}': [{printable(host, 60)}] is not an IPv6 address"
        )
    if match.group("v6") is None and not is_host(host):
        raise ValueError(f"'{printable(value, 80)}': '{printable(host, 60)}' is not a host name "
                         "or an IP address (write an IPv6 address as [::1]:PORT)")
    if not 1 <= port <= 65535:
        raise ValueError(f"'{printable(value, 80)}': port {port} is not in 1..65535")
    return host, port


def _path_text(value: Any) -> Any:
    """A path key is a non-blank string: `""` would become the seat file's directory."""
    if isinstance(value, str) and not value.strip():
        raise ValueError("must not be empty (an empty path would mean the seat file's directory)")
    return value


def _resolve_path(value: Path, info: ValidationInfo) -> Path:
    """`~` expands; a relative path is relative to the seat file's directory."""
    try:
        expanded = value.expanduser()
    except RuntimeError:  # pathlib: "Could not determine home directory."
        expanded = value
    if str(expanded).startswith("~"):
        raise ValueError(f"'{printable(str(value), 80)}': cannot expand '~' (no such user)")
    if expanded.is_absolute():
        resolved = Path(os.path.normpath(expanded))
    else:
        base = (info.context or {}).get("base_dir")
        anchor = expanded.absolute() if base is None else Path(base) / expanded
        resolved = Path(os.path.normpath(anchor))
    text = str(resolved)
    # $HOME (through `~`) or the seat file's directory could bring what the value itself lacked
    bad = control_char(text)
    if bad is not None:
        raise ValueError(f"the resolved path '{printable(text, 80)}' holds the control character "
                         f"{bad[1]}")
    if len(os.fsencode(text)) > PATH_MAX_BYTES:
        raise ValueError(f"the resolved path is {len(os.fsencode(text)):,} bytes long; Linux "
                         f"allows {PATH_MAX_BYTES:,}")
    for part in resolved.parts:
        if len(os.fsencode(part)) > NAME_MAX_BYTES:
            raise ValueError(f"path component '{printable(part, 40)}' is longer than "
                             f"{NAME_MAX_BYTES} bytes")
    return resolved


# Trees a replica never writes to: the units make cache_root and state_dir writable
# (ReadWritePaths=) and launch creates, renames and prunes below them, as root under systemd.
SYSTEM_TREES = tuple(Path(p) for p in ("/etc", "/proc", REAL_SYSFS_MOUNT, "/dev", "/boot", "/usr"))


def _not_root(value: Path | None) -> Path | None:
    """Not `/` (every path would be writable to the units: ReadWritePaths=/), and not in a
    system tree (/etc, /proc, /sys, /dev, /boot, /usr)."""
    if value is None:
        return value
    if value == Path("/"):
        raise ValueError("must not be the file-system root '/'")
    for tree in SYSTEM_TREES:
        if value.is_relative_to(tree):
            raise ValueError(f"'{printable(str(value), 80)}' is in the system tree {tree}: "
                             "rocmseat makes it writable to the units and renames and removes "
                             "below it (use a dir under /var/cache, /var/lib or /srv)")
    return value


# strict=False: TOML gives strings, and a strict Path field would accept only Path objects.
SeatPath = Annotated[
    Path, BeforeValidator(_path_text), Field(strict=False), AfterValidator(_resolve_path)
]
PositiveInt = Annotated[int, Field(gt=0, strict=True)]
Bool = Annotated[bool, Field(strict=True)]
Int32 = Annotated[int, Field(gt=0, le=INT32_MAX, strict=True)]
# A float key: a TOML integer or float (BeforeValidator _as_float), never nan or inf.
FiniteFloat = Annotated[float, Field(strict=True, allow_inf_nan=False)]


def _program(value: tuple[str, ...] | None) -> tuple[str, ...] | None:
    """An argv list: at least the program, and the program is not blank."""
    if value is not None and (not value or not value[0].strip()):
        raise ValueError("an argv list needs a program as its first element")
    return value


def _as_float(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


class _Section(BaseModel):
    # Lax for containers (TOML arrays are lists, the model keeps tuples); scalars are strict
    # through strict=True on their Field (PositiveInt, Bool ...): "8" or true is not an int.
    model_config = ConfigDict(extra="forbid", frozen=True)


# The engines behind the seam (rocmseat.engines, docs/engines.md): which one the seat's command
# starts. The same names as rocmseat.engines.base.KINDS (the seat room is below the engines, so
# the list is spelt here for the schema; tests/engines hold the two equal).
ENGINE_KINDS = ("vllm", "sglang", "llamacpp")


class Engine(_Section):
    # what the command starts: launch builds its argv, the key its factors, watch reads its
    # /metrics by this (rocmseat.engines.by_kind); a command that does not look like it is
    # refused (rocmseat.engines.command.kind_problem)
    kind: Literal["vllm", "sglang", "llamacpp"] = "vllm"
    command: Annotated[tuple[str, ...], Field(min_length=1), AfterValidator(_program)]
    model_flag: str = ""
    python: SeatPath
    image_digest: str | None = None
    host: str = "127.0.0.1"
    # where the engine runs (rocmseat.seat.runtime, docs/launch.md "Containers"): the image by
    # digest only, its digest a config-key factor
    runtime: Literal["host", "podman", "docker"] = "host"
    image: Annotated[str | None, Field(validate_default=True)] = None

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        if not is_host(value):
            raise ValueError(
                f"'{printable(value, 80)}' is not a host name or an IP address (IPv6 without "
                "brackets, e.g. '::1'; '0.0.0.0' or '::' for every interface)"
            )
        return value

    @field_validator("model_flag")
    @classmethod
    def _model_flag(cls, value: str) -> str:
        if value and not _FLAG.fullmatch(value):
            raise ValueError(f"'{printable(value, 80)}' is not '' (positional) or a flag such "
                             "as '--model'")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None, info: ValidationInfo) -> str | None:
        from rocmseat.seat.runtime import parse_image

        runtime = info.data.get("runtime", "host")
        if value is None:
            if runtime != "host":
                raise ValueError(f"runtime {runtime!r} needs an image: give "
                                 "image = '<name>@sha256:<64 hex>'")
            return None
        if runtime == "host":
            raise ValueError("an image needs runtime = 'podman' or 'docker' (on the host the "
                             "engine command runs as it is)")
        digest = parse_image(value)[1]
        given = info.data.get("image_digest")
        if given is not None and given != digest:
            raise ValueError(f"image digest {digest} is not image_digest {given}: give one")
        return value

    @field_validator("image_digest")
    @classmethod
    def _digest_shape(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[a-z0-9]+:[0-9a-f]{32,}", value):
            raise ValueError("expected an image digest such as 'sha256:<64 hex>'")
        return value


class ModelSection(_Section):
    path: SeatPath
    served_name: str | None = None  # the loader fills in the seat name when absent

    @field_validator("served_name")
    @classmethod
    def _served_name(cls, value: str | None) -> str | None:
        # `--served-model-name VALUE`: a value starting with '-' would be read as a flag
        if value is not None and (not value.strip() or value.startswith("-")):
            raise ValueError("must be a non-empty name that does not start with '-'")
        return value


class Drafter(_Section):
    method: str
    path: SeatPath | None = None
    num_speculative_tokens: Annotated[int, Field(gt=0, le=64, strict=True)]
    num_speculative_tokens_per_batch_size: (
        Annotated[
            tuple[tuple[Int32, Int32, Annotated[int, Field(ge=0, le=64, strict=True)]], ...],
            Field(max_length=64),
        ]
        | None
    ) = None
    # JSON values only (str, int, finite float, bool, arrays and tables of them): the loader
    # refuses dates and non-finite numbers anywhere, so json.dumps of this never fails.
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
    max_model_len: Int32
    max_num_seqs: Annotated[int, Field(gt=0, le=65536, strict=True)]
    max_num_batched_tokens: Int32 | None = None
    gpu_memory_utilization: (
        Annotated[float, Field(gt=0, le=1, strict=True, allow_inf_nan=False)] | None
    ) = None
    dtype: str = "auto"
    quantization: str | None = None
    extra_args: tuple[str, ...] = ()

    @field_validator("dtype", "quantization")
    @classmethod
    def _word(cls, value: str | None) -> str | None:
        # an engine argument value: a word, never something argparse would take for a flag
        if value and not _DTYPE.fullmatch(value):
            raise ValueError(f"'{printable(value, 80)}' is not a dtype or quantization name "
                             "(letters, digits, '_', '.', '-'; not starting with '-')")
        return value

    @field_validator("quantization")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value or None


class Replicas(_Section):
    mode: Literal["auto", "explicit"] = "auto"
    # each replica's GPUs: a pair for TP2, a group of tp GPUs otherwise (the resolver checks
    # the size against `tp`)
    pairs: tuple[Annotated[tuple[str, ...], Field(min_length=1, max_length=64)], ...] | None = None
    names: tuple[str, ...] | None = None

    @field_validator("pairs")
    @classmethod
    def _pci(cls, value: tuple[tuple[str, ...], ...] | None) -> tuple[tuple[str, ...], ...] | None:
        for pair in value or ():
            for address in pair:
                if not is_pci_address(address):
                    raise ValueError(f"{address!r} is not a PCI address like '0000:05:00.0'")
            if len(set(pair)) != len(pair):
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
            if not is_replica_name(name):
                raise ValueError(f"replica name '{printable(name, 40)}' must match "
                                 f"{NAME_CHARS} (at most {REPLICA_NAME_MAX} characters)")
        if value is not None and len(set(value)) != len(value):
            raise ValueError("replica names must be unique")
        return value


class EnvClasses(_Section):
    key: tuple[str, ...] = ()
    neutral: tuple[str, ...] = ()

    @field_validator("key", "neutral")
    @classmethod
    def _patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not pattern for pattern in value):
            raise ValueError("an empty pattern classifies nothing")
        return value


class Preflight(_Section):
    refuse_on_fail: Bool = True
    profile: SeatPath | None = None
    hip: Bool = True


class Readiness(_Section):
    # A cold compile took 594 s (docs/architecture.md, incident 3); a day is the ceiling.
    timeout_s: Annotated[FiniteFloat, BeforeValidator(_as_float), Field(gt=0, le=86400)] = 900.0
    canary_prompt: str = "Hello"
    canary_max_tokens: Annotated[int, Field(gt=0, le=4096, strict=True)] = 4


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
        except (RecursionError, OverflowError, ValueError):
            raise ValueError("not a usable Python regex: nested too deeply or too large") from None
        return value


class Watch(_Section):
    # 1 + K at most: checked against the drafter's K in rocmseat.seat.rules (1 + 64 here).
    expected_acceptance_length: (
        Annotated[FiniteFloat, BeforeValidator(_as_float), Field(ge=1, le=65)] | None
    ) = None
    interval_s: Annotated[FiniteFloat, BeforeValidator(_as_float), Field(ge=0.05, le=3600)] = 10.0
    webhook_url: str | None = None
    command_hook: Annotated[tuple[str, ...] | None, AfterValidator(_program)] = None
    exporter_listen: str | None = None
    # the seat's floor for /ready: below it a speculation verdict keeps its alert and the
    # replica stays in rotation (rocmseat.watch.readiness.seat_readiness); 0: no floor, a
    # watcher that sees one replica (a sidecar) takes it out (docs/monitoring.md)
    min_ready: Annotated[int, Field(ge=0, le=4096, strict=True)] = 1

    @field_validator("exporter_listen")
    @classmethod
    def _listen(cls, value: str | None) -> str | None:
        if value is not None and value != "off":
            check_listen(value)
        return value


def _concurrency_list(value: tuple[int, ...] | None) -> tuple[int, ...] | None:
    if value is not None and (not value or list(value) != sorted(set(value))):
        raise ValueError("concurrencies must be increasing, without repeats, at least one")
    return value


GateRatio = Annotated[FiniteFloat, BeforeValidator(_as_float), Field(ge=0.01, le=10)]


class Gate(_Section):
    """`[gate]`: thresholds and battery size of `rocmseat spec gate` when this seat is the
    candidate (docs/spec.md). Absent keys take the field's defaults (rocmseat.speculation.gate.judge
    GateConfig, rocmseat.speculation.gate.settings Battery); launch ignores the table, and it is
    not part
    of the config key (it changes no compiled graph)."""

    aggregate_min_ratio: GateRatio | None = None
    cold_ttft_max_ratio: (
        Annotated[FiniteFloat, BeforeValidator(_as_float), Field(ge=1, le=1000)] | None
    ) = None
    prefix_hit_max_drop: (
        Annotated[FiniteFloat, BeforeValidator(_as_float), Field(ge=0, le=1)] | None
    ) = None
    kv_pool_min_ratio: GateRatio | None = None
    max_failed_requests: Annotated[int, Field(ge=0, le=1_000_000, strict=True)] | None = None
    noise_floor: Annotated[FiniteFloat, BeforeValidator(_as_float), Field(ge=0, le=0.5)] | None = (
        None
    )
    drift: Annotated[FiniteFloat, BeforeValidator(_as_float), Field(ge=0, le=0.5)] | None = None
    concurrency: Annotated[
        tuple[Annotated[int, Field(ge=1, le=65_536, strict=True)], ...] | None,
        AfterValidator(_concurrency_list),
    ] = None
    repeats: Annotated[int, Field(ge=1, le=50, strict=True)] | None = None
    prompts: Annotated[int, Field(ge=1, le=100_000, strict=True)] | None = None
    output_tokens: Annotated[int, Field(ge=1, le=1_000_000, strict=True)] | None = None
    long_prompt_tokens: Annotated[int, Field(ge=1, le=10_000_000, strict=True)] | None = None
    warm_ttft_samples: Annotated[int, Field(ge=2, le=1000, strict=True)] | None = None
    stall_after_s: (
        Annotated[FiniteFloat, BeforeValidator(_as_float), Field(ge=1, le=86_400)] | None
    ) = None
    run_timeout_s: (
        Annotated[FiniteFloat, BeforeValidator(_as_float), Field(ge=10, le=604_800)] | None
    ) = None


class Seat(_Section):
    name: Annotated[str, Field(pattern=NAME_PATTERN, max_length=SEAT_NAME_MAX)]
    backend: Literal["rocm", "cpu"]
    tp: Annotated[int, Field(gt=0, le=64, strict=True)]
    cache_root: Annotated[SeatPath, AfterValidator(_not_root)]
    state_dir: Annotated[SeatPath | None, AfterValidator(_not_root)] = None
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
    gate: Gate = Field(default_factory=Gate)
    remediate: Remediate = Field(default_factory=Remediate)  # watch's (docs/remediate.md)
    canary: Canary = Field(default_factory=Canary)  # watch's drafter canary (docs/watch.md)

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
            if not ENV_NAME.fullmatch(name):
                raise ValueError(f"'{printable(name, 80)}' is not an environment variable name")
        return value
