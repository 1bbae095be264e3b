"""`rocmseat spec advise`: where its inputs come from, and the advice as a document.

Acceptance (per-position counters over a window of constant K):
- `--from-gate DIR`: the candidate arm's decode runs (the /metrics deltas the gate recorded);
- `SEAT` or `--target URL`: a live replica, two scrapes `--window` seconds apart (traffic must
  flow; a window whose drafts were not all full length is refused, docs/spec.md).

Step cost (rocmseat.spec.stepcost):
- `--from-gate DIR`: the mean ITL of every decode run of the base arm (K=0) and the candidate
  arm (its K), per concurrency and repeat;
- `--iteration-log FILE` (repeatable): pure decode steps of `--enable-logging-iteration-details`
  logs; K=0 steps must be among them (a base run, or a schedule's undrafted tier).
"""

from __future__ import annotations

import json
import math
import random
import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocmseat.errors import ConfigError, ReadError, RocmseatError
from rocmseat.safeio import read_regular_text
from rocmseat.seat.load import load_seat
from rocmseat.seat.locate import printable
from rocmseat.seat.model import Seat
from rocmseat.spec.acceptance import MAX_SHORTFALL, Acceptance, Counters, CountersError, estimate
from rocmseat.spec.basis import Decision, Observation, decide, noise_of, seat_k0_trap
from rocmseat.spec.benchresult import parse_bench_result
from rocmseat.spec.decide import Advice, Allowed, advise, throughput
from rocmseat.spec.iterlog import parse_iteration_log
from rocmseat.spec.schedule import Schedule, ScheduleError, as_lists, lookup, validate
from rocmseat.spec.stepcost import (
    Cell,
    StepCost,
    StepCostError,
    cells_from_runs,
    cells_from_steps,
    choose,
)
from rocmseat.watch.fetch import fetch_once
from rocmseat.watch.metrics import read_page
from rocmseat.watch.window import Snapshot, window_between

SCHEMA = "rocmseat.advise/v1"
GATE_LIMIT_BYTES = 64 << 20
LOG_LIMIT_BYTES = 512 << 20
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default when the seat does not say


class CannotAdvise(RocmseatError):
    exit_code = 2


@dataclass(frozen=True, slots=True)
class MeasuredPoint:
    arm: str
    batch: int
    k: int
    schedule: Schedule | None
    tokens_per_s: float
    sd: float | None = None  # over the repeats (None: one run)


@dataclass(frozen=True, slots=True)
class Inputs:
    source: dict[str, Any]
    counters: Counters
    cells: tuple[Cell, ...]
    max_num_seqs: int
    batches: tuple[int, ...]
    measured: tuple[MeasuredPoint, ...]
    seat: Seat | None  # the seat whose schedule the advice is about (for --write / exit 1)


def _pooled(points: Sequence[MeasuredPoint]) -> list[MeasuredPoint]:
    """One point per (arm, batch, K): the mean over the repeats."""
    groups: dict[tuple[str, int, int], list[MeasuredPoint]] = {}
    for p in points:
        groups.setdefault((p.arm, p.batch, p.k), []).append(p)
    out = []
    for (arm, b, k), group in groups.items():
        mean = sum(p.tokens_per_s for p in group) / len(group)
        sd = (math.sqrt(sum((p.tokens_per_s - mean) ** 2 for p in group) / (len(group) - 1))
              if len(group) > 1 else None)
        out.append(MeasuredPoint(arm, b, k, group[0].schedule, mean, sd))
    return out


def _read_json(path: Path, limit: int = GATE_LIMIT_BYTES) -> Any:
    try:
        return json.loads(read_regular_text(path, limit_bytes=limit))
    except ReadError as exc:
        raise CannotAdvise(exc.message) from None
    except (ValueError, RecursionError) as exc:
        raise CannotAdvise(f"{printable(str(path))}: not JSON ({exc})") from None


# A gate directory is hostile input like any other (docs/architecture.md "Hostile input"): every
# key is checked before use and every error is one line naming the file and the key; no file
# outside the directory is read (a path or a symlink that leads out is refused by name), so no
# byte of one can reach an error message.
_ARM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
MAX_CONCURRENCY = 65_536  # the [gate] schema's bound (rocmseat.seat.model Gate.concurrency)
MAX_DRAFT_TOKENS = 64


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    return {dict: "an object", list: "a list", str: "a string", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


class _Doc:
    """One JSON file of the gate directory: typed access that names the file and the key."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.shown = printable(str(path))

    def fail(self, key: str, why: str) -> CannotAdvise:
        return CannotAdvise(f"{self.shown}: key '{key}': {why}")

    def obj(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"expected an object, not {_kind(value)}")
        return value

    def items(self, value: Any, key: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(key, f"expected a list, not {_kind(value)}")
        return value

    def whole(self, value: Any, key: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(key, f"expected a whole number from {low} to {high}")
        return value

    def number(self, value: Any, key: str) -> float:
        if (isinstance(value, bool) or not isinstance(value, int | float)
                or not math.isfinite(value) or value < 0):
            raise self.fail(key, "expected a finite number >= 0")
        return float(value)

    def text(self, value: Any, key: str) -> str:
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, not {_kind(value)}")
        return value


def _inside(directory: Path, path: Path, *, shown: str | None = None,
            doc: _Doc | None = None, key: str = "") -> Path:
    """`path` resolved, refused unless it lies inside `directory` (symlinks followed)."""
    root = directory.resolve()
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a symlink loop
        real = None
    if real is not None and real.is_relative_to(root):
        return real
    what = "does not exist" if real is None else f"is outside the gate directory {directory}"
    if doc is not None:
        raise doc.fail(key, f"{shown} {what}")
    if real is None:
        raise CannotAdvise(f"{printable(str(path))}: {what}")
    raise CannotAdvise(f"{printable(str(path))}: resolves outside the gate directory "
                       f"{printable(str(directory))}")


def _counters_of(window: Any, doc: _Doc, key: str) -> Counters | None:
    if window is None:
        return None
    window = doc.obj(window, key)
    if window.get("spec_present") is not True:
        return None
    per_pos = tuple(doc.number(v, f"{key}.accepted_per_position[{i}]") for i, v in enumerate(
        doc.items(window.get("accepted_per_position"), f"{key}.accepted_per_position")))
    c = Counters(doc.number(window.get("drafts"), f"{key}.drafts"),
                 doc.number(window.get("draft_tokens"), f"{key}.draft_tokens"),
                 doc.number(window.get("accepted_tokens"), f"{key}.accepted_tokens"), per_pos)
    return c if c.drafts > 0 else None


def from_gate(directory: Path) -> Inputs:
    gate_file = _inside(directory, directory / "gate.json")
    gate_doc = _Doc(directory / "gate.json")
    gate = _read_json(gate_file)
    if not isinstance(gate, dict) or gate.get("schema") != "rocmseat.gate/v1":
        raise CannotAdvise(f"{gate_doc.shown}: not a rocmseat.gate/v1 document")
    if gate.get("error") is not None:
        # a partial gate.json: the arms stopped short (docs/spec.md "Exit codes")
        raise CannotAdvise(f"{gate_doc.shown}: the gate could not measure "
                           f"({printable(str(gate['error']), 300)}): no advice from a partial "
                           "gate")
    samples: list[tuple[int, int, float]] = []
    measured: list[MeasuredPoint] = []
    counters: Counters | None = None
    seat: Seat | None = None
    batches: set[int] = set()
    candidate_k: int | None = None
    names: set[str] = set()
    for index, arm in enumerate(gate_doc.items(gate.get("arms", []), "arms")):
        arm = gate_doc.obj(arm, f"arms[{index}]")
        name = arm.get("name")
        if not isinstance(name, str) or not _ARM_NAME.fullmatch(name):
            raise gate_doc.fail(f"arms[{index}].name", "not an arm name (letters, digits, - "
                                "and _)")
        if name in names:
            raise gate_doc.fail(f"arms[{index}].name", f"arm {name!r} is listed twice")
        names.add(name)
        arm_dir = directory / "arms" / name
        doc = _Doc(arm_dir / "arm.json")
        arm_doc = doc.obj(_read_json(_inside(directory, arm_dir / "arm.json")), "(document)")
        k = doc.whole(arm_doc.get("num_speculative_tokens") or 0, "num_speculative_tokens", 0,
                      MAX_DRAFT_TOKENS)
        schedule_raw = arm_doc.get("schedule")
        try:
            schedule = validate(schedule_raw) if schedule_raw else None
        except ScheduleError as exc:
            raise doc.fail("schedule", str(exc)) from None
        if name == "candidate":
            candidate_k = k
            seat = load_seat(_inside(directory, arm_dir / "seat.toml"))
        for r, run in enumerate(doc.items(arm_doc.get("runs", []), "runs")):
            key = f"runs[{r}]"
            run = doc.obj(run, key)
            if run.get("phase") != "decode" or run.get("result_file") is None:
                continue
            relative = doc.text(run["result_file"], f"{key}.result_file")
            c = doc.whole(run.get("concurrency"), f"{key}.concurrency", 1, MAX_CONCURRENCY)
            path = _inside(directory, directory / relative, shown=printable(relative), doc=doc,
                           key=f"{key}.result_file")
            try:
                text = read_regular_text(path, limit_bytes=GATE_LIMIT_BYTES)
            except ReadError as exc:
                raise CannotAdvise(exc.message) from None
            result = parse_bench_result(text, str(directory / relative))
            batches.add(c)
            measured.append(MeasuredPoint(name, c, k, schedule, result.output_tokens_per_s))
            if schedule is None and result.mean_itl_ms is not None:
                samples.append((c, k, result.mean_itl_ms))
            if name == "candidate":
                more = _counters_of(run.get("metrics_window"), doc, f"{key}.metrics_window")
                if more is not None:
                    counters = more if counters is None else counters + more
    measured = _pooled(measured)
    if candidate_k is None or seat is None:
        raise CannotAdvise(f"{directory}: the gate has no candidate arm")
    if counters is None:
        raise CannotAdvise(f"{directory}: the candidate arm recorded no spec-decode counters")
    return Inputs({"kind": "gate", "where": str(directory)}, counters,
                  tuple(cells_from_runs(samples)), seat.serve.max_num_seqs,
                  tuple(sorted(batches)), tuple(measured), seat)


def from_live(urls: Sequence[str], window_s: float, seat: Seat | None,
              logs: Sequence[Path], max_num_seqs: int | None) -> Inputs:
    first = []
    for url in urls:
        try:
            first.append(Snapshot(time.monotonic(), read_page(fetch_once(url, 10.0))))
        except RocmseatError as exc:
            raise CannotAdvise(f"{url}: {exc.message}") from None
    time.sleep(window_s)
    counters: Counters | None = None
    for url, before in zip(urls, first, strict=True):
        try:
            after = Snapshot(time.monotonic(), read_page(fetch_once(url, 10.0)))
        except RocmseatError as exc:
            raise CannotAdvise(f"{url}: {exc.message}") from None
        window = window_between(before, after)
        if window is None:
            raise CannotAdvise(f"{url}: the replica restarted during the window")
        if not window.spec_present:
            raise CannotAdvise(f"{url}: blind: no spec-decode series on /metrics (no drafter, "
                               "or --disable-log-stats)")
        if window.drafts > 0:
            more = Counters(window.drafts, window.draft_tokens, window.accepted_tokens,
                            window.accepted_per_pos)
            counters = more if counters is None else counters + more
    if counters is None:
        raise CannotAdvise(f"no drafts in {window_s:g} s on {', '.join(urls)}: send traffic "
                           "during the window (or widen --window)")
    cells: list[Cell] = []
    for log in logs:
        try:
            text = read_regular_text(log, limit_bytes=LOG_LIMIT_BYTES)
        except ReadError as exc:
            raise CannotAdvise(exc.message) from None
        cells += cells_from_steps(parse_iteration_log(text).steps)
    seqs = max_num_seqs or (seat.serve.max_num_seqs if seat else DEFAULT_MAX_NUM_SEQS)
    batches = tuple(sorted({c.batch for c in cells} | {1}))
    return Inputs({"kind": "seat" if seat else "target", "where": ", ".join(urls)}, counters,
                  tuple(cells), seqs, batches, (), seat)


def _check_window(counters: Counters) -> Acceptance:
    try:
        acceptance = estimate(counters)
    except CountersError as exc:
        raise CannotAdvise(f"acceptance counters unusable: {exc}") from None
    if acceptance.shortfall > MAX_SHORTFALL:
        raise CannotAdvise(
            f"{acceptance.shortfall:.1%} of the draft positions were never tried (n-gram misses, "
            "a per-batch-size schedule, max-model-len): the per-position counters are not a "
            "window of constant K", hint="measure with a static num_speculative_tokens")
    return acceptance


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def run_advise(inputs: Inputs, *, k_limit: int | None = None) -> tuple[Decision, Acceptance,
                                                                          StepCost]:
    acceptance = _check_window(inputs.counters)
    try:
        cost = choose(inputs.cells)
    except StepCostError as exc:
        raise CannotAdvise(f"step cost: {exc}",
                           hint="use --from-gate DIR, or --iteration-log FILE with K=0 steps") \
            from None

    def run(allowed: Allowed | None) -> Advice:
        return advise(inputs.counters, cost, max_num_seqs=inputs.max_num_seqs,
                      report_batches=inputs.batches, k_limit=k_limit, rng=random.Random(12),
                      allowed=allowed)

    method = inputs.seat.drafter.method if inputs.seat and inputs.seat.drafter else None
    decision = decide(run, observations(inputs, acceptance, cost), method,
                      lambda b, k: throughput(acceptance, cost, b, k), cost.rms_relative)
    trap = seat_k0_trap(method, current_drafter(inputs.seat)[1])
    if trap:
        decision = replace(decision, notes=(*decision.notes, trap))
    return decision, acceptance, cost


def k_ran(point: MeasuredPoint, max_num_seqs: int) -> int:
    """The K a measured point ran: a schedule's tier at that batch size, not its maximum."""
    if point.schedule is None or point.k == 0:
        return point.k
    return lookup(point.schedule, max_num_seqs, point.k)[min(point.batch, max_num_seqs) - 1]


def predicted_for(point: MeasuredPoint, acceptance: Acceptance, cost: StepCost,
                  max_num_seqs: int) -> float:
    return throughput(acceptance, cost, point.batch, k_ran(point, max_num_seqs))


def observations(inputs: Inputs, acceptance: Acceptance, cost: StepCost
                 ) -> tuple[Observation, ...]:
    return tuple(
        Observation(p.arm, p.batch, k_ran(p, inputs.max_num_seqs), p.k > 0, p.tokens_per_s,
                    noise_of(p.tokens_per_s, p.sd),
                    predicted_for(p, acceptance, cost, inputs.max_num_seqs))
        for p in _measured_in_order(inputs))


def verify_command(inputs: Inputs, decision: Decision) -> str | None:
    """The next step for a proposal with a tier the gate did not measure: write it into a copy
    of the candidate's seat and gate that copy (a runnable command line), or None."""
    if not decision.unmeasured or decision.advice.num_speculative_tokens is None:
        return None
    if inputs.source["kind"] != "gate":
        # no gate directory: the seat files are the operator's (placeholders in capitals)
        return ("cp SEAT.toml PROPOSAL.toml && rocmseat spec advise SEAT.toml --write "
                "PROPOSAL.toml --accept-model && rocmseat spec gate BASE_SEAT.toml PROPOSAL.toml "
                f"--concurrency {','.join(str(b) for b in inputs.batches)}")
    where = Path(inputs.source["where"])
    proposal = shlex.quote(f"{where}-proposal.toml")
    gate = shlex.quote(str(where))
    levels = ",".join(str(b) for b in inputs.batches)
    return (f"cp {shlex.quote(str(where / 'arms' / 'candidate' / 'seat.toml'))} {proposal} && "
            f"rocmseat spec advise --from-gate {gate} --write {proposal} --accept-model && "
            f"rocmseat spec gate {shlex.quote(str(where / 'arms' / 'base' / 'seat.toml'))} "
            f"{proposal} --concurrency {levels} --out {shlex.quote(f'{where}-verify')}")


def current_drafter(seat: Seat | None) -> tuple[int | None, Schedule | None]:
    if seat is None or seat.drafter is None:
        return None, None
    return seat.drafter.num_speculative_tokens, seat.drafter.num_speculative_tokens_per_batch_size


def _proposal_json(advice: Advice) -> dict[str, Any]:
    return {"num_speculative_tokens": advice.num_speculative_tokens,
            "num_speculative_tokens_per_batch_size": as_lists(advice.schedule)
            if advice.schedule else None}


def advice_json(inputs: Inputs, decision: Decision, acceptance: Acceptance, cost: StepCost, *,
                picture: str | None, picture_note: str, exit_code: int,
                written: str | None) -> dict[str, Any]:
    a = acceptance
    advice = decision.advice
    pvm = [{"arm": o.arm, "batch": o.batch, "k": o.k, "k_max": p.k,
            "schedule": as_lists(p.schedule) if p.schedule else None,
            "predicted_tok_s": _r(o.predicted_tok_s, 2), "measured_tok_s": _r(o.measured_tok_s, 2),
            "miss": _r(o.miss), "noise": _r(o.noise), "misses": o.misses}
           for o, p in zip(decision.observations, _measured_in_order(inputs), strict=True)]
    k_now, sched_now = current_drafter(inputs.seat)
    return {
        "schema": SCHEMA,
        "source": inputs.source,
        "acceptance": {
            "k": a.k, "drafts": a.drafts, "shortfall": _r(a.shortfall),
            "alpha": _r(a.alpha), "alpha_se": _r(a.alpha_se), "trials": a.trials,
            "conditional": [_r(v) for v in a.conditional],
            "histogram": list(a.histogram),
            "geometric_fit": {"alpha": _r(a.geometric.params[0]),
                              "log_likelihood": _r(a.geometric.log_likelihood, 3),
                              "rejected": a.geometric_rejected, "note": a.fit_note},
            "beta_geometric_fit": None if a.beta_geometric is None else {
                "a": _r(a.beta_geometric.params[0]), "b": _r(a.beta_geometric.params[1]),
                "log_likelihood": _r(a.beta_geometric.log_likelihood, 3)},
            "lrt_g": _r(a.lrt_g), "lrt_p": _r(a.lrt_p), "pearson_x2": _r(a.pearson_x2),
            "pearson_df": a.pearson_df, "pearson_p": _r(a.pearson_p),
            "trend": a.trend,
            "e": [{"k": k, "e": _r(a.e(k)), "extrapolated": a.is_extrapolated(k),
                   "how": "measured" if not a.is_extrapolated(k)
                   else f"extrapolation (measured E({a.k}) + {a.extrapolation_model} model "
                        "increments)"}
                  for k in range(0, advice.k_limit + 1)],
        },
        "step_cost": {
            "kind": cost.kind, "why": cost.why,
            "params_ms": None if cost.params is None else dict(zip(
                ("t0", "t1_per_request", "u0_per_draft_token", "u1_per_draft_token_request"),
                (_r(p) for p in cost.params), strict=True)),
            "rms_relative": _r(cost.rms_relative),
            "cells": [{"batch": c.batch, "k": c.k, "mean_ms": _r(c.mean_ms), "sd_ms": _r(c.sd_ms),
                       "count": c.count, "source": c.source} for c in cost.cells],
        },
        "throughput": [{"batch": p.batch, "k": p.k, "tokens_per_s": _r(p.tokens_per_s, 2),
                        "extrapolated": p.extrapolated} for p in advice.points],
        "best_k": list(advice.best_k),
        "bands": [{"start": t.start, "end": t.end, "k": t.k, "gain": _r(t.band.gain),
                   "gain_low": _r(t.band.gain_low), "gain_high": _r(t.band.gain_high),
                   "basis": t.basis, "evidence": t.evidence,
                   "confidence": _r(t.confidence),
                   "runner_up_k": t.band.runner_up,
                   "bootstrap_agreement": _r(t.band.bootstrap_agreement),
                   "extrapolated": t.band.extrapolated,
                   "extrapolated_why": t.band.why_extrapolated or None}
                  for t in decision.tiers],
        "staircase": {str(b): [{"alpha_from": t.alpha_from, "k": t.k} for t in steps]
                      for b, steps in advice.staircase.items()},
        "proposal": {
            **_proposal_json(advice),
            "current_num_speculative_tokens": k_now,
            "current_num_speculative_tokens_per_batch_size": as_lists(sched_now)
            if sched_now else None,
            "config_key_changes": (advice.num_speculative_tokens, advice.schedule)
            != (k_now, sched_now),
            "measured_only": not decision.unmeasured,
            "k0_tiers_allowed": decision.k0_allowed,
        },
        "model_proposal": _proposal_json(decision.free),
        "model_check": {
            "rms_relative_miss": _r(decision.model_error),
            "from": decision.model_error_from,
            "misses": [f"{o.arm}@{o.batch}" for o in decision.observations if o.misses],
        },
        "notes": list(decision.notes),
        "next": verify_command(inputs, decision),
        "predicted_vs_measured": pvm,
        "picture": picture,
        "picture_note": picture_note,
        "written": written,
        "exit_code": exit_code,
    }


def _shown(value: float | None, spec: str) -> str:
    """A figure of the document, '-' where it is not a finite number (JSON null)."""
    return "-" if value is None else format(value, spec)


def _measured_in_order(inputs: Inputs) -> list[MeasuredPoint]:
    """inputs.measured in the order of `observations` (base first, then per arm and batch)."""
    return sorted(inputs.measured, key=lambda p: (p.arm != "base", p.arm, p.batch))


def render(doc: dict[str, Any]) -> str:
    a = doc["acceptance"]
    lines = [f"source: {doc['source']['kind']} {doc['source']['where']}",
             f"acceptance: alpha {a['alpha']} ± {a['alpha_se']} over {a['drafts']:.0f} drafts at "
             f"K={a['k']}; conditional {a['conditional']} ({a['trend']})",
             ("WARNING: " if a["geometric_fit"]["rejected"] else "")
             + f"goodness of fit: {a['geometric_fit']['note']}"]
    lines.append("E(k): " + ", ".join(
        f"{e['k']}:{e['e']}{'*' if e['extrapolated'] else ''}" for e in a["e"])
        + f"   (* extrapolation: the measured E({a['k']}) plus the model's increments)")
    sc = doc["step_cost"]
    lines.append(f"step cost: {sc['kind']}: {sc['why']}")
    batches = sorted({p["batch"] for p in doc["throughput"]})
    ks = sorted({p["k"] for p in doc["throughput"]})
    lines.append("tokens/s  " + "".join(f"{'B=' + str(b):>10}" for b in batches))
    table = {(p["batch"], p["k"]): p for p in doc["throughput"]}
    for k in ks:
        cells = []
        for b in batches:
            p = table[(b, k)]
            cells.append(f"{p['tokens_per_s']:.1f}{'*' if p['extrapolated'] else ''}")
        lines.append(f"K={k:<8}" + "".join(f"{c:>10}" for c in cells))
    lines.append("tiers (the staircase; basis: measured = a gate arm ran that K there and held, "
                 "model = interpolated, extrapolated = beyond the measurements):")
    for b in doc["bands"]:
        over = (f" over K={b['runner_up_k']}" if b["runner_up_k"] is not None else "")
        lines.append(f"  batch {b['start']}-{b['end']}: K={b['k']} [{b['basis']}], predicted gain "
                     f"{_shown(b['gain'], '.3f')}x (90 % {_shown(b['gain_low'], '.3f')}.."
                     f"{_shown(b['gain_high'], '.3f')}); confidence "
                     f"{_shown(b['confidence'], '.0%')}{over} with the model's error; bootstrap "
                     f"agreement {_shown(b['bootstrap_agreement'], '.0%')}")
        lines.append(f"    {b['evidence']}")
    mc = doc["model_check"]
    if mc["rms_relative_miss"] is not None:
        lines.append(f"model error: {mc['rms_relative_miss']:.1%} RMS, from {mc['from']}: the "
                     "confidence adds it to the bootstrap's spread")
    else:
        lines.append("model error: unknown (no measured arms, no step-cost fit): the confidence "
                     "is the bootstrap's alone and overstates what is known")
    if doc["predicted_vs_measured"]:
        lines.append(f"model check: {len(mc['misses'])} of {len(doc['predicted_vs_measured'])} "
                     "measured points miss the prediction by more than their noise:")
        for m in doc["predicted_vs_measured"]:
            k = f"{m['k']}" + (f" (schedule, max {m['k_max']})" if m["schedule"] else "")
            miss = _shown(m["miss"], "+.1%")
            lines.append(f"  {m['arm']:<10} B={m['batch']:<4} K={k:<19} predicted "
                         f"{_shown(m['predicted_tok_s'], '.2f'):>9} measured "
                         f"{_shown(m['measured_tok_s'], '.2f'):>9} {miss:>7} (noise "
                         f"±{_shown(m['noise'], '.0%')})"
                         + ("  MISS" if m["misses"] else ""))
    for note in doc["notes"]:
        lines.append(f"note: {note}")
    p = doc["proposal"]
    if p["num_speculative_tokens"] is None:
        lines.append("proposal: do not speculate (no K pays at any batch size)")
    else:
        bases = sorted({b["basis"] for b in doc["bands"]})
        lines.append(f"proposal: num_speculative_tokens = {p['num_speculative_tokens']}"
                     + (f", num_speculative_tokens_per_batch_size = "
                        f"{p['num_speculative_tokens_per_batch_size']}"
                        if p["num_speculative_tokens_per_batch_size"] else "")
                     + f" (basis: {', '.join(bases)})")
    model = doc["model_proposal"]
    if {k: p[k] for k in model} != model:
        lines.append(f"the model alone: num_speculative_tokens = {model['num_speculative_tokens']}"
                     + (f", num_speculative_tokens_per_batch_size = "
                        f"{model['num_speculative_tokens_per_batch_size']}"
                        if model["num_speculative_tokens_per_batch_size"] else "")
                     + " (not proposed: see the notes)")
    if p["current_num_speculative_tokens"] is not None:
        lines.append(f"seat now: num_speculative_tokens = {p['current_num_speculative_tokens']}"
                     + (f", schedule {p['current_num_speculative_tokens_per_batch_size']}"
                        if p["current_num_speculative_tokens_per_batch_size"] else ""))
    if doc["next"]:
        lines.append("next: not every tier was measured; measure the proposal before it "
                     "serves:")
        lines.append(f"  {doc['next']}")
    if doc["written"]:
        lines.append(doc["written"])
    lines.append(f"picture: {doc['picture'] or doc['picture_note']}")
    return "\n".join(lines) + "\n"


def seat_for(path: Path) -> Seat:
    from rocmseat.spec.gateconf import load_seat_with_gate

    return load_seat_with_gate(path).seat


def check_window(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"--window {value:g}: must be a positive, finite number of seconds")
    return value
