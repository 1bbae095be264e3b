"""What the advisor knows (rocmseat/speculation/advise/basis.py) on the real gate recordings: the
basis of
every tier, the model checked against every measured arm, the K=0 rules, and what --write
writes. The gate directories are copies of tests/fixtures/spec; where a test needs another
gate, it changes the copy the way a real run would differ (an arm not run, another drafter)."""

from __future__ import annotations

import json
import re
import shutil
import struct
import tomllib

import pytest

from rocmseat.speculation.advise import advice as adv
from rocmseat.speculation.advise.basis import MEASURED, Observation, decide, k0_rule
from tests.conftest import FIXTURES, REPO

DEEP = FIXTURES / "spec" / "gate-cpu-deep"
SCHEDULE = FIXTURES / "spec" / "gate-cpu-schedule"


def copy(tmp_path, source, name="gate"):
    out = tmp_path / name
    shutil.copytree(source, out)
    return out


def without_the_schedule_arm(gate):
    """The same gate as if run without --verify-schedule."""
    doc = json.loads((gate / "gate.json").read_text())
    doc["arms"] = [a for a in doc["arms"] if a["name"] != "schedule"]
    (gate / "gate.json").write_text(json.dumps(doc))
    return gate


def with_method(gate, method):
    seat = gate / "arms" / "candidate" / "seat.toml"
    seat.write_text(seat.read_text().replace('method = "draft_model"', f'method = "{method}"'))
    return gate


def advise_json(rocmseat_cli, *args):
    result = rocmseat_cli("spec", "advise", *args, "--json")
    # 2: the gate's own "could not decide" (one answer), with the advice on stdout
    assert result.exit_code in (0, 1, 2) and not result.stderr, result.stderr
    return result, json.loads(result.stdout)


def test_the_schedule_arm_ran_k0_above_batch_1(rocmseat_cli, tmp_path):
    """It was labelled K=4 at every batch size; it ran the schedule's K=0 tier from batch 2."""
    _, doc = advise_json(rocmseat_cli, "--from-gate", str(copy(tmp_path, SCHEDULE)))
    ran = {(m["batch"], m["k"]) for m in doc["predicted_vs_measured"] if m["arm"] == "schedule"}
    assert ran == {(1, 4), (4, 0), (8, 0), (16, 0), (32, 0), (64, 0)}
    at64 = next(m for m in doc["predicted_vs_measured"]
                if (m["arm"], m["batch"]) == ("schedule", 64))
    assert at64["measured_tok_s"] == pytest.approx(742.37, abs=0.01)
    assert at64["miss"] == pytest.approx(742.37 / 1346.03 - 1, abs=1e-3) and at64["misses"]
    assert "schedule@64" in doc["model_check"]["misses"]


def test_no_k0_tier_where_k0_tiers_measured_slow(rocmseat_cli, tmp_path):
    """Before: [[1, 33, 1], [34, 64, 0]] though the schedule arm's K=0 tier ran at 0.61x."""
    gate = copy(tmp_path, SCHEDULE)
    result, doc = advise_json(rocmseat_cli, "--from-gate", str(gate))
    assert doc["model_proposal"]["num_speculative_tokens_per_batch_size"] == [
        [1, 33, 1], [34, 64, 0]]
    assert doc["proposal"]["k0_tiers_allowed"] is False
    assert all(k >= 1 for k in doc["best_k"])
    assert doc["notes"][0].startswith("K=0 tiers measured slow: schedule ran K=0 at concurrency "
                                      "4, 8, 16, 32, 64 below the base")
    assert [(b["start"], b["end"], b["k"], b["basis"]) for b in doc["bands"]] == [
        (1, 64, 1, "model")]
    # K=1 was never measured and its gain over the seat's K=4 lies inside the model's left-out
    # error: a tie, so the seat keeps K=4 (before: K=1 proposed, "1.23x (90 % 1.22..1.24)")
    assert doc["bands"][0]["tie"].startswith("no measurable gain at batch 1-64: K=1 and the "
                                             "seat's K=4 are equivalent here")
    assert doc["proposal"]["num_speculative_tokens"] == 4
    assert doc["proposal"]["num_speculative_tokens_per_batch_size"] is None
    # the gate said do not ship K=4: so does the advice (one answer), exit 1
    assert doc["one_answer"]["answer"] == "do not ship"
    assert result.exit_code == 1


def test_the_k0_trap_for_a_drafter_that_keeps_hidden_state(rocmseat_cli, tmp_path):
    """No K=0 tier was measured: draft_model may get one (basis: model); dflash may not."""
    plain = without_the_schedule_arm(copy(tmp_path, SCHEDULE, "plain"))
    _, doc = advise_json(rocmseat_cli, "--from-gate", str(plain))
    assert doc["model_proposal"]["num_speculative_tokens_per_batch_size"] == [
        [1, 33, 1], [34, 64, 0]]
    # K=1 at 1-33 ties with the seat's K=4 (kept); K=0 from 34 on is a model tier
    assert doc["proposal"]["num_speculative_tokens_per_batch_size"] == [[1, 33, 4], [34, 64, 0]]
    assert [b["basis"] for b in doc["bands"]] == ["model", "model"]
    assert doc["notes"] == []
    dflash = with_method(without_the_schedule_arm(copy(tmp_path, SCHEDULE, "dflash")), "dflash")
    _, doc = advise_json(rocmseat_cli, "--from-gate", str(dflash))
    assert doc["proposal"]["num_speculative_tokens_per_batch_size"] is None
    assert doc["model_proposal"]["num_speculative_tokens"] == 1
    assert doc["notes"][0].startswith("K=0 trap: the dflash drafter keeps hidden state")
    assert "TensorRT-LLM#16888" in doc["notes"][0]


def test_a_k0_tier_that_held_is_allowed_for_a_hidden_state_drafter():
    base = Observation("base", 64, 0, False, 1200.0, 0.02, 1300.0)
    held = Observation("schedule", 64, 0, True, 1190.0, 0.02, 1300.0)
    assert k0_rule([base, held], "eagle3") == (True, "")
    slow = Observation("schedule", 64, 0, True, 740.0, 0.02, 1300.0)
    allowed, why = k0_rule([base, slow], "draft_model")
    assert not allowed and why.startswith("K=0 tiers measured slow")


def test_every_tier_says_its_basis_in_the_text(rocmseat_cli, tmp_path):
    result = rocmseat_cli("spec", "advise", "--from-gate", str(copy(tmp_path, DEEP)))
    lines = result.stdout.splitlines()
    tiers = [line for line in lines if line.startswith("  batch ")]
    assert [re.search(r"K=\d+ \[(\w+)\]", t).group(1) for t in tiers] == [
        "extrapolated", "measured", "model"]
    assert all("bootstrap agreement" in t and "confidence" in t for t in tiers)
    assert not any("of bootstrap draws agree" in line for line in lines)
    proposal = next(line for line in lines if line.startswith("proposal: "))
    assert proposal.endswith("(basis: measured, tie: the seat's K kept)")
    assert sum(line.startswith("    TIE: no measurable gain at batch ") for line in lines) == 2


def test_the_model_error_lowers_the_confidence(tmp_path):
    inputs = adv.from_gate(copy(tmp_path, DEEP))
    decision, _, _ = adv.run_advise(inputs)
    assert decision.model_error == pytest.approx(0.12, abs=0.01)
    exact = [Observation(o.arm, o.batch, o.k, o.drafter, o.predicted_tok_s, o.noise,
                         o.predicted_tok_s) for o in decision.observations]
    again = decide(lambda allowed: decision.advice, exact, "draft_model",
                   lambda b, k: 1.0)
    assert again.model_error == 0.0
    for with_error, without in zip(decision.tiers, again.tiers, strict=True):
        assert with_error.confidence < without.confidence


def test_write_writes_only_measured_tiers(rocmseat_cli, tmp_path):
    """Before: --write wrote a model tier without asking. The schedule gate without its third
    arm: K=1 at 1-33 ties with the seat's K=4 (kept), K=0 from 34 on is the model's alone."""
    gate = without_the_schedule_arm(copy(tmp_path, SCHEDULE))
    seat = tmp_path / "spec.toml"
    shutil.copy(gate / "arms" / "candidate" / "seat.toml", seat)  # the seat the gate ran
    before = seat.read_text()
    result = rocmseat_cli("spec", "advise", "--from-gate", str(gate), "--write", str(seat))
    assert seat.read_text() == before
    assert result.exit_code == 1
    assert f"{seat}: not written: the seat's [drafter] stays as it is; only the model's tiers " \
           "would change it" in result.stdout
    lines = result.stdout.splitlines()
    assert "  batch 1-33 K=1: model (a tie: batch sizes 1-33 keep K=4)" in lines
    assert "  batch 34-64 K=0: model (not written: batch sizes 34-64 keep K=4)" in lines
    nxt = lines.index("next: not every tier was measured; measure the proposal before it serves:")
    command = lines[nxt + 1].strip()
    assert command.startswith(f"cp {gate}/arms/candidate/seat.toml {gate}-proposal.toml && "
                              f"rocmseat spec advise --from-gate {gate} --write "
                              f"{gate}-proposal.toml --accept-model && rocmseat spec gate "
                              f"{gate}/arms/base/seat.toml {gate}-proposal.toml "
                              "--concurrency 1,4,8,16,32,64 --out ")


def test_accept_model_writes_every_tier_and_shows_the_diff(rocmseat_cli, tmp_path):
    gate = without_the_schedule_arm(copy(tmp_path, SCHEDULE))
    seat = tmp_path / "spec.toml"
    shutil.copy(gate / "arms" / "candidate" / "seat.toml", seat)
    result = rocmseat_cli("spec", "advise", "--from-gate", str(gate), "--write", str(seat),
                          "--accept-model")
    assert result.exit_code == 0, result.stderr
    drafter = tomllib.loads(seat.read_text())["drafter"]
    # the tie keeps K=4 at 1-33 even with --accept-model; the model's K=0 tier is written
    assert drafter["num_speculative_tokens_per_batch_size"] == [[1, 33, 4], [34, 64, 0]]
    lines = result.stdout.splitlines()
    assert "+num_speculative_tokens_per_batch_size = [[1, 33, 4], [34, 64, 0]]" in lines
    assert lines[lines.index("basis of what was proposed:") + 1:][:2] == [
        "  batch 1-33 K=1: model (a tie: batch sizes 1-33 keep K=4)", "  batch 34-64 K=0: model"]


def test_accept_model_needs_write(rocmseat_cli, tmp_path):
    result = rocmseat_cli("spec", "advise", "--from-gate", str(copy(tmp_path, DEEP)),
                          "--accept-model")
    assert result.exit_code == 2 and "--accept-model" in result.stderr


def test_measured_tiers_are_written_and_the_rest_keeps_the_seat(tmp_path):
    from rocmseat.speculation.advise.basis import writable

    decision, _, _ = adv.run_advise(adv.from_gate(copy(tmp_path, DEEP)))
    current = (3,) * 16
    # the measured K=3 tier is written; the tied tiers keep the written seat's K, model or not
    assert writable(decision, (2,) * 16, accept_model=False) == (2, 2) + (3,) * 7 + (2,) * 7
    assert writable(decision, (2,) * 16, accept_model=True) == (2, 2) + (3,) * 7 + (2,) * 7
    assert writable(decision, current, accept_model=False) == current
    assert writable(decision, current, accept_model=True) == decision.advice.best_k
    assert all(t.basis == MEASURED for t in decision.tiers if t.k == 3)


def _png_size(path):
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def test_the_advise_picture_has_a_model_check_panel_only_with_measured_arms(
        rocmseat_cli, tmp_path):
    pytest.importorskip("matplotlib")
    gate = copy(tmp_path, DEEP)
    _, doc = advise_json(rocmseat_cli, "--from-gate", str(gate))
    assert doc["picture"] == str(gate / "advise.png") and doc["picture_note"] == "written"
    assert _png_size(gate / "advise.png")[0] == round(4.6 * 3 * 110)
    inputs = adv.from_gate(gate)
    live = adv.Inputs({"kind": "target", "where": "http://127.0.0.1:1/metrics"},
                      inputs.counters, inputs.cells, inputs.max_num_seqs, inputs.batches, (),
                      None)
    decision, _, _ = adv.run_advise(live)
    from rocmseat.speculation.plot import advise_picture

    picture = advise_picture(tmp_path / "live.png", decision, "target")
    assert _png_size(picture)[0] == round(4.6 * 2 * 110)  # two panels, no empty third


def test_the_shipped_r9700_seat_has_no_k0_trap():
    """Its [5, 1024, 0] tier turned a DFlash drafter off above 4 requests (never measured)."""
    from rocmseat.seat.load import load_seat
    from rocmseat.speculation.advise.basis import seat_k0_trap

    seat = load_seat(REPO / "launchers" / "r9700-mxfp4-dflash.toml")
    drafter = seat.drafter
    assert drafter is not None and drafter.method == "dflash"
    assert seat_k0_trap(drafter.method, drafter.num_speculative_tokens_per_batch_size) == ""
    assert min(k for _, _, k in drafter.num_speculative_tokens_per_batch_size) == 1
    old = ((1, 2, 7), (3, 4, 3), (5, 1024, 0))
    assert "at batch sizes 5-1024: the K=0 trap" in seat_k0_trap("dflash", old)
    assert seat_k0_trap("draft_model", old) == ""


def test_the_advisor_names_the_k0_trap_in_the_seat_it_advises(rocmseat_cli, tmp_path):
    gate = without_the_schedule_arm(copy(tmp_path, SCHEDULE))
    seat = gate / "arms" / "candidate" / "seat.toml"
    seat.write_text(seat.read_text().replace('method = "draft_model"', 'method = "eagle3"')
                    .replace("num_speculative_tokens = 4\n", "num_speculative_tokens = 4\n"
                             "num_speculative_tokens_per_batch_size = [[1, 1, 4], [2, 64, 0]]\n"))
    _, doc = advise_json(rocmseat_cli, "--from-gate", str(gate))
    assert any(n.startswith("the seat's schedule [[1, 1, 4], [2, 64, 0]] turns the eagle3 "
                            "drafter off (K=0) at batch sizes 2-64: the K=0 trap")
               for n in doc["notes"])


@pytest.mark.parametrize("arm", ["base", "candidate"])
def test_an_arm_that_measured_nothing_is_a_miss_not_a_crash(rocmseat_cli, tmp_path, arm):
    """vLLM's result files of one concurrency saying 0 output tokens/s (a run that produced
    nothing): the advice still renders, that point misses by -100 %, no traceback."""
    gate = copy(tmp_path, DEEP)
    for result in (gate / "arms" / arm / "results").glob("decode-c4-r*.json"):
        doc = json.loads(result.read_text())
        doc["output_throughput"] = 0.0
        result.write_text(json.dumps(doc))
    result = rocmseat_cli("spec", "advise", "--from-gate", str(gate))
    assert result.exit_code in (0, 1, 2) and not result.stderr, result.stderr
    line = next(li for li in result.stdout.splitlines() if li.startswith(f"  {arm:<10} B=4 "))
    assert "measured      0.00 -100.0%" in line and line.endswith("MISS")


def test_no_tier_a_measured_arm_contradicts(rocmseat_cli, tmp_path):
    """The deep gate with the candidate's runs at concurrency 8 slower than the base's: the model
    (fitted on the ITL, unchanged) still prefers K=3 there, the measurement says K=3 lost at 8,
    so K=3 is not proposed at the batch sizes that measurement speaks for (5-9; 4 held)."""
    gate = copy(tmp_path, DEEP)
    for result in (gate / "arms" / "candidate" / "results").glob("decode-c8-r*.json"):
        doc = json.loads(result.read_text())
        doc["output_throughput"] = 150.0  # the base ran 215.8
        result.write_text(json.dumps(doc))
    _, doc = advise_json(rocmseat_cli, "--from-gate", str(gate))
    assert doc["model_proposal"]["num_speculative_tokens_per_batch_size"] == [
        [1, 2, 4], [3, 9, 3], [10, 16, 2]]
    assert [n for n in doc["notes"] if n.startswith("batch 5-9 K=3 not proposed: candidate ran "
                                                    "K=3 at 8: 150.0 tok/s against base's")]
    # the tiers (before ties settle what the proposal keeps) leave K=3 out at 5-9
    table = [b["k"] for b in doc["bands"] for _ in range(b["start"], b["end"] + 1)]
    assert table[3] == 3 and all(k != 3 for k in table[4:9])
    tiers = {(b["start"], b["end"]): (b["k"], b["basis"]) for b in doc["bands"]}
    assert tiers[(3, 4)] == (3, "measured")


@pytest.mark.parametrize(("source", "code"), [(SCHEDULE, 1), (DEEP, 2)],
                         ids=["gate-cpu-schedule", "gate-cpu-deep"])
def test_the_advice_text(rocmseat_cli, tmp_path, golden, source, code):
    """The whole text on the shipped gates (the gate directory's path shown as GATE); the exit
    code is the gate's own (do not ship: 1, could not decide: 2): one answer."""
    gate = copy(tmp_path, source)
    result = rocmseat_cli("spec", "advise", "--from-gate", str(gate))
    assert result.exit_code == code, result.stderr
    golden(f"spec-advise-{source.name}.txt", result.stdout.replace(str(gate), "GATE"))


def test_the_json_keys_docs_spec_md_names(rocmseat_cli, tmp_path):
    _, doc = advise_json(rocmseat_cli, "--from-gate", str(copy(tmp_path, SCHEDULE)))
    assert set(doc["bands"][0]) == {
        "start", "end", "k", "basis", "evidence", "confidence", "runner_up_k",
        "bootstrap_agreement", "gain", "gain_low", "gain_high", "extrapolated",
        "extrapolated_why", "bootstrap_low", "bootstrap_high", "tie"}
    assert {"measured_only", "k0_tiers_allowed"} <= set(doc["proposal"])
    assert set(doc["model_check"]) == {"rms_relative_miss", "from", "misses", "left_out"}
    assert set(doc["model_check"]["left_out"]) == {
        "how", "rms_log_miss", "noise", "sigma", "k_shape_measured", "misses"}
    assert set(doc["one_answer"]) == {"answer", "config", "text", "gate_and_advisor_agree",
                                      "why_they_differ"}
    assert set(doc["predicted_vs_measured"][0]) == {
        "arm", "batch", "k", "k_max", "schedule", "predicted_tok_s", "measured_tok_s", "miss",
        "noise", "misses"}
    assert {"model_proposal", "notes", "next"} <= set(doc)
