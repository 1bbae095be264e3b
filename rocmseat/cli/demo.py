"""`rocmseat demo`: the CPU demo (docs/demo.md)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import click

from rocmseat import exitcodes, jsonio
from rocmseat.cli.options import json_option
from rocmseat.demo import (
    LLAMACPP_PYTHON_ENV,
    PYTHON_ENV,
    build_gguf_models,
    build_models,
    default_engine_python,
    default_llamacpp_python,
)

# The engine's Python runs the model builders (rocmseat itself never imports torch).
python_option = click.option(
    "--python",
    "python",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help=f"The engine's Python (torch + transformers) [env var: {PYTHON_ENV}; "
    "default: /opt/rocmseat/vllm-venv/bin/python]",
)


@contextlib.contextmanager
def progress(what: str, *, every_s: float = 1.0) -> Iterator[None]:
    """On a terminal, a spinner on stderr with the seconds spent while `what` runs; elsewhere
    (CI logs, journald, a pipe) nothing: the result lines say it all."""
    if not sys.stderr.isatty() or os.environ.get("TERM") == "dumb":
        yield
        return
    from rich.console import Console

    started = time.monotonic()
    stop = threading.Event()
    with Console(stderr=True).status(what) as status:

        def tick() -> None:
            while not stop.wait(every_s):
                status.update(f"{what} ({time.monotonic() - started:.0f} s)")

        ticker = threading.Thread(target=tick, name="rocmseat-progress", daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
            ticker.join()


@click.group()
def demo() -> None:
    """Try the whole loop without a GPU: tiny models for vLLM's CPU build and llama.cpp."""


@demo.command("models")
@click.argument("dest", type=click.Path(path_type=Path, file_okay=False))
@python_option
@click.option("--force", is_flag=True, help="Rebuild model folders that already exist.")
@json_option
def models(dest: Path, python: Path | None, force: bool, as_json: bool) -> int:
    """Build DEST/target, DEST/drafter (same weights) and DEST/drafter-other (other weights)."""
    with progress(f"building the demo models in {dest} (about a minute)"):
        built = build_models(dest, python or default_engine_python(), force=force)
    if as_json:
        doc = {
            "schema": "rocmseat.demo-models/v1",
            "models": [
                {
                    "name": m.name,
                    "path": str(m.path),
                    "seed": m.seed,
                    "weights_sha256": m.weights_sha256,
                    "size_bytes": m.size_bytes,
                }
                for m in built
            ],
        }
        click.echo(jsonio.dumps(doc))
        return exitcodes.OK
    for m in built:
        click.echo(
            f"{m.name:<14} {m.path}  seed {m.seed}  weights sha256 {m.weights_sha256[:12]}  "
            f"{m.size_bytes / 1e6:.1f} MB"
        )
    return exitcodes.OK


def _floats(value: str | None, what: str) -> tuple[float, ...]:
    if not value:
        return ()
    try:
        return tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: comma-separated numbers", param_hint=what) from None


@demo.command("spec-models")
@click.argument("dest", type=click.Path(path_type=Path, file_okay=False))
@click.option("--eps", default=None, metavar="E1,E2,...",
              help="Targets whose extra layers are scaled by these factors (0: acceptance 1).")
@click.option("--acceptance", default=None, metavar="A1,A2,...",
              help="Targets with about this per-token acceptance (eps interpolated from a "
                   "measured grid; takes a few minutes).")
@python_option
@click.option("--force", is_flag=True, help="Rebuild model folders that already exist.")
@json_option
def spec_models(  # noqa: PLR0917 (click passes every option)
    dest: Path, eps: str | None, acceptance: str | None, python: Path | None, force: bool,
    as_json: bool,
) -> int:
    """Build DEST/spec-drafter (one layer) and 12-layer targets with settable acceptance."""
    from rocmseat.demo import build_spec_models
    from rocmseat.speculation.gate.battery import PROMPTS_FILE

    with progress(f"building the speculation demo models in {dest}"):
        built = build_spec_models(
            dest, python or default_engine_python(), eps=_floats(eps, "--eps"),
            acceptance=_floats(acceptance, "--acceptance"), prompts=PROMPTS_FILE, force=force)
    if as_json:
        click.echo(jsonio.dumps({"schema": "rocmseat.demo-spec-models/v1", "models": [
            {"name": m.name, "path": str(m.path), "eps": m.eps,
             "offline_agreement": m.offline_agreement, "size_bytes": m.size_bytes}
            for m in built]}))
        return exitcodes.OK
    for m in built:
        what = "drafter (layer 0 of the targets)" if m.eps is None else (
            f"eps {m.eps:g}, offline acceptance ~{m.offline_agreement:.2f}")
        click.echo(f"{m.name:<20} {m.path}  {what}  {m.size_bytes / 1e6:.1f} MB")
    return exitcodes.OK


@demo.command("gguf-models")
@click.argument("dest", type=click.Path(path_type=Path, file_okay=False))
@click.option("--llamacpp-python", "python", type=click.Path(path_type=Path, dir_okay=False),
              default=None,
              help="The Python with gguf and xllamacpp (not vLLM's: --python) "
                   f"[env var: {LLAMACPP_PYTHON_ENV}; "
                   "default: /opt/rocmseat/llamacpp-venv/bin/python]")
@click.option("--force", is_flag=True, help="Rebuild model folders that already exist.")
@json_option
def gguf_models(dest: Path, python: Path | None, force: bool, as_json: bool) -> int:
    """Build DEST/gguf-target, DEST/gguf-drafter (same weights) and DEST/gguf-drafter-other
    (other weights), each a model.gguf for the llama.cpp demo seat."""
    with progress(f"building the GGUF demo models in {dest}"):
        built = build_gguf_models(dest, python or default_llamacpp_python(), force=force)
    if as_json:
        click.echo(jsonio.dumps({"schema": "rocmseat.demo-gguf-models/v1", "models": [
            {"name": m.name, "path": str(m.path), "seed": m.seed, "sha256": m.sha256,
             "size_bytes": m.size_bytes} for m in built]}))
        return exitcodes.OK
    for m in built:
        click.echo(f"{m.name:<19} {m.path}  seed {m.seed}  sha256 {m.sha256[:12]}  "
                   f"{m.size_bytes / 1e6:.1f} MB")
    return exitcodes.OK
