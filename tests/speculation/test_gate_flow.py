"""The whole gate flow (rocmseat/speculation/gate/flow.py `run_gate`) with its arms replayed
from a
recorded CPU gate instead of started: which arms run with which schedule, the --aba bracket,
and the document written on every way out. No engine, no process is started."""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil

import pytest

import rocmseat.speculation.gate.flow as gateflow
from rocmseat.speculation.gate.arms import ArmError, ArmRecord
from rocmseat.speculation.gate.bracket import SECOND_BASE
from rocmseat.speculation.gate.flow import GateOptions, run_gate
from tests.conftest import FIXTURES
from tests.speculation.recorded_gate import (
    BASE_SEAT,
    HANG,
    SPEC_SEAT,
    recorded_arms,
)


@pytest.fixture
def recorded(tmp_path) -> dict[str, ArmRecord]:
    return recorded_arms(tmp_path, ("base", "candidate", "schedule"))


def scaled(record: ArmRecord, name: str, factors: dict[int, float]) -> ArmRecord:
    """`record` as another arm whose decode throughput at some concurrencies is scaled."""
    out = copy.deepcopy(record)
    out.name = name
    for run in out.runs:
        if run.phase == "decode" and run.result is not None and run.concurrency in factors:
            run.result = dataclasses.replace(
                run.result,
                output_tokens_per_s=run.result.output_tokens_per_s * factors[run.concurrency])
    return out


@pytest.fixture
def replay(monkeypatch):
    """run_gate with GateRun.run_arm replaced by the recorded arms; returns the calls made."""
    calls: list[tuple[str, object]] = []
    arms: dict[str, ArmRecord] = {}

    def run_arm(self, name, source, *, schedule=None, expect_spec=None, k=None):
        calls.append((name, schedule))
        if name == "schedule":
            assert schedule == arms[name].schedule  # the arm runs what was proposed
        if isinstance(arms[name], Exception):
            raise arms[name]
        return copy.deepcopy(arms[name])

    monkeypatch.setattr(gateflow, "check_bench_client", lambda python: {})
    monkeypatch.setattr(gateflow.GateRun, "run_arm", run_arm)
    return arms, calls


def _gate(tmp_path, **options):
    return run_gate(BASE_SEAT, SPEC_SEAT, GateOptions(out=tmp_path / "out", **options),
                    lambda progress: None)


def test_replayed_gate_runs_the_proposed_schedule(tmp_path, recorded, replay):
    arms, calls = replay
    arms.update(recorded)
    outcome = _gate(tmp_path, verify_schedule=True)
    assert [name for name, _ in calls] == ["base", "candidate", "schedule"]
    assert calls[2][1] == ((1, 1, 4), (2, 64, 0))
    assert outcome.doc["proposed_schedule"] == [[1, 1, 4], [2, 64, 0]]
    assert outcome.exit_code == 1


def test_aba_reports_the_schedule_the_third_arm_ran(tmp_path, recorded, replay):
    arms, calls = replay
    arms.update(recorded)
    # base-2 ran slower at concurrency 4: against both base arms pooled the candidate holds
    # there, and the pooled crossover moves up to 8 (another schedule than the one that ran)
    arms[SECOND_BASE] = scaled(recorded["base"], SECOND_BASE, {4: 0.5})
    outcome = _gate(tmp_path, verify_schedule=True, aba=True)
    assert [name for name, _ in calls] == ["base", "candidate", "schedule", SECOND_BASE]
    doc = outcome.doc
    assert doc["comparisons"][0]["crossover"]["concurrency"] == 8  # judged against the pool
    # the schedule reported is the one the third arm ran, not a recomputed one
    assert doc["proposed_schedule"] == [[1, 1, 4], [2, 64, 0]] == doc["arms"][2]["schedule"]
    assert ("proposed num_speculative_tokens_per_batch_size = [[1, 1, 4], [2, 64, 0]]"
            in outcome.table.splitlines())
    note = doc["proposal"]
    assert "The third arm ran [[1, 1, 4], [2, 64, 0]]" in note
    assert "both base arms pooled" in note and "[[1, 4, 4], [5, 64, 0]]" in note
    saved = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert saved["proposed_schedule"] == [[1, 1, 4], [2, 64, 0]]


def test_aba_with_a_second_base_that_hung(tmp_path, recorded, replay):
    arms, _ = replay
    arms.update(recorded)
    hung = scaled(recorded["base"], SECOND_BASE, {})
    hung.hangs = [HANG]
    arms[SECOND_BASE] = hung
    with pytest.raises(ArmError, match=f"the {SECOND_BASE} arm is unhealthy \\(1 hangs, 0 "
                                       "failed requests\\)") as caught:
        _gate(tmp_path, aba=True)
    assert caught.value.exit_code == 2
    doc = json.loads((tmp_path / "out" / "gate.json").read_text())
    assert doc["exit_code"] == 2 and doc["verdict"] == "could not measure"
    assert SECOND_BASE in doc["error"]
    assert caught.value.document == doc


def test_aba_with_a_second_base_that_failed_requests(tmp_path, recorded, replay):
    arms, _ = replay
    arms.update(recorded)
    failing = scaled(recorded["base"], SECOND_BASE, {})
    run = next(r for r in failing.runs if r.phase == "decode")
    run.result = dataclasses.replace(run.result, failed=3)
    arms[SECOND_BASE] = failing
    with pytest.raises(ArmError, match=f"the {SECOND_BASE} arm is unhealthy \\(0 hangs, 3 "
                                       "failed requests\\)"):
        _gate(tmp_path, aba=True)


def test_the_partial_document_has_the_keys_of_a_whole_one(tmp_path, recorded, replay):
    arms, _ = replay
    arms.update(recorded)
    whole = _gate(tmp_path / "whole", verify_schedule=True).doc
    arms["candidate"] = ArmError("arm candidate: the replica never became ready: no READY=1")
    with pytest.raises(ArmError) as caught:
        _gate(tmp_path / "partial", verify_schedule=True, aba=True)
    partial = json.loads((tmp_path / "partial" / "out" / "gate.json").read_text())
    assert set(partial) == set(whole)
    assert (partial["replica"], partial["aa"], partial["aba"], partial["measured_drift"]) == (
        "r0", False, True, None)
    assert partial["error"] == "arm candidate: the replica never became ready: no READY=1"
    assert [a["name"] for a in partial["arms"]] == ["base"]
    assert caught.value.document == partial


def test_json_prints_the_partial_document_too(rocmseat_cli, tmp_path, recorded, replay):
    arms, _ = replay
    arms.update(recorded)
    arms["candidate"] = ArmError("arm candidate: the replica never became ready: no READY=1")
    result = rocmseat_cli("spec", "gate", str(BASE_SEAT), str(SPEC_SEAT), "--out",
                          str(tmp_path / "out"), "--json", "--no-progress")
    assert result.exit_code == 2
    assert json.loads(result.stdout) == json.loads((tmp_path / "out" / "gate.json").read_text())
    assert result.stderr.splitlines()[0] == (
        "rocmseat: error: arm candidate: the replica never became ready: no READY=1")


class _Client:
    """vLLM's benchmark client replayed: each run 'writes' a recorded result file."""

    def run(self, argv, timeout_s, abort, what):
        result_dir = argv[argv.index("--result-dir") + 1]
        name = argv[argv.index("--result-filename") + 1]
        shutil.copy(FIXTURES / "spec" / "bench-results" / "deep-base-c1.json",
                    f"{result_dir}/{name}")
        return {"ok": True}


class _Watch:
    interval_s = 0.05

    def __init__(self, *, exited: bool = False, scraping: bool = True) -> None:
        self.exited, self.scraping, self.count = exited, scraping, 0

    def hangs(self):
        return []

    def alerts(self):
        return []

    def gone(self):
        return "the watchdog exited 1: ImportError: boom" if self.exited else None

    def scrapes(self):
        if self.exited:
            return None
        self.count += int(self.scraping)
        return self.count


@pytest.mark.parametrize(
    ("watch", "verdict", "gap"),
    [
        (_Watch(), "PASS", None),
        (_Watch(exited=True), "UNKNOWN", "the watchdog exited 1: ImportError: boom"),
        (_Watch(scraping=False), "UNKNOWN",
         "the watchdog did not scrape the replica successfully during the run"),
    ],
    ids=["watching", "exited", "never scraped"],
)
def test_the_hang_gate_needs_a_watchdog_that_watched(tmp_path, monkeypatch, watch, verdict, gap):
    # a dead or idle watchdog sees no hang: that was a PASS before
    import rocmseat.speculation.gate.arms as gaterun
    from rocmseat.seat.load import load_seat
    from rocmseat.speculation.gate.battery import plan
    from rocmseat.speculation.gate.judge import GateConfig, judge
    from rocmseat.speculation.gate.settings import Battery

    monkeypatch.setattr(gaterun, "WATCH_SCRAPE_TIMEOUT_S", 0.1)
    battery = Battery(concurrency=(1,), repeats=1, phases=("decode",))
    gate = gaterun.GateRun(out=tmp_path, replica="r0", battery=battery, config=GateConfig(),
                           port_base=9, on_progress=lambda p: None, arms_planned=2)
    seat = load_seat(SPEC_SEAT)
    record = ArmRecord("candidate", tmp_path / "seat.toml", SPEC_SEAT, 0, None)
    gate._battery(record, plan(battery, 512), client=_Client(), watch=watch, seat=seat,
                  base_url="http://127.0.0.1:9", spec_expected=False,
                  progress=lambda *a, **k: None)
    assert len(record.runs) == 1 and record.runs[0].result is not None
    base = gaterun.figures(record)
    cand = gaterun.figures(record)
    hang = {g.gate: g for g in judge(base, cand, GateConfig())}["hang"]
    assert hang.verdict.value == verdict
    if gap is None:
        assert record.watch_gaps == []
    else:
        assert record.watch_gaps[0].startswith(f"decode-c1-r0: {gap}")
        assert hang.detail.startswith(f"not watched: decode-c1-r0: {gap}")


def test_a_gate_file_that_cannot_be_written_is_a_note(tmp_path, recorded, replay, monkeypatch):
    # issue 18 item 1: a link planted at gate.txt, a directory at gate.png while the gate runs
    # (after it claimed --out): the verdict is still returned (and printed), the link's target
    # untouched, each failure a note
    arms, _ = replay
    arms.update(recorded)
    out = tmp_path / "out"
    mine = tmp_path / "mine.txt"
    mine.write_text("mine\n")
    claim = gateflow.claim_out

    def claim_then_plant(*args):
        claim(*args)
        (out / "gate.txt").symlink_to(mine)
        (out / "gate.png").mkdir()

    monkeypatch.setattr(gateflow, "claim_out", claim_then_plant)
    outcome = _gate(tmp_path)
    assert outcome.exit_code == 1 and outcome.table
    assert mine.read_text() == "mine\n"
    assert outcome.notes == (f"{out / 'gate.txt'}: not written: is a symlink; rocmseat never "
                             "writes through a link (someone else may have planted it)",)
    assert outcome.doc["picture"] is None
    assert outcome.doc["picture_note"] == (
        f"{out / 'gate.png'}: not written: is a directory, not a regular file")
    assert json.loads((out / "gate.json").read_text())["run_id"] == outcome.doc["run_id"]


def test_the_run_id_is_in_every_document(tmp_path, recorded, replay):
    arms, _ = replay
    arms.update(recorded)
    first = _gate(tmp_path).doc["run_id"]
    again = _gate(tmp_path).doc["run_id"]  # a finished gate of the same seats: run again
    assert first and again and first != again
