"""`rocmseat spec advise`: where its inputs come from, and the advice as a document.

Acceptance (per-position counters over a window of constant K):
- `--from-gate DIR`: the candidate arm's decode runs (the /metrics deltas the gate recorded);
- `SEAT` or `--target URL`: a live replica, two scrapes `--window` seconds apart (traffic must
  flow; a window whose drafts were not all full length is refused, docs/spec.md).

Step cost (rocmseat.speculation.advise.stepcost):
- `--from-gate DIR`: the mean ITL of every decode run of the base arm (K=0) and the candidate
  arm (its K), per concurrency and repeat;
- `--iteration-log FILE` (repeatable): pure decode steps of `--enable-logging-iteration-details`
  logs; K=0 steps must be among them (a base run, or a schedule's undrafted tier).
"""

from __future__ import annotations

import errno
import math
import random
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocmseat.errors import ConfigError, ReadError, RocmseatError
from rocmseat.httpclient import fetch_once
from rocmseat.redact import redact_text, redact_url
from rocmseat.safeio import read_regular_text
from rocmseat.seat.load import load_seat
from rocmseat.seat.model import Seat
from rocmseat.speculation.advise.acceptance import (
    MAX_SHORTFALL,
    Acceptance,
    Counters,
    CountersError,
    check_counters,
    estimate,
)
from rocmseat.speculation.advise.basis import (
    Decision,
    Observation,
    current_table,
    decide,
    noise_of,
    seat_k0_trap,
)
from rocmseat.speculation.advise.decide import Advice, Allowed, advise, throughput
from rocmseat.speculation.advise.iterlog import parse_iteration_log
from rocmseat.speculation.advise.modelerror import leave_out, measured_gains, monotone_floor
from rocmseat.speculation.advise.schedule import Schedule, as_lists, lookup
from rocmseat.speculation.advise.stepcost import (
    Cell,
    StepCost,
    StepCostError,
    cells_from_runs,
    cells_from_steps,
    choose,
)
from rocmseat.speculation.advise.ties import settle
from rocmseat.speculation.documents import (
    ArmDoc,
    DocumentError,
    DocumentInvalid,
    GateDoc,
    M,
    WindowDoc,
    load_document,
    parse,
)
from rocmseat.speculation.gate.benchresult import parse_bench_result
from rocmseat.text import printable
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
        return load_document(read_regular_text(path, limit_bytes=limit))
    except ReadError as exc:
        raise CannotAdvise(exc.message) from None
    except DocumentError as exc:
        raise CannotAdvise(f"{printable(str(path))}: not JSON ({exc})") from None


# A gate directory is hostile input like any other (docs/architecture.md "Hostile input"): every
# document is read through its strict model (rocmseat.speculation.documents) and every error is one
# line naming the file and the key; no file outside the directory is read (a path or a symlink
# that leads out is refused by name), so no byte of one can reach an error message.


def _inside(directory: Path, path: Path, *, shown: str | None = None,
            doc: str | None = None, key: str = "") -> Path:
    """`path` resolved, refused unless it lies inside `directory` (symlinks followed). `doc`:
    the shown name of the document whose `key` named the path."""
    root = directory.resolve()
    what: str | None = None
    real: Path | None = None
    try:
        real = path.resolve(strict=True)
    except FileNotFoundError:
        what = "does not exist"
    except RuntimeError:  # Python < 3.13 reports a loop so
        what = "is a symlink loop"
    except OSError as exc:
        what = ("is a symlink loop" if exc.errno == errno.ELOOP
                else f"cannot be read ({exc.strerror or type(exc).__name__})")
    except ValueError:  # an embedded NUL: no path at all
        what = "is not a path (it holds a NUL character)"
    if real is not None and real.is_relative_to(root):
        return real
    if real is not None:
        what = f"is outside the gate directory {directory}"
    if doc is not None:
        raise CannotAdvise(f"{doc}: key '{key}': {shown} {what}")
    if real is None:
        raise CannotAdvise(f"{printable(str(path))}: {what}")
    raise CannotAdvise(f"{printable(str(path))}: resolves outside the gate directory "
                       f"{printable(str(directory))}")


def _document(model: type[M], directory: Path, path: Path) -> M:
    """The document at `path` (inside `directory`) as its strict model."""
    shown = printable(str(path))
    try:
        return parse(model, _read_json(_inside(directory, path)), shown)
    except DocumentInvalid as exc:
        raise CannotAdvise(str(exc)) from None


def _counters_of(window: WindowDoc | None, shown: str, key: str, k: int) -> Counters | None:
    """The counters of one recorded window, checked as the watchdog checks a window (one rule,
    rocmseat.watch.metrics) and against the arm's K: a window of other than K positions
    (counters of another K mixed in) is refused, never padded."""
    if window is None or not window.spec_present or window.drafts <= 0:
        return None
    c = Counters(window.drafts, window.draft_tokens, window.accepted_tokens,
                 tuple(window.accepted_per_position))
    if c.k != k:
        raise CannotAdvise(f"{shown}: key '{key}.accepted_per_position': {c.k} positions, but "
                           f"the arm drafts num_speculative_tokens = {k}: counters of another K "
                           "(a proposal from mixed K is no advice)")
    try:
        check_counters(c)
    except CountersError as exc:
        raise CannotAdvise(f"{shown}: key '{key}': impossible counters: {exc}") from None
    return c


def from_gate(directory: Path, gate: GateDoc | None = None) -> Inputs:  # noqa: PLR0912, PLR0915
    """The advisor's inputs from a gate directory; `gate`: its document already read (the gate
    asks the advisor before it writes gate.json)."""
    gate_path = directory / "gate.json"
    gate_shown = printable(str(gate_path))
    if gate is None:
        gate = _document(GateDoc, directory, gate_path)
    if gate.error is not None:
        # a partial gate.json: the arms stopped short (docs/spec.md "Exit codes")
        raise CannotAdvise(f"{gate_shown}: the gate could not measure "
                           f"({printable(gate.error, 300)}): no advice from a partial gate")
    samples: list[tuple[int, int, float]] = []
    measured: list[MeasuredPoint] = []
    counters: Counters | None = None
    seat: Seat | None = None
    batches: set[int] = set()
    candidate_k: int | None = None
    names: set[str] = set()
    for index, entry in enumerate(gate.arms):
        name = entry.name
        if name in names:
            raise CannotAdvise(f"{gate_shown}: key 'arms[{index}].name': arm {name!r} is "
                               "listed twice")
        names.add(name)
        arm_dir = directory / "arms" / name
        shown = printable(str(arm_dir / "arm.json"))
        arm = _document(ArmDoc, directory, arm_dir / "arm.json")
        if arm.name != name:
            raise CannotAdvise(f"{shown}: key 'name': {arm.name!r}, but gate.json lists this "
                               f"record as arm {name!r}")
        if arm.run_id != gate.run_id:
            # an arm record left by another run (documents carry the run's identity; gates
            # written before it had none, in gate.json and arm.json alike)
            raise CannotAdvise(f"{shown}: key 'run_id': {printable(str(arm.run_id), 80)} is not "
                               f"the run of gate.json ({printable(str(gate.run_id), 80)}): the "
                               "arm record belongs to another gate run")
        k = arm.k
        if name == "candidate":
            candidate_k = k
            seat = load_seat(_inside(directory, arm_dir / "seat.toml"))
        for r, run in enumerate(arm.runs):
            key = f"runs[{r}]"
            if run.phase != "decode" or run.result_file is None:
                continue
            relative = run.result_file
            c = run.concurrency
            path = _inside(directory, directory / relative, shown=printable(relative),
                           doc=shown, key=f"{key}.result_file")
            try:
                text = read_regular_text(path, limit_bytes=GATE_LIMIT_BYTES)
            except ReadError as exc:
                raise CannotAdvise(exc.message) from None
            result = parse_bench_result(text, str(directory / relative))
            if result.max_concurrency is not None and result.max_concurrency != c:
                raise CannotAdvise(f"{shown}: key '{key}.concurrency': {c}, but its result file "
                                   f"ran max_concurrency {result.max_concurrency}: the record "
                                   "and the run disagree")
            batches.add(c)
            measured.append(MeasuredPoint(name, c, k, arm.schedule, result.output_tokens_per_s))
            if arm.schedule is None and result.mean_itl_ms is not None:
                samples.append((c, k, result.mean_itl_ms))
            if name == "candidate":
                more = _counters_of(run.metrics_window, shown, f"{key}.metrics_window", k)
                if more is not None:
                    counters = more if counters is None else counters + more
    measured = _pooled(measured)
    if candidate_k is None or seat is None:
        raise CannotAdvise(f"{directory}: the gate has no candidate arm")
    if counters is None:
        raise CannotAdvise(f"{directory}: the candidate arm recorded no spec-decode counters")
    return Inputs({"kind": "gate", "where": str(directory), "run_id": gate.run_id}, counters,
                  tuple(cells_from_runs(samples)), seat.serve.max_num_seqs,
                  tuple(sorted(batches)), tuple(measured), seat)


def from_live(urls: Sequence[str], window_s: float, seat: Seat | None,
              logs: Sequence[Path], max_num_seqs: int | None) -> Inputs:
    # every URL reaches output redacted (a --target may carry a password or a token)
    shown = [redact_url(url) for url in urls]
    first = []
    for url, name in zip(urls, shown, strict=True):
        try:
            first.append(Snapshot(time.monotonic(), read_page(fetch_once(url, 10.0))))
        except RocmseatError as exc:
            raise CannotAdvise(f"{name}: {redact_text(exc.message)}") from None
    time.sleep(window_s)
    counters: Counters | None = None
    for url, name, before in zip(urls, shown, first, strict=True):
        try:
            after = Snapshot(time.monotonic(), read_page(fetch_once(url, 10.0)))
        except RocmseatError as exc:
            raise CannotAdvise(f"{name}: {redact_text(exc.message)}") from None
        window = window_between(before, after)
        if window is None:
            raise CannotAdvise(f"{name}: the replica restarted during the window")
        if not window.spec_present:
            raise CannotAdvise(f"{name}: blind: no spec-decode series on /metrics (no drafter, "
                               "or --disable-log-stats)")
        if window.drafts > 0:
            more = Counters(window.drafts, window.draft_tokens, window.accepted_tokens,
                            window.accepted_per_pos)
            if counters is not None and more.k != counters.k:
                # replicas of other K: their per-position counters do not add up to a window
                # of one K (a proposal from mixed K is no advice)
                raise CannotAdvise(f"{name}: {more.k} per-position counters, the replicas "
                                   f"before it {counters.k}: a window of mixed K",
                                   hint="advise one replica (--target URL) at a time")
            counters = more if counters is None else counters + more
    if counters is None:
        raise CannotAdvise(f"no drafts in {window_s:g} s on {', '.join(shown)}: send traffic "
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
    return Inputs({"kind": "seat" if seat else "target", "where": ", ".join(shown)}, counters,
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
    left_out = leave_out(cost.cells, measured_gains(
        [(p.batch, p.k, p.schedule is not None, p.tokens_per_s, p.sd) for p in inputs.measured]),
        acceptance)
    decision = decide(run, observations(inputs, acceptance, cost), method,
                      lambda b, k: throughput(acceptance, cost, b, k),
                      fit_error=cost.rms_relative, left_out=left_out,
                      floor=lambda b, k: monotone_floor(acceptance, cost, b, k))
    trap = seat_k0_trap(method, current_drafter(inputs.seat)[1])
    if trap:
        decision = replace(decision, notes=(*decision.notes, trap))
    k_now, sched_now = current_drafter(inputs.seat)
    if inputs.seat is None:
        k_now = acceptance.k  # a live window of constant K: the replica drafts K now
    decision = settle(decision, current_table(k_now, sched_now, inputs.max_num_seqs),
                      acceptance, cost)
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
    if (decision.advice.num_speculative_tokens, decision.advice.schedule) == current_drafter(
            inputs.seat):
        return None  # the proposal is what the seat runs: nothing new to measure
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
                   "gain_low": _r(t.gain_low), "gain_high": _r(t.gain_high),
                   "bootstrap_low": _r(t.band.gain_low), "bootstrap_high": _r(t.band.gain_high),
                   "tie": t.tie or None,
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
            "left_out": _left_out_json(decision),
        },
        "notes": list(decision.notes),
        "next": verify_command(inputs, decision),
        "predicted_vs_measured": pvm,
        "picture": picture,
        "picture_note": picture_note,
        "written": written,
        "exit_code": exit_code,
    }


def _left_out_json(decision: Decision) -> dict[str, Any] | None:
    e = decision.left_out
    if e is None:
        return None
    return {"how": e.how, "rms_log_miss": _r(e.rms), "noise": _r(e.noise),
            "sigma": _r(e.sigma), "k_shape_measured": e.k_shape_measured,
            "misses": [{"batch": m.batch, "k": m.k, "predicted_gain": _r(m.predicted),
                        "measured_gain": _r(m.measured), "log_miss": _r(m.log_miss),
                        "noise": _r(m.noise)} for m in e.misses]}


def _shown(value: float | None, spec: str) -> str:
    """A figure of the document, '-' where it is not a finite number (JSON null)."""
    return "-" if value is None else format(value, spec)


def _measured_in_order(inputs: Inputs) -> list[MeasuredPoint]:
    """inputs.measured in the order of `observations` (base first, then per arm and batch)."""
    return sorted(inputs.measured, key=lambda p: (p.arm != "base", p.arm, p.batch))


def render(doc: dict[str, Any]) -> str:  # noqa: PLR0912, PLR0915
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
        if b["tie"]:
            lines.append(f"    TIE: {b['tie']}: the proposal leaves these batch sizes as the "
                         "seat has them")
    mc = doc["model_check"]
    lo = mc["left_out"]
    if lo is not None:
        misses = ", ".join(f"K={m['k']}@{m['batch']} {m['log_miss']:+.2f}" for m in lo["misses"])
        lines.append(f"model error on what it was not fitted to: {lo['how']}: "
                     f"RMS log miss {_shown(lo['rms_log_miss'], '.3f')} (measured noise "
                     f"{_shown(lo['noise'], '.3f')}); in the interval and confidence of every "
                     f"model or extrapolated tier" + (f"; misses {misses}" if misses else ""))
    if mc["rms_relative_miss"] is not None:
        lines.append(f"model error: {mc['rms_relative_miss']:.1%} RMS, from {mc['from']} "
                     "(in-sample): the confidence of a measured tier adds it to the bootstrap's "
                     "spread")
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
        bases = sorted({b["basis"] for b in doc["bands"] if not b["tie"]}
                       | ({"tie: the seat's K kept"} if any(b["tie"] for b in doc["bands"])
                          else set()))
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
    answer = doc.get("one_answer")
    if doc.get("gate_note"):
        lines.append(f"one answer: none: {doc['gate_note']}")
    if answer:
        lines.append(f"one answer (gate and advisor): {answer['answer'].upper()}: "
                     f"{answer['text']}")
        if answer["why_they_differ"]:
            lines.append("  the gate's crossover proposal is not the advisor's: "
                         f"{answer['why_they_differ']}")
    lines.append(f"picture: {doc['picture'] or doc['picture_note']}")
    return "\n".join(lines) + "\n"


def seat_for(path: Path) -> Seat:
    from rocmseat.speculation.gate.settings import load_seat_with_gate

    return load_seat_with_gate(path).seat


def check_window(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"--window {value:g}: must be a positive, finite number of seconds")
    return value
