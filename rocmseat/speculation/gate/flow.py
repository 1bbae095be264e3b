"""`rocmseat spec gate BASE CANDIDATE`: the whole run, from two seat files to a verdict.

base arm, candidate arm (and with --verify-schedule a third arm running the proposed
`num_speculative_tokens_per_batch_size`), then the gates, the crossover and the proposal; the
document `gate.json` (rocmseat.gate/v1), `gate.txt` and `gate.png` are written under --out next
to every arm's files (seat, launch/watch/benchmark logs, every result file of vllm bench serve).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocmseat import exitcodes, jsonio
from rocmseat.atomic import WriteRefused, write_into
from rocmseat.errors import ConfigError
from rocmseat.redact import redact_text
from rocmseat.seat.load import load_seat
from rocmseat.speculation.advise.schedule import Schedule, as_lists
from rocmseat.speculation.advise.verdict import (
    Config,
    GateView,
    OneAnswer,
    arms_of,
    one_answer,
    view_json,
    without_advice,
)
from rocmseat.speculation.documents import load_document
from rocmseat.speculation.gate import battery as battery_mod
from rocmseat.speculation.gate.arms import (
    ArmError,
    ArmRecord,
    GateRun,
    Progress,
    check_bench_client,
    engine_pythons,
    figures,
    gate_lock,
    new_run_id,
    now_utc,
    replica_slot,
)
from rocmseat.speculation.gate.battery import BatteryError
from rocmseat.speculation.gate.bracket import (
    SECOND_BASE,
    bracketed_config,
    measured_drift,
    pooled_base,
)
from rocmseat.speculation.gate.judge import (
    ArmFigures,
    GateConfig,
    Verdict,
    crossover,
    judge,
    k0_note,
    proposed_schedule,
)
from rocmseat.speculation.gate.outdir import claim_out, prepare_out
from rocmseat.speculation.gate.report import (
    SCHEMA,
    VERDICT_WORDS,
    Comparison,
    draw,
    exit_code,
    figures_json,
    render_table,
    single_stream,
    verify_schedule_command,
)
from rocmseat.speculation.gate.settings import Battery, SeatWithGate, load_seat_with_gate
from rocmseat.speculation.plot import PlotUnavailable
from rocmseat.text import printable
from rocmseat.tomllocate import locate


@dataclass(frozen=True, slots=True)
class InterleaveOptions:
    """`spec gate --interleave`: the arms over fresh starts, decided sequentially
    (rocmseat.speculation.gate.interleave_flow)."""

    max_starts: int = 16  # both arms together
    max_minutes: float = 15.0  # the starts' wall time, launches included
    effect: float = 0.20  # the relative difference to see; SAME: no difference this large


@dataclass(frozen=True, slots=True)
class GateOptions:
    out: Path
    replica: str = "r0"
    verify_schedule: bool = False
    aa: bool = False  # an A/A run: the candidate may be the base itself (no drafter needed)
    aba: bool = False  # run the base again after the other arms: the drift, measured
    battery: dict[str, Any] | None = None  # flag overrides of Battery fields
    config: dict[str, Any] | None = None  # flag overrides of GateConfig fields
    interleave: InterleaveOptions | None = None  # None: one start per arm


@dataclass(frozen=True, slots=True)
class GateOutcome:
    doc: dict[str, Any]
    table: str
    exit_code: int
    notes: tuple[str, ...] = ()  # files of --out that could not be written


@dataclass(frozen=True, slots=True)
class GateContext:
    """One gate run: where it writes, the seats it compares and the settings it judges by."""

    out: Path
    base_path: Path
    cand_path: Path
    battery: Battery
    config: GateConfig
    options: GateOptions
    run_id: str | None


@dataclass(frozen=True, slots=True)
class Judged:
    """What a gate run measured and judged, as its document states it."""

    arms: list[ArmFigures]
    comparisons: list[Comparison]
    schedule: Schedule | None
    note: str
    picture: str | None
    picture_note: str
    code: int
    drift: float | None


def settings_of(cand: SeatWithGate, options: GateOptions) -> tuple[GateConfig, Battery]:
    config = replace(cand.config, **{k: v for k, v in (options.config or {}).items()
                                     if v is not None})
    battery = replace(cand.battery, **{k: v for k, v in (options.battery or {}).items()
                                       if v is not None})
    return config, battery


def run_gate(base_path: Path, cand_path: Path, options: GateOptions,
             on_progress: Callable[[Progress], None]) -> GateOutcome:
    base = load_seat_with_gate(base_path)
    cand = load_seat_with_gate(cand_path)
    if cand.seat.drafter is None and not options.aa:
        raise ConfigError(
            f"{cand_path}: the candidate seat has no [drafter]: there is no speculation to gate",
            hint="give a candidate with a [drafter] table, or pass --aa for an A/A run (the "
                 "gate's own noise: the same seat twice)")
    config, battery = settings_of(cand, options)
    for loaded, path in ((base, base_path), (cand, cand_path)):
        check_battery_fits(loaded, path, battery, options=options, cand=cand,
                            cand_path=cand_path)
        replica_slot(loaded.seat, options.replica)  # before --out is created (issue 18)
    out = prepare_out(options.out)  # the arms' seat files name their cache and state by it
    with gate_lock(out):
        claim_out(out, base_path, cand_path)
        run_id = new_run_id()
        ctx = GateContext(out, base_path, cand_path, battery, config, options, run_id)
        # the run owns --out from here: until it finishes, gate.json says it did not (a run
        # that fails before its first arm once left an older run's gate.json to advise from)
        _write_partial(ctx, [], error="the gate run did not finish")
        for python in engine_pythons(base.seat, cand.seat):
            check_bench_client(python)
        planned = (3 if options.verify_schedule and not options.aa else 2) + int(options.aba)
        gate = GateRun(out=out, replica=options.replica, battery=battery, config=config,
                       port_base=base.seat.serve.port_base, on_progress=on_progress,
                       arms_planned=planned, run_id=run_id)
        records: list[ArmRecord] = []

        def partial(error: ArmError) -> ArmError:
            """The document of a gate that could not measure, written and carried by the
            error (the CLI prints it with --json)."""
            error.document = _write_partial(ctx, records, error=error.message)
            return error

        try:
            records.append(gate.run_arm("base", base))
            records.append(gate.run_arm("candidate", cand))
        except ArmError as exc:
            raise partial(exc) from None
        if (problem := _unhealthy(records[0])) is not None:
            raise partial(ArmError(f"{problem}: nothing to compare with"))
        max_seqs = cand.seat.serve.max_num_seqs
        schedule = _proposal(records, config, options.aa, max_seqs)[0]
        try:
            if options.verify_schedule and schedule is not None:
                records.append(gate.run_arm("schedule", cand, schedule=schedule))
            if options.aba:
                records.append(gate.run_arm(SECOND_BASE, base))
        except ArmError as exc:
            raise partial(exc) from None
        if options.aba and (problem := _unhealthy(records[-1])) is not None:
            # the base the arms are judged against pools both base arms (bracket.py): a hang or
            # failed requests there leave nothing trustworthy to compare with
            raise partial(ArmError(f"{problem}: the drift between the base arms cannot be "
                                   "measured and the pooled base is not trustworthy"))
        return assemble(ctx, records, max_num_seqs=max_seqs)


def _unhealthy(record: ArmRecord) -> str | None:
    """Why a base arm cannot serve as the comparison (it hung or failed requests), or None."""
    fig = figures(record)
    if not fig.hangs and not fig.failed_requests:
        return None
    return (f"the {record.name} arm is unhealthy ({len(fig.hangs)} hangs, "
            f"{fig.failed_requests} failed requests)")


_BATTERY_FLAGS = {"gate.long_prompt_tokens": ("long_prompt_tokens", "--long-prompt-tokens"),
                  "gate.output_tokens": ("output_tokens", "--output-tokens")}


def check_battery_fits(loaded: SeatWithGate, path: Path, battery: Battery, *,
                        options: GateOptions, cand: SeatWithGate, cand_path: Path) -> None:
    """Before anything starts: the battery fits each seat's max_model_len (a BatteryError once
    surfaced only when the arm started, after the base arm had run). The error names the flag,
    or the seat file, line and key (a `[gate]` size lives in the candidate seat)."""
    try:
        battery_mod.sizes(battery, loaded.seat.serve.max_model_len)
    except BatteryError as exc:
        flag = _BATTERY_FLAGS.get(exc.key)
        if flag is not None and (options.battery or {}).get(flag[0]) is not None:
            raise ConfigError(f"{flag[1]}: {exc.why}") from None
        text, shown = (cand.text, cand_path) if flag is not None else (loaded.text, path)
        line = locate(text, tuple(exc.key.split(".")))
        where = printable(str(shown), 4096) + (f":{line}" if line is not None else "")
        raise ConfigError(f"{where}: {exc.message}") from None


def _base(records: list[ArmRecord]) -> tuple[ArmFigures, float | None]:
    """The base the arms are judged against: the base arm, or with --aba both base arms pooled
    and the drift between them."""
    first = figures(records[0])
    again = next((r for r in records if r.name == SECOND_BASE), None)
    if again is None:
        return first, None
    second = figures(again)
    return pooled_base(first, second), measured_drift(first, second)


def _proposal(records: list[ArmRecord], config: GateConfig, aa: bool,
              max_num_seqs: int) -> tuple[Schedule | None, list[Comparison], str]:
    base_fig, drift = _base(records)
    config = bracketed_config(config, drift)
    judged = [r for r in records[1:] if r.name != SECOND_BASE]
    comparisons = [_compare(base_fig, figures(r), config, aa and i == 0)
                   for i, r in enumerate(judged)]
    if aa:
        return None, comparisons, "A/A run: no schedule is proposed."
    cx = comparisons[0].crossover
    assert cx is not None
    method = _drafter_method(judged[0])
    schedule = proposed_schedule(cx, figures(judged[0]).k, max_num_seqs, method)
    return schedule, comparisons, _proposal_note(cx.concurrency, cx.last_winning, schedule) \
        + k0_note(method, schedule, figures(judged[0]).schedule)


def _drafter_method(record: ArmRecord) -> str | None:
    """The candidate arm's speculative method, from the seat it ran (None: no drafter)."""
    seat = load_seat(record.seat_file)
    return seat.drafter.method if seat.drafter else None


def assemble(ctx: GateContext, records: list[ArmRecord], *, max_num_seqs: int) -> GateOutcome:
    """Judge the measured arms and write gate.json, gate.txt and gate.png."""
    out, config, options, battery = ctx.out, ctx.config, ctx.options, ctx.battery
    schedule, comparisons, note = _proposal(records, config, options.aa, max_num_seqs)
    ran = next((r for r in records if r.name == "schedule"), None)
    if ran is not None and ran.schedule is not None and ran.schedule != schedule:
        # --aba: the third arm ran the proposal against the first base arm (base-2 runs last);
        # the pooled base can cross elsewhere. Report what ran; the rest is information.
        pooled = as_lists(schedule) if schedule is not None else "no schedule"
        note = (f"The third arm ran {as_lists(ran.schedule)}, proposed from the crossover "
                f"against the first base arm (before {SECOND_BASE} ran). Against both base "
                f"arms pooled the proposal would be {pooled} (information, not verified): "
                f"{note}")
        schedule = ran.schedule
    elif options.verify_schedule and not options.aa and ran is None:
        note += (" --verify-schedule: nothing to verify." if schedule is None else
                 " --verify-schedule: not verified: against the first base arm alone no "
                 "schedule was proposed, so no third arm ran; this proposal comes from both "
                 "base arms pooled.")
    drift = _base(records)[1]
    if drift is not None:
        used = bracketed_config(config, drift).drift
        note += (f" Drift between base and {SECOND_BASE}: {drift:.1%} measured, {used:.1%} used "
                 f"(assumed {config.drift:.1%}); the base figures pool both base arms.")
    arms = [figures(r) for r in records]
    picture, picture_note = _picture(out, arms, comparisons, config.aggregate_min_ratio)
    code = exit_code(comparisons[0].gates)
    doc = _document(ctx, records, Judged(arms, comparisons, schedule, note, picture,
                                         picture_note, code, drift))
    memory = {r.name: _memory_cell(r) for r in records}
    shown = Path(picture).name if picture else picture_note  # beside the table in --out
    answer_lines: list[str] = []
    if not options.aa:
        # one answer with `spec advise --from-gate` on this directory (issue 27)
        view = gate_view(comparisons, schedule, records)
        answer = _one_answer(out, doc, view)
        doc["gate_view"] = view_json(view)
        doc["one_answer"] = answer.json()
        answer_lines = answer.lines()
    table = render_table(arms, memory, comparisons=comparisons, proposal=schedule,
                         proposal_note=note, picture=shown,
                         verify=verify_schedule_command(ctx.base_path, ctx.cand_path,
                                                        battery.concurrency, battery.repeats,
                                                        out),
                         answer=answer_lines)
    notes = tuple(note for note in (
        write_note(out, "gate.json", (jsonio.dumps(doc, indent=2) + "\n").encode()),
        write_note(out, "gate.txt", table.encode())) if note is not None)
    return GateOutcome(doc, table, code, notes)


def gate_view(comparisons: list[Comparison], schedule: Schedule | None,
              records: list[ArmRecord]) -> GateView:
    """The gate's verdicts and proposal as the one-answer rule reads them
    (rocmseat.speculation.advise.verdict)."""
    arms = arms_of([(c.arm.name, c.arm.k, c.arm.schedule, VERDICT_WORDS[exit_code(c.gates)],
                     [f"{g.gate} {g.verdict.value}: {g.detail}" for g in c.gates
                      if g.verdict is not Verdict.PASS]) for c in comparisons])
    cand = comparisons[0]
    cross = cand.crossover.concurrency if cand.crossover is not None else None
    proposed: Config = ((cand.arm.k, schedule) if schedule is not None
                        else (cand.arm.k, None) if cross is None else None)
    ran = next((r.name for r in records if r.schedule is not None and schedule is not None
                and [list(e) for e in r.schedule] == [list(e) for e in schedule]), None)
    return GateView(arms, proposed, ran)


def _one_answer(out: Path, doc: dict[str, Any], view: GateView) -> OneAnswer:
    """The advisor on this gate's measurements, joined with the gate's verdicts."""
    from rocmseat.speculation.advise import advice as adv
    from rocmseat.speculation.documents import DocumentInvalid, GateDoc, parse

    try:
        gate = parse(GateDoc, load_document(jsonio.dumps(doc)), str(out / "gate.json"))
        decision = adv.run_advise(adv.from_gate(out, gate))[0]
    except (adv.CannotAdvise, ConfigError, DocumentInvalid) as exc:
        return without_advice(view, printable(str(exc), 300))
    return one_answer(view, decision)


def judge_saved(out: Path) -> GateView | None:
    """The verdicts of a finished gate from what it saved under --out, judged again by the
    gate's own rules (nothing is written); None for an A/A run."""
    out, _, records, _, config, options = load_saved(out)
    if options.aa:
        return None
    seat = load_seat(out / "arms" / "candidate" / "seat.toml")
    schedule, comparisons, _ = _proposal(records, config, False, seat.serve.max_num_seqs)
    ran = next((r for r in records if r.name == "schedule"), None)
    if ran is not None and ran.schedule is not None:
        schedule = ran.schedule
    return gate_view(comparisons, schedule, records)


def write_note(out: Path, name: str, data: bytes) -> str | None:
    """Write a file of the gate into --out; why it could not be written, or None. A failed
    write is a note: the verdict is still printed (issue 18)."""
    try:
        write_into(out, name, data)
    except WriteRefused as exc:
        return exc.message
    return None


def _memory_cell(record: ArmRecord) -> str:
    """The memory plan in one table cell: model memory of the smallest rank against its share
    of the checkpoint, or why it is unknown."""
    plan = record.memory
    if plan is None:
        return "-"
    ranks = plan.data.get("rank_memory_gib") or []
    ratio = plan.data.get("ratio")
    if not ranks:
        return f"{plan.severity.value}: not stated"
    if ratio is None:
        return f"{plan.severity.value}: {min(ranks):.2f} GiB"
    return f"{plan.severity.value}: {min(ranks):.2f} GiB {ratio:.0%}"


def load_saved(out: Path) -> tuple[Path, Any, list[ArmRecord], Battery, GateConfig, GateOptions]:
    """What a finished gate saved under --out: its document, arm records and settings."""
    from rocmseat.safeio import read_regular_text
    from rocmseat.speculation.documents import GateDoc, parse
    from rocmseat.speculation.gate.arms import load_arm_record

    out = out.absolute()
    doc = parse(GateDoc, load_document(read_regular_text(out / "gate.json",
                                                         limit_bytes=64 << 20)),
                str(out / "gate.json"))
    records = [load_arm_record(out, arm.name) for arm in doc.arms]
    saved = doc.battery.model_dump()
    battery = replace(Battery(), **{**saved, "concurrency": tuple(saved["concurrency"])})
    config = GateConfig(**doc.config.model_dump(exclude_none=True))
    names = {r.name for r in records}
    options = GateOptions(out=out, replica=doc.replica, verify_schedule="schedule" in names,
                          aa=doc.aa, aba=SECOND_BASE in names)
    return out, doc, records, battery, config, options


def _compare(base: ArmFigures, cand: ArmFigures, config: GateConfig, aa: bool) -> Comparison:
    return Comparison(cand, tuple(judge(base, cand, config)),
                      None if aa else crossover(base, cand, config.noise_floor, config.drift),
                      single_stream(base, cand, config.noise_floor, config.drift))


def _proposal_note(cross: int | None, last: int | None, schedule: Schedule | None) -> str:
    if cross is None:
        return ("No crossover: the candidate holds its aggregate throughput at every measured "
                "concurrency; no per-batch-size schedule is needed.")
    if schedule is None:
        return (f"The candidate falls below the base already at concurrency {cross}, the lowest "
                "measured: no schedule helps; do not speculate on this seat.")
    return (f"Crossover at concurrency {cross} (held at {last}): speculate up to "
            f"{schedule[0][1]} requests per step, not above (vLLM counts the requests scheduled "
            "in a step, prefill chunks included).")


def _picture(out: Path, arms: list[ArmFigures], comparisons: list[Comparison],
             threshold: float) -> tuple[str | None, str]:
    """gate.png in --out, named relative to it (gate.json and gate.txt lie beside it; an
    absolute path would name wherever the gate ran, not where the directory is now)."""
    try:
        path = draw(out / "gate.png", arms, comparisons, threshold)
    except (PlotUnavailable, WriteRefused) as exc:
        return None, exc.message
    return path.name, "written"


def _battery_json(battery: Battery) -> dict[str, Any]:
    return {"concurrency": list(battery.concurrency), "repeats": battery.repeats,
            "prompts": battery.prompts, "output_tokens": battery.output_tokens,
            "long_prompt_tokens": battery.long_prompt_tokens,
            "warm_ttft_samples": battery.warm_ttft_samples,
            "stall_after_s": battery.stall_after_s, "run_timeout_s": battery.run_timeout_s}


def _config_json(config: GateConfig) -> dict[str, Any]:
    return {"aggregate_min_ratio": config.aggregate_min_ratio,
            "cold_ttft_max_ratio": config.cold_ttft_max_ratio,
            "prefix_hit_max_drop": config.prefix_hit_max_drop,
            "kv_pool_min_ratio": config.kv_pool_min_ratio,
            "max_failed_requests": config.max_failed_requests,
            "noise_floor": config.noise_floor, "drift": config.drift}


def _arm_entry(record: ArmRecord, fig: ArmFigures) -> dict[str, Any]:
    return {
        "name": record.name,
        "seat": str(record.source_seat),
        "arm_file": f"arms/{record.name}/arm.json",
        "num_speculative_tokens": record.k,
        "schedule": as_lists(record.schedule) if record.schedule else None,
        "ready_after_s": None if record.ready_after_s is None else round(record.ready_after_s, 1),
        "memory_plan": record.memory.to_json() if record.memory else None,
        "result_files": [r.result_file for r in record.runs if r.result_file],
        "figures": figures_json(fig),
    }


def _document(ctx: GateContext, records: list[ArmRecord], judged: Judged,
              error: str | None = None) -> dict[str, Any]:
    """The rocmseat.gate/v1 document: the same keys on every way out (a gate that could not
    measure has `error` set; docs/architecture.md "JSON": keys are stable)."""
    return {
        "schema": SCHEMA,
        "run_id": ctx.run_id,
        "written_at": now_utc(),
        "base_seat": str(ctx.base_path),
        "candidate_seat": str(ctx.cand_path),
        "replica": ctx.options.replica,
        "aa": ctx.options.aa,
        "aba": ctx.options.aba,
        "battery": _battery_json(ctx.battery),
        "config": _config_json(ctx.config),
        "arms": [_arm_entry(r, a) for r, a in zip(records, judged.arms, strict=True)],
        "comparisons": [c.json() for c in judged.comparisons],
        "proposed_schedule": as_lists(judged.schedule) if judged.schedule else None,
        "proposal": judged.note,
        "picture": judged.picture,
        "picture_note": judged.picture_note,
        "verdict": VERDICT_WORDS[judged.code] if error is None else "could not measure",
        "exit_code": judged.code,
        "error": None if error is None else redact_text(error),
        "measured_drift": None if judged.drift is None else round(judged.drift, 4),
        # the gate's verdicts joined with `spec advise` on this directory (issue 27; None for
        # an A/A run or a gate that could not measure)
        "gate_view": None,
        "one_answer": None,
    }


def _write_partial(ctx: GateContext, records: list[ArmRecord], *,
                   error: str) -> dict[str, Any]:
    """gate.json of a gate that could not measure (or has not finished): the arms measured so
    far, nothing judged. Written at the start of a run too, so --out never holds an older
    run's finished document while this run is under way. A write that fails leaves the
    document in the error (the CLI prints it with --json)."""
    doc = _document(ctx, records,
                    Judged([figures(r) for r in records], [], None, "", None, "",
                           exitcodes.CANNOT_CHECK, _base(records)[1] if records else None),
                    error=error)
    doc["proposal"] = doc["picture_note"] = None
    note = write_note(ctx.out, "gate.json", (jsonio.dumps(doc, indent=2) + "\n").encode())
    if note is not None and not records:
        raise ArmError(f"{note}: the gate cannot record its run in --out")
    return doc
