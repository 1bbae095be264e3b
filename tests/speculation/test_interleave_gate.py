"""`rocmseat spec gate --interleave` (rocmseat/speculation/gate/interleave_flow.py) with every
start replayed from a recorded CPU gate's arm records instead of started: the real decode runs
of tests/fixtures/spec/gate-cpu-schedule (vllm bench serve results of the CPU engine), scaled
per start the way starts differ. No engine, no process is started; the flow, the decision, the
document and the text are the real ones."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

import rocmseat.speculation.gate.interleave_flow as ilflow
from rocmseat.speculation.gate.arms import ArmError, ArmRecord, GateRun
from rocmseat.speculation.gate.flow import GateOptions, InterleaveOptions
from rocmseat.speculation.gate.interleave_flow import run_interleaved_gate
from tests.speculation.recorded_gate import BASE_SEAT, HANG, SPEC_SEAT, recorded_arms


@pytest.fixture
def recorded(tmp_path) -> dict[str, ArmRecord]:
    return recorded_arms(tmp_path, ("base", "candidate"))


def shaped(record: ArmRecord, name: str, factor: float,
           per_repeat: tuple[float, ...] = (1.0, 1.0, 1.0)) -> ArmRecord:
    """`record` as one start named `name`: its decode throughput times `factor` (the start's
    lottery) and times per_repeat[i] on its i-th repeat."""
    out = copy.deepcopy(record)
    out.name = name
    for run in out.runs:
        if run.phase == "decode" and run.result is not None:
            scale = factor * per_repeat[run.repeat % len(per_repeat)]
            run.result = dataclasses.replace(
                run.result, output_tokens_per_s=run.result.output_tokens_per_s * scale)
    return out


@pytest.fixture
def starts(monkeypatch):
    """GateRun.run_arm replaced: start i returns plan(i, name, seat) (an ArmRecord, or an
    exception to raise). Returns the plan holder and the calls made."""
    calls: list[tuple[str, str]] = []
    holder: dict[str, object] = {"caches": []}

    def run_arm(self, name, source, *, schedule=None, expect_spec=None, k=None,
                cache_root=None):
        assert self.battery.phases == ("decode",)  # a start runs the decode runs only
        calls.append((name, source.seat.name))
        holder["caches"].append((name, cache_root))
        made = holder["plan"](len(calls) - 1, name)
        if isinstance(made, Exception):
            raise made
        return made

    monkeypatch.setattr(ilflow, "check_bench_client", lambda python: {})
    monkeypatch.setattr(GateRun, "run_arm", run_arm)
    return holder, calls


JITTER = (1.0, 0.99, 1.01, 1.005, 0.995, 1.0, 1.01, 0.99)  # start to start, a quiet host


def _gate(tmp_path, cand=SPEC_SEAT, *, aa=False, **bounds):
    options = GateOptions(out=tmp_path / "out", aa=aa, battery={"concurrency": (1, 4)},
                          interleave=InterleaveOptions(**bounds))
    return run_interleaved_gate(BASE_SEAT, cand, options, lambda progress: None)


def test_aa_says_same_and_names_the_starts(tmp_path, recorded, starts):
    holder, calls = starts
    holder["plan"] = lambda i, name: shaped(recorded["base"], name, JITTER[i % len(JITTER)])
    outcome = _gate(tmp_path, BASE_SEAT, aa=True)
    doc = outcome.doc
    assert outcome.exit_code == 0
    assert doc["schema"] == "rocmseat.gate-interleave/v1" and doc["error"] is None
    assert doc["decision"]["result"] == "SAME" and doc["decision"]["final"]
    assert [name for name, _ in calls][:4] == ["00-base", "01-candidate", "02-candidate",
                                               "03-base"]
    assert [s["arm"] for s in doc["starts"]][:4] == ["A", "B", "B", "A"]
    # each arm keeps one cache root across its starts (compiled once, loaded by the others)
    out = (tmp_path / "out").absolute()
    assert {(name.split("-")[1], root) for name, root in holder["caches"]} == {
        ("base", out / "caches" / "base"), ("candidate", out / "caches" / "candidate")}
    assert doc["concurrency"] == 4  # the battery's highest concurrency
    # the figure of a start is the median of its repeats at that concurrency, as recorded
    base = recorded["base"]
    figures = sorted(r.result.output_tokens_per_s for r in base.runs
                     if r.phase == "decode" and r.concurrency == 4)
    assert doc["starts"][0]["figure_tokens_per_s"] == pytest.approx(figures[1], rel=1e-4)
    assert len(doc["history"]) == doc["decision"]["starts"] == len(calls)
    assert json.loads((tmp_path / "out" / "interleave.json").read_text()) == doc
    text = (tmp_path / "out" / "interleave.txt").read_text()
    assert text == outcome.table and "verdict: SAME" in text and "A/A" in text


def test_a_20_percent_slower_candidate_is_different(tmp_path, recorded, starts):
    holder, _ = starts

    def plan(i, name):
        slower = 0.8 if name.endswith("candidate") else 1.0
        return shaped(recorded["base"], name, slower * JITTER[i % len(JITTER)])

    holder["plan"] = plan
    outcome = _gate(tmp_path)
    d = outcome.doc["decision"]
    assert d["result"] == "DIFFERENT" and outcome.exit_code == 1
    assert d["ratio"] == pytest.approx(0.8, abs=0.02)
    assert d["low"] < d["ratio"] < d["high"] < 1.0
    assert outcome.doc["verdict"] == f"DIFFERENT ({d['ratio']:.3f}x): the candidate is slower: " \
                                     "do not ship"
    assert d["starts"] <= 16


def test_the_recorded_candidate_against_its_base(tmp_path, recorded, starts):
    """The real candidate record (speculation on the CPU engine) against the real base: the
    ratio the document states is the recorded medians' ratio."""
    holder, _ = starts
    holder["plan"] = lambda i, name: shaped(
        recorded["base" if name.endswith("base") else "candidate"], name,
        JITTER[i % len(JITTER)])
    outcome = _gate(tmp_path)

    def median_at_4(record):
        return sorted(r.result.output_tokens_per_s for r in record.runs
                      if r.phase == "decode" and r.concurrency == 4)[1]

    expected = median_at_4(recorded["candidate"]) / median_at_4(recorded["base"])
    assert outcome.doc["decision"]["ratio"] == pytest.approx(expected, rel=0.03)
    assert outcome.doc["decision"]["result"] in ("DIFFERENT", "SAME")


def test_a_start_whose_repeats_disagree_is_flagged(tmp_path, recorded, starts):
    holder, _ = starts

    def plan(i, name):
        per_repeat = (0.7, 1.0, 1.3) if i == 2 else (1.0, 1.0, 1.0)
        return shaped(recorded["base"], name, JITTER[i % len(JITTER)], per_repeat)

    holder["plan"] = plan
    outcome = _gate(tmp_path, BASE_SEAT, aa=True)
    flagged = [s["index"] for s in outcome.doc["starts"] if s["flagged"]]
    assert flagged == [2] == outcome.doc["decision"]["flagged"]
    assert outcome.doc["starts"][2]["spread"] > 0.10
    line = next(ln for ln in outcome.table.splitlines() if ln.lstrip().startswith("2  "))
    assert "FLAGGED: its repeats disagree" in line


def test_noise_larger_than_the_effect_is_unknown_at_the_bound(tmp_path, recorded, starts):
    holder, _ = starts
    lottery = (1.0, 1.35, 0.75, 1.2, 0.8, 1.3, 0.7, 1.1)  # the R9700 spawn lottery, both arms
    holder["plan"] = lambda i, name: shaped(recorded["base"], name, lottery[i % len(lottery)])
    outcome = _gate(tmp_path, BASE_SEAT, aa=True, max_starts=6)
    d = outcome.doc["decision"]
    assert (d["result"], d["final"], d["starts"]) == ("UNKNOWN", True, 6)
    assert outcome.exit_code == 2 and outcome.doc["verdict"].startswith("UNKNOWN")
    assert "bound" in d["why"]


def test_a_base_start_that_hangs_stops_the_gate_with_what_it_measured(tmp_path, recorded,
                                                                      starts):
    holder, _ = starts

    def plan(i, name):
        record = shaped(recorded["base"], name, 1.0)
        if i == 3:
            record.hangs = [HANG]
        return record

    holder["plan"] = plan
    with pytest.raises(ArmError, match="base start 03-base: hang") as caught:
        _gate(tmp_path, BASE_SEAT, aa=True)
    saved = json.loads((tmp_path / "out" / "interleave.json").read_text())
    assert saved == caught.value.document
    assert saved["exit_code"] == 2 and saved["verdict"] == "could not measure"
    assert [s["name"] for s in saved["starts"]] == ["00-base", "01-candidate", "02-candidate"]


def test_a_start_that_could_not_run_leaves_the_partial_document(tmp_path, recorded, starts):
    holder, _ = starts
    holder["plan"] = lambda i, name: (ArmError("arm 02-candidate: never ready") if i == 2
                                      else shaped(recorded["base"], name, 1.0))
    with pytest.raises(ArmError, match="never ready") as caught:
        _gate(tmp_path, BASE_SEAT, aa=True)
    doc = caught.value.document
    assert doc["error"] == "arm 02-candidate: never ready" and len(doc["starts"]) == 2
    assert doc["decision"]["result"] == "UNKNOWN" and not doc["decision"]["final"]


def test_a_candidate_start_with_failed_requests_is_do_not_ship(tmp_path, recorded, starts):
    holder, _ = starts

    def plan(i, name):
        record = shaped(recorded["base"], name, JITTER[i % len(JITTER)])
        if i == 1:
            run = next(r for r in record.runs if r.phase == "decode")
            run.result = dataclasses.replace(run.result, failed=2)
        return record

    holder["plan"] = plan
    outcome = _gate(tmp_path)
    assert outcome.exit_code == 1
    assert outcome.doc["starts"][1]["problems"] == ["2 failed requests"]
    assert outcome.doc["verdict"] == ("do not ship: candidate start 01-candidate: "
                                      "2 failed requests")


def test_a_used_directory_is_refused_before_any_start(tmp_path, recorded, starts):
    holder, calls = starts
    holder["plan"] = lambda i, name: shaped(recorded["base"], name, 1.0)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "gate.json").write_text("{}")
    with pytest.raises(Exception, match="an interleaved gate takes a new or empty directory"):
        _gate(tmp_path, BASE_SEAT, aa=True)
    assert calls == []


def test_the_cli_prints_the_document(rocmseat_cli, tmp_path, recorded, starts):
    holder, _ = starts
    holder["plan"] = lambda i, name: shaped(recorded["base"], name, JITTER[i % len(JITTER)])
    result = rocmseat_cli("spec", "gate", str(BASE_SEAT), str(BASE_SEAT), "--aa",
                          "--interleave", "--concurrency", "1,4", "--max-starts", "8",
                          "--effect", "0.3", "--out", str(tmp_path / "out"), "--json",
                          "--no-progress")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["rules"]["max_starts"] == 8 and doc["rules"]["effect"] == 0.3
    assert doc["decision"]["result"] == "SAME"


@pytest.mark.parametrize(("extra", "why"), [
    (["--max-starts", "8"], "--max-starts goes with --interleave"),
    (["--effect", "0.3"], "--effect goes with --interleave"),
    (["--interleave", "--aba"], "--verify-schedule and --aba belong to the one-start gate"),
    (["--interleave", "--max-starts", "2"], "2 is not in the range 4<=x<=200"),
])
def test_interleave_flags_are_checked(rocmseat_cli, tmp_path, starts, extra, why):
    _, calls = starts
    result = rocmseat_cli("spec", "gate", str(BASE_SEAT), str(SPEC_SEAT), "--out",
                          str(tmp_path / "out"), *extra)
    assert result.exit_code == 2
    assert why in result.stderr
    assert calls == [] and not (tmp_path / "out").exists()
