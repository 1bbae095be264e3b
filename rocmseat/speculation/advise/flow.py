"""`rocmseat spec advise` as one call (docs/spec.md "spec advise"): the inputs from the one
source given, the advice, the picture, the `--write` edit of a seat, the exit code and the
document. The CLI checks the flags, calls `advise_flow` and renders.

A picture or a seat that cannot be written does not lose the advice: the picture's failure is
its note; a refused seat edit is `write_error` (the CLI prints the advice, then the error, and
exits 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocmseat import exitcodes
from rocmseat.atomic import WriteRefused
from rocmseat.errors import ConfigError, RocmseatError
from rocmseat.speculation.advise import advice as adv
from rocmseat.speculation.advise.basis import Decision, current_table, write_plan
from rocmseat.speculation.advise.decide import proposal_of
from rocmseat.speculation.advise.seatedit import current_drafter, write_drafter_schedule
from rocmseat.speculation.advise.verdict import (
    DO_NOT_SHIP,
    UNDECIDED,
    GateView,
    OneAnswer,
    one_answer,
    view_json,
)
from rocmseat.speculation.plot import PlotUnavailable, advise_picture
from rocmseat.text import printable

DEFAULT_WINDOW_S = 30.0


@dataclass(frozen=True, slots=True)
class AdviseRequest:
    seat_file: Path | None = None
    targets: Sequence[str] = ()
    gate_dir: Path | None = None
    window_s: float | None = None
    logs: Sequence[Path] = ()
    max_num_seqs: int | None = None
    k_limit: int | None = None
    write_seat: Path | None = None
    write_read_only: bool = False
    accept_model: bool = False  # --write: the model's and extrapolated tiers too
    picture: Path | None = None
    state_dir: Path | None = None


@dataclass(frozen=True, slots=True)
class AdviseOutcome:
    doc: dict[str, Any]
    exit_code: int
    write_error: ConfigError | None = None


def advise_flow(request: AdviseRequest) -> AdviseOutcome:
    inputs = _inputs(request)
    picture = request.picture
    if request.gate_dir is not None:
        picture = picture or request.gate_dir / "advise.png"
    decision, acceptance, cost = adv.run_advise(inputs, k_limit=request.k_limit)
    advice = decision.advice
    answer, view, gate_note = _gate_answer(request.gate_dir, decision)
    picture_path, picture_note = _picture(picture, decision, inputs,
                                          answer.headline if answer else "")
    written: str | None = None
    write_error: ConfigError | None = None
    code = exitcodes.OK
    if request.write_seat is not None:
        try:
            written, code = write_decision(request.write_seat, decision, inputs,
                                           accept_model=request.accept_model,
                                           read_only_ok=request.write_read_only)
        except ConfigError as exc:
            written, code, write_error = f"not written: {exc.message}", exc.exit_code, exc
    else:
        k_now, sched_now = adv.current_drafter(inputs.seat)
        if k_now is not None and (advice.num_speculative_tokens, advice.schedule) != (
                k_now, sched_now):
            code = exitcodes.PROBLEM
    if answer is not None and code == exitcodes.OK and request.write_seat is None:
        # the gate's verdict stands in the advice: the same exit code as `spec gate` on it
        code = {DO_NOT_SHIP: exitcodes.PROBLEM, UNDECIDED: exitcodes.CANNOT_CHECK}.get(
            answer.answer, code)
    doc = adv.advice_json(inputs, decision, acceptance, cost, picture=picture_path,
                          picture_note=picture_note, exit_code=code, written=written)
    doc["gate"] = None if view is None else view_json(view)
    doc["one_answer"] = None if answer is None else answer.json()
    doc["gate_note"] = gate_note or None
    return AdviseOutcome(doc, code, write_error)


def _gate_answer(gate_dir: Path | None, decision: Decision
                 ) -> tuple[OneAnswer | None, GateView | None, str]:
    """The gate's verdicts on this directory, judged again by the gate's rules, joined with the
    advice into one answer (rocmseat.speculation.advise.verdict); None without a gate."""
    if gate_dir is None:
        return None, None, ""
    from rocmseat.speculation.documents import DocumentInvalid
    from rocmseat.speculation.gate.flow import judge_saved

    # the gate's judge reads every file an arm saved (TTFT, prefix runs, launch logs), more
    # than the advisor: a gate directory with a link that leads out is not judged, so no byte
    # of a file outside it reaches the answer (docs/architecture.md "Hostile input")
    outside = _leads_outside(gate_dir)
    if outside:
        return None, None, (f"the gate's verdicts were not judged: {outside} leads outside the "
                            "gate directory")
    try:
        view = judge_saved(gate_dir)
    except (RocmseatError, DocumentInvalid, ValueError, OSError) as exc:
        return None, None, f"the gate's verdicts could not be judged: {printable(str(exc), 300)}"
    if view is None:  # an A/A run judges no candidate
        return None, None, ""
    return one_answer(view, decision), view, ""


MAX_GATE_ENTRIES = 100_000  # a gate directory holds a few hundred files


def _leads_outside(directory: Path) -> str:
    """'' or the first link under `directory` that resolves outside it (or a directory too
    large to check)."""
    root = directory.resolve()
    # what the gate's judge reads: gate.json and the arms' files (not the advice's own picture)
    read = [directory / "gate.json", directory / "arms"]
    for count, path in enumerate(p for top in read for p in (top, *(
            top.rglob("*") if top.is_dir() and not top.is_symlink() else ()))):
        if count > MAX_GATE_ENTRIES:
            return f"{printable(str(directory))} (more than {MAX_GATE_ENTRIES} entries)"
        if path.is_symlink():
            try:
                inside = path.resolve(strict=True).is_relative_to(root)
            except (OSError, RuntimeError, ValueError):
                inside = False
            if not inside:
                return printable(str(path))
    return ""


def _inputs(request: AdviseRequest) -> adv.Inputs:
    if request.window_s is not None:
        adv.check_window(request.window_s)
    if request.gate_dir is not None:
        inputs = adv.from_gate(request.gate_dir)
    else:
        window_s = DEFAULT_WINDOW_S if request.window_s is None else request.window_s
        seat = None
        if request.seat_file is not None:
            from rocmseat.state import state_root
            from rocmseat.watch.targets import seat_targets

            seat = adv.seat_for(request.seat_file)
            urls = [t.url for t in seat_targets(seat, state_root(request.state_dir,
                                                                 seat.state_dir))]
        else:
            from rocmseat.watch.scrape import parse_target

            urls = [parse_target(t, i).url for i, t in enumerate(request.targets)]
        inputs = adv.from_live(urls, window_s, seat, request.logs, request.max_num_seqs)
    if request.max_num_seqs is not None:
        inputs = adv.Inputs(inputs.source, inputs.counters, inputs.cells, request.max_num_seqs,
                            inputs.batches, inputs.measured, inputs.seat)
    return inputs


def _picture(path: Path | None, decision: Decision, inputs: adv.Inputs, headline: str = ""
             ) -> tuple[str | None, str]:
    if path is None:
        return None, "not drawn (pass --picture PATH)"
    try:
        drawn = str(advise_picture(path, decision, inputs.source["kind"], headline))
    except (PlotUnavailable, WriteRefused) as exc:
        # a picture that cannot be written is a note: the advice is still printed
        return None, exc.message
    return drawn, ("written" if decision.observations else
                   "written without the model-check panel: no measured arms to check the "
                   "model against (a gate directory has them)")


def write_decision(path: Path, decision: Decision, inputs: adv.Inputs, *, accept_model: bool,
                   read_only_ok: bool) -> tuple[str, int]:
    """`--write`: the proposal's measured tiers (every tier with `accept_model`; elsewhere the
    seat keeps its K, rocmseat.speculation.advise.basis.write_plan), the diff and the basis of
    every tier."""
    current = current_table(*current_drafter(path), inputs.max_num_seqs)
    plan = write_plan(decision, current, accept_model=accept_model)
    if not plan.changes:
        why = (" only the model's tiers would change it: --accept-model writes them, after "
               "measuring them (next:)" if plan.held_back else " it is the proposal already")
        return (f"{path}: not written: the seat's [drafter] stays as it is;{why}\n{plan.basis}",
                exitcodes.PROBLEM if plan.held_back else exitcodes.OK)
    k, schedule = proposal_of(plan.table)
    message, code = write_advice(path, replace(decision.advice, num_speculative_tokens=k,
                                               schedule=schedule), inputs,
                                 read_only_ok=read_only_ok)
    return f"{message}\nbasis of what was proposed:\n{plan.basis}", code


def write_advice(path: Path, advice: Any, inputs: adv.Inputs, *,
                 read_only_ok: bool) -> tuple[str, int]:
    """`--write`: the advice into the seat at `path` (rocmseat.speculation.advise.seatedit); what
    was done,
    with the diff, and the exit code. ConfigError when the seat is refused."""
    if advice.num_speculative_tokens is None:
        return (f"{path}: not written: no draft length pays at any batch size; removing the "
                "[drafter] is a decision to make by hand"), exitcodes.PROBLEM
    edit = write_drafter_schedule(path, advice.num_speculative_tokens, advice.schedule,
                                  advised_up_to=inputs.max_num_seqs, read_only_ok=read_only_ok)
    if not edit.changed:
        return f"{path}: already holds this advice: not rewritten", exitcodes.OK
    schedule = [list(e) for e in advice.schedule] if advice.schedule else "removed"
    return (f"{path}: [drafter] num_speculative_tokens = {advice.num_speculative_tokens}, "
            f"num_speculative_tokens_per_batch_size = {schedule}; the config key changes with "
            "it (the speculative config is a key factor): the next launch moves the replica's "
            "compile cache aside and compiles afresh\n" + edit.diff.rstrip("\n")), exitcodes.OK
