"""A `llama-server` for the CPU demo: llama.cpp's own server, embedded in the xllamacpp wheel.

This file is a standalone program run by the *llama.cpp venv's* Python (xllamacpp, MIT: a
prebuilt manylinux CPU wheel that links llama.cpp's tools/server), never imported by rocmseat.
It takes llama-server's own flag spelling, so a seat's `command` that names it can name a real
`llama-server` binary on a node instead, unchanged:

    PYTHON llama_server.py -m TARGET.gguf --port 8080 [--host H] [--metrics] [-c N] [-np N]
        [-t N] [-a NAME] [-b N] [-md DRAFTER.gguf --spec-type draft-simple --spec-draft-n-max 3]

The spellings are llama.cpp's common/arg.cpp as embedded in xllamacpp 2026.10.11549 (read from
the wheel's strings: `-md, --spec-draft-model, --model-draft`; `--spec-draft-n-max, --draft-max,
--draft-n`; `--spec-type` "comma-separated list of types of speculative decoding to use", the
names of common/speculative.cpp `draft-simple`, `ngram-simple`, ...; `-c, --ctx-size`;
`-np, --parallel`; `-t, --threads`; `-a, --alias`; `-b, --batch-size`; `--metrics`). The 2026
rename took
`--draft-max` and `--model-draft` to the `--spec-draft-*` names; both are accepted here as
llama-server accepts them. A flag this program does not know is refused in one line (exit 2),
never ignored: a real binary would honour it and the demo would silently differ.

The server answers /health, /completion, /v1/completions (streaming) and, with --metrics,
/metrics (`llamacpp:*`, tools/server/server-context.cpp `handle_metrics`). It runs until
SIGTERM or SIGINT, then exits 0. `--version` answers as llama-server does (what the config key
records of the engine).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

USAGE = ("usage: llama_server.py -m MODEL.gguf [--port N] [--host H] [--metrics] [-c N] [-np N] "
         "[-t N] [-a NAME] [-md DRAFT.gguf] [--spec-type T] [--spec-draft-n-max N]")

# llama-server's names for one setting -> our field (common/arg.cpp, see the module docstring)
VALUED = {
    "-m": "model", "--model": "model",
    "--port": "port", "--host": "host",
    "-c": "ctx_size", "--ctx-size": "ctx_size",
    "-np": "parallel", "--parallel": "parallel",
    "-t": "threads", "--threads": "threads",
    "-a": "alias", "--alias": "alias",
    "-b": "batch_size", "--batch-size": "batch_size",
    "-md": "draft_model", "--spec-draft-model": "draft_model", "--model-draft": "draft_model",
    "--spec-draft-n-max": "draft_n_max", "--draft-max": "draft_n_max",
    "--draft-n": "draft_n_max",
    "--spec-type": "spec_type",
}
SWITCHES = {"--metrics": "metrics"}
INTS = ("port", "ctx_size", "parallel", "threads", "draft_n_max", "batch_size")
# common/speculative.cpp's type names that this demo serves (a drafter model only; the ngram
# kinds need no model and are passed through as llama.cpp names them)
SPEC_TYPES = {
    "none": "COMMON_SPECULATIVE_TYPE_NONE",
    "draft-simple": "COMMON_SPECULATIVE_TYPE_DRAFT_SIMPLE",
    "ngram-simple": "COMMON_SPECULATIVE_TYPE_NGRAM_SIMPLE",
    "ngram-mod": "COMMON_SPECULATIVE_TYPE_NGRAM_MOD",
}


class UsageError(Exception):
    pass


@dataclass
class Options:
    model: str | None = None
    port: int = 8080  # llama-server's default (common.h: `int32_t port = 8080`)
    host: str = "127.0.0.1"
    ctx_size: int | None = None
    parallel: int | None = None
    threads: int | None = None
    alias: str | None = None
    batch_size: int | None = None
    draft_model: str | None = None
    draft_n_max: int | None = None
    spec_type: str | None = None
    metrics: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def parse_args(argv: list[str]) -> Options:
    """llama-server's flags -> Options; UsageError in one line naming the flag."""
    opts = Options()
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, inline = arg.partition("=")
        if name in SWITCHES:
            setattr(opts, SWITCHES[name], True)
            i += 1
            continue
        if name not in VALUED:
            raise UsageError(f"{arg!r}: not a flag this llama-server demo serves (a real "
                             "llama-server binary may; name it in the seat's command)")
        if eq:
            value = inline
        elif i + 1 < len(argv):
            value = argv[i + 1]
            i += 1
        else:
            raise UsageError(f"{name}: expects a value")
        key = VALUED[name]
        if key in INTS:
            try:
                setattr(opts, key, int(value))
            except ValueError:
                raise UsageError(f"{name} {value!r}: expects a whole number") from None
        else:
            setattr(opts, key, value)
        i += 1
    _check(opts)
    return opts


def _check(opts: Options) -> None:
    if opts.model is None:
        raise UsageError("-m/--model is required")
    if not 0 < opts.port < 65536:
        raise UsageError(f"--port {opts.port}: not a TCP port")
    for t in (opts.spec_type or "").split(","):
        if t and t not in SPEC_TYPES:
            raise UsageError(f"--spec-type {t!r}: this demo serves {', '.join(SPEC_TYPES)}")
    if opts.draft_model is not None and not Path(opts.draft_model).is_file():
        raise UsageError(f"--spec-draft-model {opts.draft_model}: no such file")
    if not Path(opts.model).is_file():
        raise UsageError(f"--model {opts.model}: no such file")


def params_of(opts: Options, x: Any) -> Any:
    """xllamacpp's CommonParams (common/common.h `common_params`) for the options."""
    p = x.CommonParams()
    p.model.path = opts.model
    p.port = opts.port
    p.hostnames = [opts.host]
    p.endpoint_metrics = opts.metrics
    if opts.ctx_size is not None:
        p.n_ctx = opts.ctx_size
    if opts.parallel is not None:
        p.n_parallel = opts.parallel
    if opts.threads is not None:
        p.cpuparams.n_threads = opts.threads
        p.cpuparams_batch.n_threads = opts.threads
    if opts.alias:
        p.model_alias = {opts.alias}
    if opts.batch_size is not None:
        p.n_batch = opts.batch_size
    types = [t for t in (opts.spec_type or "").split(",") if t]
    if opts.draft_model is not None and not types:
        types = ["draft-simple"]  # llama-server: a draft model alone means a draft model
    if types:
        p.speculative.types = [getattr(x.common_speculative_type, SPEC_TYPES[t]) for t in types]
    if opts.draft_model is not None:
        p.speculative.draft.mparams.path = opts.draft_model
        if opts.threads is not None:
            p.speculative.draft.cpuparams.n_threads = opts.threads
    if opts.draft_n_max is not None:
        p.speculative.draft.n_max = opts.draft_n_max
    return p


def version_lines(x: Any) -> str:
    """llama-server's `--version` answer (common/common.cpp: `version: %d (%s)` of
    LLAMA_BUILD_NUMBER and LLAMA_COMMIT, then `built with %s for %s`), the embedded build's
    figures from xllamacpp's BUILD_INFO, with the wheel's own version (its build number and
    commit read 0 / unknown): what the config key records of the engine."""
    info = getattr(x, "BUILD_INFO", {}) or {}
    try:
        wheel = importlib.metadata.version("xllamacpp")
    except importlib.metadata.PackageNotFoundError:
        wheel = "unknown"
    return (f"version: {info.get('build_number', 0)} ({info.get('commit', 'unknown')}; "
            f"xllamacpp {wheel})\nbuilt with {info.get('compiler', '?')} for "
            f"{info.get('build_target', '?')}")


def main(argv: list[str]) -> int:
    if argv[1:] == ["--version"]:
        try:
            x = importlib.import_module("xllamacpp")
        except ImportError as exc:
            print(f"llama_server.py: {sys.executable} has no xllamacpp ({exc})", file=sys.stderr)
            return 3
        print(version_lines(x), file=sys.stderr)
        return 0
    try:
        opts = parse_args(argv[1:])
    except UsageError as exc:
        print(f"llama_server.py: {exc}\n{USAGE}", file=sys.stderr)
        return 2
    try:
        x = importlib.import_module("xllamacpp")
    except ImportError as exc:
        print(f"llama_server.py: {sys.executable} has no xllamacpp ({exc}): run it with the "
              "llama.cpp venv's Python (.ci/setup, docs/engines.md)", file=sys.stderr)
        return 3
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        server = x.Server(params_of(opts, x))
    except Exception as exc:  # a model llama.cpp refuses, a port in use: one line
        print(f"llama_server.py: the server did not start: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 1
    print(f"main: server is listening on http://{opts.host}:{opts.port} "
          f"({server.listening_address})", file=sys.stderr, flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    print("main: stopping on a signal", file=sys.stderr, flush=True)
    # Gone at once, every connection closed by the kernel: xllamacpp's Server destructor waits
    # for its main loop and keeps accepting connections it never answers meanwhile (measured:
    # a client held until its own timeout), where llama-server's signal handler stops its
    # HTTP server (tools/server/server.cpp, `shutdown_handler`).
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
