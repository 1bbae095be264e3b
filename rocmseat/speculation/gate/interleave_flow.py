"""`rocmseat spec gate --interleave BASE CANDIDATE`: the arms over fresh starts, A B B A A B ...,
decided after every start (DIFFERENT, SAME, or UNKNOWN at the bound), docs/spec.md "Arms
interleaved across starts".

Each start is one `GateRun.run_arm` (launch, the battery, stop; each arm's compile caches kept
across its starts in `caches/base`, `caches/candidate`) with the battery cut to
the decode runs at one concurrency (the highest of the battery: `--concurrency 4` for another):
the figure of a start is the median of its repeats. `interleave.json`
(rocmseat.gate-interleave/v1) and `interleave.txt` are written under --out beside every start's
files, and `interleave.json` again after every start, so a run stopped half way leaves what it
measured (with `error` set).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocmseat import jsonio
from rocmseat.errors import ConfigError
from rocmseat.redact import redact_text
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
from rocmseat.speculation.gate.flow import (
    GateOptions,
    GateOutcome,
    InterleaveOptions,
    check_battery_fits,
    settings_of,
    write_note,
)
from rocmseat.speculation.gate.interleave import Decision, Rules, Start
from rocmseat.speculation.gate.interleave_report import (
    Answer,
    StartEntry,
    answer,
    document,
    render,
)
from rocmseat.speculation.gate.interleave_run import ArmPair, run_interleaved
from rocmseat.speculation.gate.judge import GateConfig
from rocmseat.speculation.gate.outdir import LOCK_NAME, prepare_out
from rocmseat.speculation.gate.settings import Battery, load_seat_with_gate
from rocmseat.text import printable


@dataclass
class _Run:
    """What the run knows so far (written after every start)."""

    out: Path
    head: dict[str, Any]
    rules: Rules
    aa: bool
    config: GateConfig
    entries: list[StartEntry] = field(default_factory=list)
    history: list[Decision] = field(default_factory=list)

    def on_start(self, start: Start, record: ArmRecord) -> None:
        problems = _problems(record, self.config)
        if start.arm == "A" and problems:
            raise ArmError(f"base start {record.name}: {problems[0]}: nothing to compare with")
        self.entries.append(StartEntry(start, record.name, problems))

    def on_decision(self, decision: Decision) -> None:
        self.history.append(decision)
        if not decision.final:
            self.write(error="the gate run did not finish")

    def result(self) -> Answer:
        return answer(self.history[-1] if self.history else None, self.entries, self.aa)

    def write(self, error: str | None) -> tuple[dict[str, Any], str | None]:
        doc = document({**self.head, "written_at": now_utc()}, self.rules, self.entries,
                       history=self.history, result=self.result(),
                       error=None if error is None else redact_text(error))
        return doc, write_note(self.out, "interleave.json",
                               (jsonio.dumps(doc, indent=2) + "\n").encode())


def _problems(record: ArmRecord, config: GateConfig) -> tuple[str, ...]:
    fig = figures(record)
    out = [f"hang: {printable(h, 200)}" for h in fig.hangs]
    if fig.failed_requests > config.max_failed_requests:
        out.append(f"{fig.failed_requests} failed requests")
    return tuple(out)


def interleaved_battery(battery: Battery) -> tuple[Battery, int]:
    """The battery of one start: decode only, at the battery's highest concurrency."""
    concurrency = max(battery.concurrency)
    return replace(battery, concurrency=(concurrency,), phases=("decode",)), concurrency


def run_interleaved_gate(base_path: Path, cand_path: Path, options: GateOptions,
                         on_progress: Callable[[Progress], None]) -> GateOutcome:
    bounds = options.interleave or InterleaveOptions()
    if options.verify_schedule or options.aba:
        raise ConfigError("--interleave decides one comparison over many starts: "
                          "--verify-schedule and --aba belong to the one-start gate")
    base, cand = load_seat_with_gate(base_path), load_seat_with_gate(cand_path)
    if cand.seat.drafter is None and not options.aa:
        raise ConfigError(
            f"{cand_path}: the candidate seat has no [drafter]: there is no speculation to gate",
            hint="give a candidate with a [drafter] table, or pass --aa for an A/A run")
    config, battery = settings_of(cand, options)
    battery, concurrency = interleaved_battery(battery)
    for loaded, path in ((base, base_path), (cand, cand_path)):
        check_battery_fits(loaded, path, battery, options=options, cand=cand,
                           cand_path=cand_path)
        replica_slot(loaded.seat, options.replica)
    rules = Rules(effect=bounds.effect, max_starts=bounds.max_starts,
                  max_minutes=bounds.max_minutes, noise_floor=config.noise_floor)
    out = prepare_out(options.out)
    with gate_lock(out):
        _claim_empty(out)
        run_id = new_run_id()
        head = {"run_id": run_id, "base_seat": str(base_path), "candidate_seat": str(cand_path),
                "replica": options.replica, "aa": options.aa, "concurrency": concurrency,
                "battery": {"repeats": battery.repeats, "prompts": battery.prompts,
                            "output_tokens": battery.output_tokens,
                            "stall_after_s": battery.stall_after_s,
                            "run_timeout_s": battery.run_timeout_s}}
        run = _Run(out, head, rules, options.aa, config)
        run.write(error="the gate run did not finish")
        for python in engine_pythons(base.seat, cand.seat):
            check_bench_client(python)
        gate = GateRun(out=out, replica=options.replica, battery=battery, config=config,
                       port_base=base.seat.serve.port_base, on_progress=on_progress,
                       arms_planned=bounds.max_starts, run_id=run_id)
        try:
            arms = ArmPair(base, cand, ("base", "candidate"),
                           (out / "caches" / "base", out / "caches" / "candidate"))
            run_interleaved(gate, arms, rules, concurrency=concurrency, on_start=run.on_start,
                            on_decision=run.on_decision)
        except ArmError as exc:
            exc.document = run.write(error=exc.message)[0]
            raise
        doc, note = run.write(error=None)
        result = run.result()
        table = render(run.entries, result, concurrency=concurrency, rules=rules)
        notes = tuple(n for n in (note, write_note(out, "interleave.txt", table.encode()))
                      if n is not None)
        return GateOutcome(doc, table, result.exit_code, notes)


def _claim_empty(out: Path) -> None:
    """An interleaved run takes a new or empty directory: its starts' arms and documents never
    mix with another run's."""
    try:
        entries = sorted(n for n in os.listdir(out) if n != LOCK_NAME)
    except OSError as exc:
        raise ConfigError(f"--out {printable(str(out), 4096)}: "
                          f"{exc.strerror or type(exc).__name__}") from None
    if entries:
        raise ConfigError(f"--out {printable(str(out), 4096)}: holds "
                          f"{', '.join(printable(n, 80) for n in entries[:3])}: an interleaved "
                          "gate takes a new or empty directory")
