"""The gate judged again from a recorded --out directory (a real CPU run): the table (golden),
the document, the picture, and the same verdicts as when it ran."""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from tests.conftest import FIXTURES
from tests.speculation.rejudge import rejudge
from tests.speculation.test_basis import copy, with_method, without_the_schedule_arm

GATE = FIXTURES / "spec" / "gate-cpu-deep"


@pytest.fixture
def out(tmp_path):
    copy = tmp_path / "gate"
    shutil.copytree(GATE, copy)
    return copy


def test_the_table(out, golden):
    outcome = rejudge(out)
    golden("spec-gate-cpu-deep.txt", outcome.table)
    assert (out / "gate.txt").read_text() == outcome.table


def test_the_same_verdicts_as_when_it_ran(out):
    recorded = json.loads((GATE / "gate.json").read_text())
    doc = rejudge(out).doc
    assert doc["schema"] == "rocmseat.gate/v1"
    assert doc["exit_code"] == recorded["exit_code"] == 2
    for now, then in zip(doc["comparisons"][0]["gates"], recorded["comparisons"][0]["gates"],
                         strict=True):
        assert (now["gate"], now["verdict"], now["value"]) == (
            then["gate"], then["verdict"], then["value"])
    arms = {a["name"]: a for a in doc["arms"]}
    cand = arms["candidate"]["figures"]
    assert cand["acceptance"]["acceptance_length"] == pytest.approx(2.64, abs=0.01)
    assert arms["base"]["figures"]["kv_tokens"] == 174_720
    assert cand["kv_tokens"] == 161_280  # the drafter's KV comes out of the same CPU space
    assert arms["base"]["memory_plan"]["severity"] == "unknown"  # the CPU build states none
    assert doc["comparisons"][0]["crossover"]["concurrency"] is None
    assert doc["proposed_schedule"] is None
    json.dumps(doc, allow_nan=False)  # strict JSON


def test_the_picture(out):
    pytest.importorskip("matplotlib")
    outcome = rejudge(out)
    assert (out / "gate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # named inside the gate directory, not where the gate ran (/tmp/specx/g2/gate.png before)
    assert outcome.doc["picture"] == "gate.png"
    assert json.loads((out / "gate.json").read_text())["picture"] == "gate.png"
    assert outcome.table.splitlines()[-1] == "picture: gate.png"
    # two panels: the ratio to the base over the tokens/s (7.5 x 7.2 inches at 120 dpi)
    assert struct.unpack(">II", (out / "gate.png").read_bytes()[16:24]) == (900, 864)


def test_the_picture_shows_each_comparison_its_verdict_and_crossover(tmp_path, monkeypatch):
    import rocmseat.speculation.gate.report as report

    drawn = []
    monkeypatch.setattr(report, "gate_picture", lambda path, arms, ratios, threshold: drawn.append(
        (ratios, threshold)) or path)
    out = tmp_path / "gate"
    shutil.copytree(SCHEDULE_GATE, out)
    rejudge(out)
    [(series, threshold)] = drawn
    assert threshold == 0.95
    assert [(r.arm, r.verdict, r.crossover) for r in series] == [
        ("candidate", "do not ship (FAIL aggregate@64 0.536x, INCONCLUSIVE cold_ttft)", 4),
        ("schedule", "do not ship (FAIL aggregate@64 0.614x, INCONCLUSIVE cold_ttft)", 4)]
    assert series[0].points[64] == pytest.approx((0.536, 0.459, 0.627), abs=1e-3)


def test_without_matplotlib_the_gate_says_so(out, monkeypatch):
    import rocmseat.speculation.plot as plot

    def missing(name, *a, **k):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *a, **k)

    real = plot.importlib.import_module
    monkeypatch.setattr(plot.importlib, "import_module", missing)
    outcome = rejudge(out)
    assert outcome.doc["picture"] is None
    assert "matplotlib is not installed" in outcome.doc["picture_note"]
    assert outcome.table.splitlines()[-1].startswith("picture: no picture: matplotlib")


SCHEDULE_GATE = FIXTURES / "spec" / "gate-cpu-schedule"


def test_the_third_arm_and_the_schedule_it_ran(tmp_path):
    out = tmp_path / "gate"
    shutil.copytree(SCHEDULE_GATE, out)
    recorded = json.loads((SCHEDULE_GATE / "gate.json").read_text())
    outcome = rejudge(out)
    doc = outcome.doc
    assert [a["name"] for a in doc["arms"]] == ["base", "candidate", "schedule"]
    assert doc["proposed_schedule"] == recorded["proposed_schedule"] == [[1, 1, 4], [2, 64, 0]]
    assert doc["arms"][2]["schedule"] == doc["proposed_schedule"]
    cand, sched = doc["comparisons"]
    assert cand["arm"] == "candidate" and sched["arm"] == "schedule"
    assert cand["crossover"]["concurrency"] == 4 and cand["crossover"]["last_winning"] == 1
    by = {g["gate"]: g for g in cand["gates"]}
    assert by["aggregate@64"]["verdict"] == "FAIL" and by["aggregate@64"]["high"] < 0.95
    # the K=0 tiers of the schedule do not give the base back: the drafter still runs
    sched_gate = {g["gate"]: g for g in sched["gates"]}["aggregate@64"]
    assert sched_gate["verdict"] == "FAIL" and sched_gate["value"] < 0.7
    assert outcome.exit_code == recorded["exit_code"] == 1
    assert "gates: schedule vs base -> do not ship" in outcome.table


def test_advice_from_the_schedule_gate_predicts_each_arm_at_its_own_k(rocmseat_cli, tmp_path):
    out = tmp_path / "gate"
    shutil.copytree(SCHEDULE_GATE, out)
    result = rocmseat_cli("spec", "advise", "--from-gate", str(out), "--json")
    doc = json.loads(result.stdout)
    points = {(p["arm"], p["batch"]): p for p in doc["predicted_vs_measured"]}
    assert len(points) == 18  # three arms at six concurrencies, repeats pooled
    # the schedule drafts K=4 at batch 1 and nothing above: predicted as the base there
    assert points[("schedule", 64)]["predicted_tok_s"] == points[("base", 64)]["predicted_tok_s"]
    assert points[("schedule", 1)]["predicted_tok_s"] == points[("candidate", 1)][
        "predicted_tok_s"]
    # what the model cannot see: measured far below it at the K=0 tiers
    assert points[("schedule", 64)]["measured_tok_s"] < 0.7 * points[("schedule", 64)][
        "predicted_tok_s"]
    # the step-cost cells come from the base and the candidate only (a schedule mixes K)
    assert {c["k"] for c in doc["step_cost"]["cells"]} == {0, 4}


@pytest.mark.parametrize(("method", "above"), [("draft_model", 0), ("dflash", 1), ("eagle3", 1)])
def test_the_gate_floors_a_hidden_state_drafter_at_k1(tmp_path, method, above):
    """The schedule gate as if run without --verify-schedule, with the candidate's drafter
    changed: above the crossover a hidden-state drafter keeps K=1 (the K=0 trap)."""
    out = with_method(without_the_schedule_arm(copy(tmp_path, SCHEDULE_GATE)), method)
    outcome = rejudge(out)
    assert outcome.doc["proposed_schedule"] == [[1, 1, 4], [2, 64, above]]
    trap = "Above 1 requests the tier is K=1, not 0: the"
    assert (trap in outcome.table) == bool(above)
    # not verified (no third arm): the table ends with the command that verifies it
    lines = outcome.table.splitlines()
    assert lines[-3] == ("next: the proposal is interpolated from the crossover, not measured; "
                         "run it as a third arm before it serves:")
    assert lines[-2] == (f"  rocmseat spec gate launchers/demo-cpu-base.toml "
                         f"launchers/demo-cpu-spec.toml --verify-schedule --concurrency "
                         f"1,4,8,16,32,64 --repeats 3 --out {out}-verify")


@pytest.mark.parametrize("gate", [GATE, SCHEDULE_GATE], ids=lambda p: p.name)
def test_the_shipped_gates_carry_their_pictures_and_their_current_table(tmp_path, gate):
    for name in ("gate.png", "advise.png"):
        assert (gate / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    out = tmp_path / "gate"
    shutil.copytree(gate, out)
    assert (gate / "gate.txt").read_text() == rejudge(out).table


def test_an_a_a_gate_draws_no_empty_ratio_panel(out):
    """An A/A run judges no crossover: gate.png is the tokens/s panel alone (7.5 x 4.8 inches
    at 120 dpi), not a blank ratio panel above it."""
    pytest.importorskip("matplotlib")
    doc = json.loads((out / "gate.json").read_text())
    doc["aa"] = True
    (out / "gate.json").write_text(json.dumps(doc))
    outcome = rejudge(out)
    assert outcome.doc["comparisons"][0]["crossover"] is None
    assert struct.unpack(">II", (out / "gate.png").read_bytes()[16:24]) == (900, 576)


def test_the_gate_names_the_k0_trap_in_the_candidates_own_schedule(tmp_path):
    """A gate of an eagle3 candidate that carries [[1, 1, 4], [2, 64, 0]] itself (its seat and
    its arm record, as a gate run of such a seat writes them)."""
    out = with_method(without_the_schedule_arm(copy(tmp_path, SCHEDULE_GATE)), "eagle3")
    arm = out / "arms" / "candidate" / "arm.json"
    record = json.loads(arm.read_text())
    record["schedule"] = [[1, 1, 4], [2, 64, 0]]
    arm.write_text(json.dumps(record))
    seat = out / "arms" / "candidate" / "seat.toml"
    seat.write_text(seat.read_text()
                    + "num_speculative_tokens_per_batch_size = [[1, 1, 4], [2, 64, 0]]\n")
    outcome = rejudge(out)
    assert ("The candidate: the seat's schedule [[1, 1, 4], [2, 64, 0]] turns the eagle3 drafter "
            "off (K=0) at batch sizes 2-64: the K=0 trap") in outcome.table
