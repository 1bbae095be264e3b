"""The config key: every factor that changes compiled graphs, as canonical JSON, hashed.

`compute_key` is pure over gathered inputs (engine versions, GPU arch, model and drafter
identity); the gatherers (versions.py, fingerprint.py, the node inventory) run at the edge, in
`replica_key`. vLLM's own compile hash misses num_speculative_tokens (vllm#53366), non-vLLM
environment variables and the image (vllm/envs.py, VllmConfig.compute_hash); this key carries
all of them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rocmseat.cache.fingerprint import fingerprint_model
from rocmseat.cache.versions import EngineVersions, engine_versions
from rocmseat.engines import seat_engine
from rocmseat.engines import vllm as vllm_engine
from rocmseat.errors import RocmseatError
from rocmseat.located import where_key
from rocmseat.redact import REDACTED, is_secret_name, redact_text
from rocmseat.runner import Runner, run
from rocmseat.seat.envclass import classify_env, key_env, normalise_flag
from rocmseat.seat.model import Seat
from rocmseat.seat.runtime import image_digest, probe_prefix

KEY_SCHEMA = 1

# Engine arguments that cannot change what is compiled (network, names, logging, auth): vLLM's
# (rocmseat.engines.vllm); each engine has its own (Engine.neutral_flags).
NEUTRAL_FLAGS = vllm_engine.NEUTRAL_FLAGS
_COMPILATION_FLAGS = ("--compilation-config", "-cc")
# A secret in a key factor (the value of a secret-bearing flag, a key-classified variable whose
# name looks like a credential: rocmseat.redact.is_secret_name) enters the key as the sha256 of
# its value, so a changed secret still changes the key, but its value is never stored in a
# manifest or an intent, printed by `key`, said in "moved aside because ..." or audited.
SECRET_PREFIX = "secret-sha256:"
_SEALED = re.compile(re.escape(SECRET_PREFIX) + r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class ConfigKey:
    digest: str  # sha256 hex of the canonical JSON of `factors`
    factors: dict[str, Any] = field(hash=False)

    @property
    def short(self) -> str:
        return self.digest[:12]


def canonical_json(value: Any) -> str:
    """One spelling per value: sorted keys, no whitespace, UTF-8 kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def digest_of(factors: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(factors).encode("utf-8")).hexdigest()


def compute_key(
    seat: Seat,
    *,
    engine: EngineVersions | Mapping[str, Any],
    gpu_arch: str | Sequence[str],
    model: Mapping[str, Any],
    drafter: Mapping[str, Any] | None,
    extra_env: Mapping[str, str] | None = None,
) -> ConfigKey:
    """The key of a replica of `seat` from gathered inputs (pure; ConfigError on bad env)."""
    factors = build_factors(
        seat, engine=engine, gpu_arch=gpu_arch, model=model, drafter=drafter, extra_env=extra_env
    )
    return ConfigKey(digest_of(factors), factors)


def build_factors(
    seat: Seat,
    *,
    engine: EngineVersions | Mapping[str, Any] | None,
    gpu_arch: str | Sequence[str] | None,
    model: Mapping[str, Any] | None,
    drafter: Mapping[str, Any] | None,
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The factor dict; a gathered input given as None is left out (see `missing_factors`)."""
    engine_factors = engine.as_factors() if isinstance(engine, EngineVersions) else engine
    kind = seat_engine(seat)
    args, compilation = split_engine_args(seat.serve.extra_args, kind.neutral_flags)
    # in the engine's own terms (vLLM: what --speculative-config says; llama.cpp: --spec-type,
    # --spec-draft-n-max; SGLang: --speculative-algorithm and its step counts)
    speculative = kind.speculative_factors(seat)
    env = {**seat.env, **(extra_env or {})}
    classified = classify_env(
        env,
        seat_key=seat.env_classes.key,
        seat_neutral=seat.env_classes.neutral,
        where=lambda name: _where(seat, name),
    )
    factors: dict[str, Any] = {
        "key_schema": KEY_SCHEMA,
        "backend": seat.backend,
        "engine": dict(engine_factors) if engine_factors is not None else None,
        "image_digest": seat.engine.image_digest or image_digest(seat.engine.image),
        "gpu_arch": _arch(gpu_arch),
        "model": dict(model) if model is not None else None,
        "drafter": dict(drafter) if drafter is not None else None,
        "speculative": speculative,
        "tp": seat.tp,
        "max_num_seqs": seat.serve.max_num_seqs,
        "max_num_batched_tokens": seat.serve.max_num_batched_tokens,
        "max_model_len": seat.serve.max_model_len,
        "dtype": seat.serve.dtype,
        "quantization": seat.serve.quantization,
        "compilation_config": compilation,
        "engine_args": args,
        "env": key_env(classified),
    }
    if kind.kind != "vllm":  # a vLLM seat's key stays what it was before the engine seam
        factors["engine_kind"] = kind.kind
    factors = seal_factors(factors)
    for name, value in (("engine", engine), ("gpu_arch", gpu_arch), ("model", model)):
        if value is None:
            del factors[name]
    if drafter is None and seat.drafter is not None and seat.drafter.path is not None:
        del factors["drafter"]
    return factors


def seal(value: Any) -> str:
    """`secret-sha256:<hex>` of a secret value (a value sealed already stays as it is)."""
    text = value if isinstance(value, str) else canonical_json(value)
    if _SEALED.fullmatch(text):
        return text
    return SECRET_PREFIX + hashlib.sha256(text.encode("utf-8")).hexdigest()


def seal_argv(args: Sequence[str]) -> list[str]:
    """Engine arguments with the values of secret-bearing flags sealed (`--hf-token X` and
    `--hf-token=X`, the rule of rocmseat.redact.redact_argv)."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            out.append(seal(arg))
            hide_next = False
            continue
        if arg.startswith("-") and len(arg) > 1:
            name, sep, value = arg.partition("=")
            if is_secret_name(name):
                out.append(f"{name}={seal(value)}" if sep else arg)
                hide_next = not sep
                continue
        out.append(_seal_url(arg))
    return out


def _seal_url(text: str) -> str:
    """Text holding a URL with credentials (userinfo, `?token=`) is sealed whole."""
    return seal(text) if redact_text(text) != text else text


def _seal_tree(value: Any) -> Any:
    """A JSON tree with the value under every credential-named key sealed."""
    if isinstance(value, Mapping):
        return {k: seal(v) if is_secret_name(str(k)) and v is not None else _seal_tree(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_seal_tree(v) for v in value]
    if isinstance(value, str):
        return _seal_url(value)
    return value


def seal_factors(factors: Mapping[str, Any]) -> dict[str, Any]:
    """`factors` with every secret sealed (idempotent; old manifests hold raw values, so both
    sides of a comparison go through it): flag values in `engine_args`, credential-named
    variables in `env`, credential-named keys anywhere else (speculative extra, compilation
    config)."""
    out: dict[str, Any] = {}
    for name, value in factors.items():
        if name == "engine_args" and isinstance(value, list):
            out[name] = seal_argv([str(v) for v in value])
        else:
            out[name] = _seal_tree(value)
    return out


def redact_why(text: str) -> str:
    """A "changed: a: old -> new; ..." text as an older rocmseat wrote it into a manifest
    (`replaced.why`) with raw secret values: each change of a credential-named factor, and
    the secret flag values of `engine_args`, shown without the value."""
    head, sep, rest = text.partition("changed: ")
    if not sep:
        return text
    parts = []
    for entry in rest.split("; "):
        factor, colon, values = entry.partition(": ")
        old, arrow, new = values.partition(" -> ")
        if colon and arrow and is_secret_name(factor.split(".", 1)[-1]):
            entry = f"{factor}: {_hidden(old)} -> {_hidden(new)}"
        elif colon and arrow and factor == "engine_args":
            entry = f"{factor}: {_sealed_list(old)} -> {_sealed_list(new)}"
        parts.append(entry)
    return head + sep + "; ".join(parts)


def _hidden(shown: str) -> str:
    return shown if shown.startswith(SECRET_PREFIX) or shown == "(absent)" else REDACTED


def _sealed_list(shown: str) -> str:
    try:
        value = json.loads(shown)
    except (ValueError, RecursionError):
        return REDACTED if shown != "(absent)" else shown
    if not isinstance(value, list):
        return shown
    return _show(seal_argv([str(v) for v in value]))


def missing_factors(factors: Mapping[str, Any], seat: Seat) -> list[str]:
    """Names of the gathered factors `build_factors` had to leave out."""
    needed = ["engine", "gpu_arch", "model"]
    if seat.drafter is not None and seat.drafter.path is not None:
        needed.append("drafter")
    return [name for name in needed if name not in factors]


def split_engine_args(args: Sequence[str], neutral: frozenset[str] = NEUTRAL_FLAGS
                      ) -> tuple[list[str], dict[str, Any] | None]:
    """Separate the compilation config (parsed) and drop neutral flags (the engine's: vLLM's by
    default) from the engine args."""
    kept: list[str] = []
    compilation: dict[str, Any] | None = None
    index = 0
    while index < len(args):
        arg = args[index]
        flag, eq, inline = arg.partition("=")
        flag = normalise_flag(flag)
        has_value_next = not eq and index + 1 < len(args) and not args[index + 1].startswith("-")
        value = inline if eq else (args[index + 1] if has_value_next else None)
        step = 2 if has_value_next else 1
        base, dot, sub = flag.partition(".")
        if base in _COMPILATION_FLAGS:
            compilation = compilation or {}
            if dot:
                compilation[sub.replace("-", "_")] = value
            elif value is not None:
                try:
                    parsed = json.loads(value)
                except (ValueError, RecursionError):
                    parsed = {"<unparsed>": value}
                if isinstance(parsed, dict):
                    compilation.update({k.replace("-", "_"): v for k, v in parsed.items()})
                else:
                    compilation["<level>"] = parsed
            index += step
            continue
        if flag in neutral:
            index += step
            if not eq and is_secret_name(flag):
                # `--api-key a b`: one or more keys (nargs="+"); none of them is a key factor
                while index < len(args) and not args[index].startswith("-"):
                    index += 1
            continue
        kept.append(arg)
        index += 1
    return kept, compilation


def _arch(gpu_arch: str | Sequence[str] | None) -> str | None:
    if gpu_arch is None or isinstance(gpu_arch, str):
        return gpu_arch
    return "+".join(sorted(set(gpu_arch)))


def _where(seat: Seat, name: str) -> str:
    """'<seat file>:<line>: key 'env.NAME'' from the text the seat was parsed from (no I/O)."""
    shown = str(seat.source_path) if seat.source_path is not None else None
    return where_key(shown, ("env", name), text=seat.source_text)


def replica_key(
    seat: Seat,
    replica: str,
    gpu_arch: str | Sequence[str] | None,
    runner: Runner = run,
    *,
    extra_env: Mapping[str, str] | None = None,
) -> ConfigKey:
    """Gather every input and compute the key of one replica (the launch entry point).

    `gpu_arch`: the replica's arch as its placement gives it (rocmseat.placement.record.key_arch:
    "cpu-<machine>" for backend cpu, the pair's gfx targets for rocm); None: that rule applied
    to no record (backend cpu: its arch; rocm: unknown, an error).
    Raises ConfigError (env), ReadError/ParseError (model), CommandError (engine python).
    """
    if gpu_arch is None:
        from rocmseat.placement.record import key_arch

        gpu_arch, why = key_arch(seat, None)
        if gpu_arch is None:
            raise RocmseatError(
                f"replica {replica}: {why}, so its config key cannot be computed",
                hint="read the node inventory (rocmseat preflight) to learn each GPU's gfx target",
            )
    versions = engine_versions(seat.engine.python, runner=runner,
                               container=probe_prefix(seat.engine), kind=seat.engine.kind,
                               command=seat.engine.command)
    model = fingerprint_model(seat.model.path)
    drafter = None
    if seat.drafter is not None and seat.drafter.path is not None:
        drafter = fingerprint_model(seat.drafter.path)
    return compute_key(
        seat, engine=versions, gpu_arch=gpu_arch, model=model, drafter=drafter,
        extra_env=extra_env,
    )


def flatten(factors: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'engine': {'vllm': '1'}} -> {'engine.vllm': '1'}; lists and scalars are leaves."""
    out: dict[str, Any] = {}
    for name in sorted(factors):
        value = factors[name]
        path = f"{prefix}{name}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


@dataclass(frozen=True, slots=True)
class FactorChange:
    factor: str  # dotted path
    old: Any  # MISSING when absent
    new: Any

    def describe(self) -> str:
        return f"{self.factor}: {_show(self.old)} -> {_show(self.new)}"


class _Missing:
    def __repr__(self) -> str:
        return "(absent)"


MISSING: Any = _Missing()


def diff_factors(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FactorChange]:
    """Leaf-level changes from `old` to `new`, sorted by factor path. Both sides are sealed
    first (`seal_factors`): a manifest written before secrets were sealed must not bring a raw
    secret into a change, its description or an intent."""
    flat_old, flat_new = flatten(seal_factors(old)), flatten(seal_factors(new))
    return [
        FactorChange(name, flat_old.get(name, MISSING), flat_new.get(name, MISSING))
        for name in sorted(set(flat_old) | set(flat_new))
        if flat_old.get(name, MISSING) != flat_new.get(name, MISSING)
    ]


def _show(value: Any) -> str:
    if value is MISSING:
        return "(absent)"
    if isinstance(value, str):
        if _SEALED.fullmatch(value):
            return value[: len(SECRET_PREFIX) + 16] + "…"
        return value[:16] + "…" if len(value) == 64 else value  # sha256 digests, shortened
    return canonical_json(value)
