"""`rocmseat spec gate` and `rocmseat spec advise` (docs/spec.md)."""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import click

from rocmseat import jsonio
from rocmseat.cli.options import json_option, want_json_as
from rocmseat.errors import ConfigError
from rocmseat.text import printable

_INT_LIST = re.compile(r"[0-9]{1,9}(?:,[0-9]{1,9})*")


def _int_list(value: str | None, what: str) -> tuple[int, ...] | None:
    """ASCII digits separated by single commas: int() alone takes `١٢` (Arabic-Indic digits),
    `1_000`, and splitting `1,,4` dropped the empty item."""
    if value is None:
        return None
    if not _INT_LIST.fullmatch(value.replace(" ", "")):
        raise ConfigError(f"{what} {printable(value)!r}: expected whole numbers (ASCII digits) "
                          "separated by single commas, such as 1,4,16,64")
    items = tuple(int(v) for v in value.replace(" ", "").split(","))
    if not items or any(v < 1 for v in items) or sorted(set(items)) != list(items):
        raise ConfigError(f"{what} {value!r}: positive, increasing, without repeats")
    return items



class _Terminated(KeyboardInterrupt):
    """SIGTERM: unwind like ^C, so every arm's children are stopped on the way out."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated()


@click.group()
def spec() -> None:
    """Should this seat speculate, how deep, and up to which concurrency?"""


@spec.command("gate")
@click.argument("base_seat", metavar="BASE_SEAT", type=click.Path(path_type=Path, dir_okay=False))
@click.argument("candidate_seat", metavar="CANDIDATE_SEAT",
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--replica", default="r0", show_default=True,
              help="The replica slot both arms run on, one after the other.")
@click.option("--concurrency", default=None, metavar="C1,C2,...",
              help="Concurrencies of the aggregate sweep [default: [gate] concurrency, else "
                   "1,4,16,64].")
@click.option("--repeats", type=int, default=None,
              help="Repeats of every throughput and prefix run [default: [gate], else 3].")
@click.option("--prompts", type=int, default=None,
              help="Requests per single-stream run [default: [gate], else 32].")
@click.option("--output-tokens", type=int, default=None,
              help="Output tokens per request [default: [gate], else 256].")
@click.option("--long-prompt-tokens", type=int, default=None,
              help="Prompt length of the TTFT runs [default: 3/4 of max_model_len].")
@click.option("--out", default=None, metavar="DIR",
              help="Directory for every result file, new or empty, or a finished gate of the "
                   "same seats [default: ./rocmseat-gate-<UTC stamp>].")
@json_option
@click.option("--verify-schedule", is_flag=True,
              help="Run the proposed per-batch-size schedule as a third arm.")
@click.option("--aa", is_flag=True,
              help="A/A run: the candidate may be the base itself (the gate's own noise).")
@click.option("--aba", is_flag=True,
              help="Run the base arm again after the others: the drift between arms is "
                   "measured, not assumed (one more start).")
@click.option("--aggregate-min-ratio", type=float, default=None,
              help="Gate: aggregate at the highest concurrency >= this x base "
                   "[default: [gate], else 0.95].")
@click.option("--cold-ttft-max-ratio", type=float, default=None,
              help="Gate: cold TTFT <= this x base [default: [gate], else 1.5].")
@click.option("--prefix-hit-max-drop", type=float, default=None,
              help="Gate: prefix-cache hit rate >= base minus this "
                   "[default: [gate], else 0.05].")
@click.option("--kv-pool-min-ratio", type=float, default=None,
              help="Gate: KV pool >= this x base [default: [gate], else 0.85].")
@click.option("--max-failed-requests", type=int, default=None,
              help="Gate: failed requests allowed on the candidate [default: [gate], else 0].")
@click.option("--noise-floor", type=float, default=None,
              help="Relative spread of one run assumed at least [default: [gate], else 0.02].")
@click.option("--drift", type=float, default=None,
              help="Relative difference of two identical arms measured minutes apart "
                   "[default: [gate], else 0.05].")
@click.option("--stall-after", type=float, default=None,
              help="Seconds of running requests with no generated token that fail an arm (the "
                   "arm's `watch --stall-after`) [default: [gate], else 60].")
@click.option("--run-timeout", type=float, default=None,
              help="Seconds one benchmark run may take [default: [gate], else 1800].")
@click.option("--interleave", is_flag=True,
              help="Alternate the arms over fresh starts (A B B A ...), decode at the highest "
                   "concurrency, and decide after every start: DIFFERENT, SAME or UNKNOWN.")
@click.option("--max-starts", type=click.IntRange(4, 200), default=None,
              help="With --interleave: the most starts, both arms together [default: 16].")
@click.option("--max-minutes", type=click.FloatRange(1.0, 1440.0), default=None,
              help="With --interleave: the most minutes of starts [default: 15].")
@click.option("--effect", type=click.FloatRange(0.02, 0.9), default=None,
              help="With --interleave: the relative difference to see; SAME means no "
                   "difference this large (the ratio's 90 % interval inside 1/(1+e)..1+e) "
                   "[default: 0.20].")
@click.option("--no-progress", is_flag=True, help="No progress display on stderr.")
def gate(base_seat: Path, candidate_seat: Path, **flags: Any) -> int:
    """Gate CANDIDATE_SEAT (speculation on) against BASE_SEAT: ship (0), do not ship (1),
    could not measure or decide (2)."""
    from rocmseat.speculation.gate.arms import ArmError
    from rocmseat.speculation.gate.flow import run_gate
    from rocmseat.speculation.gate.interleave_flow import run_interleaved_gate

    given = GateFlags(**flags)
    options = _gate_options(given)
    if given.interleave and given.as_json:
        # an error before the first start answers in the interleaved gate's schema, not gate/v1
        want_json_as(f"{click.get_current_context().command_path} --interleave")
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    display = _Display(enabled=not given.no_progress)
    runner = run_interleaved_gate if given.interleave else run_gate
    try:
        outcome = runner(base_seat, candidate_seat, options, display.update)
    except ArmError as exc:
        if given.as_json and exc.document is not None:
            # could not measure after the gate started: the partial document (error set, the
            # keys of a whole one) on stdout, the reason on stderr (one line), exit 2
            display.close()
            click.echo(jsonio.dumps(exc.document))
        raise
    finally:
        display.close()
        signal.signal(signal.SIGTERM, previous)
    if given.as_json:
        click.echo(jsonio.dumps(outcome.doc))
    else:
        click.echo(outcome.table, nl=False)
        click.echo(f"results: {options.out}")
    for note in outcome.notes:
        click.echo(f"rocmseat spec gate: note: {note}", err=True)
    return outcome.exit_code


@dataclass(frozen=True, slots=True)
class GateFlags:
    """The options of `spec gate`, as click passes them (one object, not 20 arguments)."""

    replica: str
    concurrency: str | None
    repeats: int | None
    prompts: int | None
    output_tokens: int | None
    long_prompt_tokens: int | None
    out: str | None
    as_json: bool
    verify_schedule: bool
    aa: bool
    aba: bool
    aggregate_min_ratio: float | None
    cold_ttft_max_ratio: float | None
    prefix_hit_max_drop: float | None
    kv_pool_min_ratio: float | None
    max_failed_requests: int | None
    noise_floor: float | None
    drift: float | None
    stall_after: float | None
    run_timeout: float | None
    interleave: bool
    max_starts: int | None
    max_minutes: float | None
    effect: float | None
    no_progress: bool


def _gate_options(f: GateFlags) -> Any:
    """The flags checked against the `[gate]` bounds and each other, as the flow's options."""
    from rocmseat.speculation.gate.flow import GateOptions, InterleaveOptions

    battery = {"concurrency": _int_list(f.concurrency, "--concurrency"), "repeats": f.repeats,
               "prompts": f.prompts, "output_tokens": f.output_tokens,
               "long_prompt_tokens": f.long_prompt_tokens, "stall_after_s": f.stall_after,
               "run_timeout_s": f.run_timeout}
    config = {"aggregate_min_ratio": f.aggregate_min_ratio,
              "cold_ttft_max_ratio": f.cold_ttft_max_ratio,
              "prefix_hit_max_drop": f.prefix_hit_max_drop,
              "kv_pool_min_ratio": f.kv_pool_min_ratio,
              "max_failed_requests": f.max_failed_requests, "noise_floor": f.noise_floor,
              "drift": f.drift}
    _check_gate_flags({**battery, **config})
    if f.out is not None and not f.out.strip():
        # click's Path turned "" into ".": the lock and the documents landed in the working
        # directory
        raise click.UsageError("--out '': an empty path names no directory")
    bounds: dict[str, Any] = {"max_starts": f.max_starts, "max_minutes": f.max_minutes,
                              "effect": f.effect}
    interleave = None
    if f.interleave:
        if f.verify_schedule or f.aba:
            raise click.UsageError("--interleave decides one comparison over many starts: "
                                   "--verify-schedule and --aba belong to the one-start gate")
        interleave = InterleaveOptions(**{k: v for k, v in bounds.items() if v is not None})
    elif given := [k for k, v in bounds.items() if v is not None]:
        raise click.UsageError(f"--{given[0].replace('_', '-')} goes with --interleave")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return GateOptions(
        out=Path(f.out) if f.out is not None else Path(f"rocmseat-gate-{stamp}"),
        replica=f.replica, verify_schedule=f.verify_schedule, aa=f.aa, aba=f.aba,
        battery=battery, config=config, interleave=interleave)


# The flag of every `[gate]` key (docs/spec.md "The gates").
_GATE_FLAGS = {
    "aggregate_min_ratio": "--aggregate-min-ratio", "cold_ttft_max_ratio": "--cold-ttft-max-ratio",
    "prefix_hit_max_drop": "--prefix-hit-max-drop", "kv_pool_min_ratio": "--kv-pool-min-ratio",
    "max_failed_requests": "--max-failed-requests", "noise_floor": "--noise-floor",
    "drift": "--drift", "concurrency": "--concurrency", "repeats": "--repeats",
    "prompts": "--prompts", "output_tokens": "--output-tokens",
    "long_prompt_tokens": "--long-prompt-tokens", "stall_after_s": "--stall-after",
    "run_timeout_s": "--run-timeout",
}


def _check_gate_flags(values: dict[str, Any]) -> None:
    """The flags obey the bounds of the `[gate]` table (rocmseat.seat.model.Gate): one rule for
    the table and the flags (a `--kv-pool-min-ratio 0` once made its gate always PASS)."""
    from pydantic import ValidationError

    from rocmseat.seat.model import Gate

    given = {k: v for k, v in values.items() if v is not None}
    try:
        Gate(**given)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        key = str(first["loc"][0]) if first["loc"] else ""
        value = given.get(key)
        shown = (",".join(str(v) for v in value) if isinstance(value, tuple)
                 else format(value, "g") if isinstance(value, float) else str(value))
        why = str(first["msg"]).removeprefix("Value error, ")
        raise click.UsageError(f"{_GATE_FLAGS.get(key, key)} {shown}: {why}") from None


class _Display:
    """The battery's progress on stderr: a rich progress bar on a terminal, else one line per
    phase (journald, CI logs)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._live: Any = None
        self._task: Any = None
        self._last = ""
        self._tty = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"

    def update(self, p: Any) -> None:
        if not self.enabled:
            return
        left = "?" if p.left_s is None else _duration(p.left_s)
        text = f"{p.arm}: {p.phase} {p.message}".strip()
        if self._tty:
            if self._live is None:
                from rich.console import Console
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

                self._live = Progress(TextColumn("{task.description}"), BarColumn(),
                                      TextColumn("{task.completed}/{task.total} runs"),
                                      TimeElapsedColumn(), TextColumn("left ~{task.fields[left]}"),
                                      console=Console(stderr=True), transient=False)
                self._live.start()
                self._task = self._live.add_task(text, total=p.total, left=left)
            self._live.update(self._task, description=text, completed=p.done, total=p.total,
                              left=left)
            return
        line = f"rocmseat spec gate: {text} ({p.done}/{p.total} runs, {_duration(p.elapsed_s)} " \
               f"elapsed, ~{left} left)"
        if text != self._last:
            click.echo(line, err=True)
            self._last = text

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


@spec.command("advise")
@click.argument("seat_file", metavar="[SEAT]", required=False,
                type=click.Path(path_type=Path, dir_okay=False))
@click.option("--target", "targets", multiple=True, metavar="URL",
              help="A live replica's /metrics (repeatable) instead of a seat's replicas.")
@click.option("--from-gate", "gate_dir", type=click.Path(path_type=Path, file_okay=False),
              default=None, help="The --out directory of a `spec gate` run.")
@click.option("--window", "window_s", type=float, default=None,
              help="Seconds between the two scrapes of a live replica (traffic must flow) "
                   "[default: 30].")
@click.option("--iteration-log", "logs", multiple=True,
              type=click.Path(path_type=Path, dir_okay=False),
              help="An engine log with --enable-logging-iteration-details lines (repeatable).")
@click.option("--max-num-seqs", type=click.IntRange(1, 65_536), default=None,
              help="Largest batch size to schedule [default: the seat's, else 256].")
@click.option("--k-limit", type=click.IntRange(1, 12), default=None,
              help="Largest K considered [default: the measured K + 2, labelled extrapolation].")
@json_option
@click.option("--write", "write_seat", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Write the proposal's measured tiers into this seat file's "
                                 "[drafter] (the other batch sizes keep its K).")
@click.option("--accept-model", is_flag=True,
              help="With --write: write the model's and extrapolated tiers too.")
@click.option("--write-read-only", is_flag=True,
              help="With --write: write a seat file that has no write permission (its mode "
                   "stays).")
@click.option("--picture", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="PNG path [default: advise.png in the gate directory with --from-gate].")
@click.option("--state-dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Where a seat's launched replicas are recorded "
                   "[default: the seat's state_dir, else /var/lib/rocmseat as root, else "
                   "$XDG_STATE_HOME/rocmseat]")
def advise_cmd(seat_file: Path | None, **flags: Any) -> int:
    """Best draft length per batch-size band from acceptance counters and measured step costs."""
    from rocmseat.speculation.advise.advice import render
    from rocmseat.speculation.advise.flow import AdviseRequest, advise_flow

    f = AdviseFlags(**flags)
    sources = sum(1 for given in (seat_file is not None, bool(f.targets), f.gate_dir is not None)
                  if given)
    if sources != 1:
        raise click.UsageError("give exactly one of SEAT, --target URL or --from-gate DIR")
    live_only = [flag for flag, given in (("--iteration-log", bool(f.logs)),
                                          ("--window", f.window_s is not None)) if given]
    if f.gate_dir is not None and live_only:
        # the gate's step costs (mean ITL of its runs) and an engine's iteration log are
        # different clocks (docs/spec.md "Limits"): never mixed, never silently dropped
        raise click.UsageError(
            "--from-gate reads acceptance and step costs from the gate's records: "
            f"{' and '.join(live_only)} belong to a live replica (SEAT or --target URL)")
    if f.write_read_only and f.write_seat is None:
        raise click.UsageError("--write-read-only goes with --write SEAT")
    if f.accept_model and f.write_seat is None:
        raise click.UsageError("--accept-model says what --write may write: give --write SEAT")
    outcome = advise_flow(AdviseRequest(
        seat_file=seat_file, targets=f.targets, gate_dir=f.gate_dir, window_s=f.window_s,
        logs=f.logs, max_num_seqs=f.max_num_seqs, k_limit=f.k_limit, write_seat=f.write_seat,
        write_read_only=f.write_read_only, accept_model=f.accept_model, picture=f.picture,
        state_dir=f.state_dir))
    click.echo(jsonio.dumps(outcome.doc) if f.as_json else render(outcome.doc),
               nl=f.as_json)
    if outcome.write_error is not None:
        raise outcome.write_error  # after the advice: a refused seat edit loses nothing
    return outcome.exit_code


@dataclass(frozen=True, slots=True)
class AdviseFlags:
    """The options of `spec advise`, as click passes them."""

    targets: tuple[str, ...]
    gate_dir: Path | None
    window_s: float | None
    logs: tuple[Path, ...]
    max_num_seqs: int | None
    k_limit: int | None
    as_json: bool
    write_seat: Path | None
    accept_model: bool
    write_read_only: bool
    picture: Path | None
    state_dir: Path | None
