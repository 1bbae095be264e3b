"""The ladder as data (issue 32 item 3): `policy.LADDER` is the one table the policy, the edge,
the documents, the exporter's outcome classes and docs/remediate.md read.

- the table is well formed: one entry per action, triggers that are alerts, links (`then`,
  `instead_of`) to entries of the table, engines of the three kinds;
- `engines` is read by the policy: a step that does not list the seat's engine is passed over
  (the next step that applies runs, saying why), and a replica no triggered step applies to is
  refused once, never acted on;
- the documents rocmseat wrote before the table (modes and actions as string literals, commit
  c47a20b: tests/fixtures/remediation-v1/) read with the enum and write back byte for byte;
- docs/remediate.md's table of the ladder is the one `render.ladder_table` makes of LADDER.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import shutil
from pathlib import Path

import pytest

from rocmseat.jsonio import dumps
from rocmseat.watch import alerts as A
from rocmseat.watch.remediate import documents, journal
from rocmseat.watch.remediate import policy as P
from rocmseat.watch.remediate.mode import Mode
from rocmseat.watch.remediate.render import LADDER_BEGIN, LADDER_END, ladder_table
from rocmseat.watch.remediate.service import status_json
from tests.conftest import FIXTURES, REPO
from tests.watch.test_remediate_canary_spawn import T0, obs, outcomes

OLD = FIXTURES / "remediation-v1"
WRITTEN_AT_S = 1_795_000_700.0  # make_fixture.py's save_state clock


def test_the_table_is_one_entry_per_action_and_links_within_itself() -> None:
    actions = [s.action for s in P.LADDER]
    assert len(set(actions)) == len(actions) and set(P.STEPS) == set(actions)
    for s in P.LADDER:
        assert set(s.triggers) <= set(A.ALERTS), s.action
        assert s.engines and s.engines <= set(P.ENGINES), s.action
        assert set(s.starts_from) <= set(Mode) and s.mode in (*Mode, None)
        assert (s.verify is None) == (not s.effects), s.action  # no edge work: nothing to verify
        assert s.then is None or s.then in P.STEPS
        assert s.instead_of is None or s.instead_of in P.STEPS
        # the why-not of a step passed over (`instead_of`) or failed (`then`) is journalled as
        # why.step<N>: a key the strict record model must know, or the state reads unusable
        for n in [P.STEPS[s.instead_of].number] if s.instead_of else []:
            assert f"step{n}" in documents.Why.model_fields, s.action
        assert s.then is None or f"step{s.number}" in documents.Why.model_fields
        assert {o.label for o in s.outcomes} <= set(P.OUTCOME_CLASSES)
        assert all(P.outcome_class(o.text) == o.label for o in s.outcomes)
    # a mode the ladder enters and never leaves by itself is one an alert says
    entered = {s.mode for s in P.LADDER if s.mode not in (None, Mode.DRAFTER)}
    assert entered <= set(P.MODE_ALERTS)
    assert P.ACTS_ON == (A.REPLICA_STALLED, *P.DRAFTER_TRIGGERS, A.REPLICA_SLOW_SPAWN)


@pytest.mark.parametrize(("outcome", "label"), [
    # a slow start's restart: counted as `other` before each step declared its outcomes
    ("restarted: decodes at the seat's rate", "restarted"),
    ("still slow after a restart", "still-slow"),
    ("still collapsed after a fresh compile", "not-the-cache"),
    ("failed: no new engine within 600 s of the restart", "failed"),
    ("refused: no step of the ladder applies to llamacpp", "refused"),
    ("reset: back with its drafter", "reset"), ("something new", "other"),
])
def test_every_outcome_has_its_class(outcome, label) -> None:
    assert P.outcome_class(outcome) == label and label in P.OUTCOME_CLASSES


def decide(o: P.Observation, *, engine: P.EngineKind = "vllm",
           steps: tuple[P.Step, ...] | None = None, state: P.State | None = None) -> P.Decision:
    settings = P.Settings(mode="on", engine=engine)
    return P.decide(state or P.State(), [o], T0, settings, node="n1", view_fresh=True,
                    steps=steps)


COLLAPSED = dict(alerts=(A.SPEC_DRAFTER_DEAD,), generation_tokens=340.0, al=1.02, p0=0.01)


def test_on_vllm_a_collapse_on_a_loaded_cache_starts_step_1() -> None:
    d = decide(obs(**COLLAPSED))
    assert outcomes(d) == [(1, "started")]
    assert [(a.action, a.mode) for a in d.actions] == [(P.MOVE_CACHE_RESTART, Mode.DRAFTER)]


@pytest.mark.parametrize("engine", ["sglang", "llamacpp"])
def test_an_engine_no_step_lists_is_refused_once_and_never_acted_on(engine) -> None:
    # a table none of whose steps lists the engine (the ladder before issue 36 listed vLLM only)
    steps = tuple(dataclasses.replace(s, engines=frozenset({"vllm"})) for s in P.LADDER)
    d = decide(obs(**COLLAPSED), engine=engine, steps=steps)
    assert d.actions == ()
    assert [(r.step, r.action, r.outcome) for r in d.records] == [
        (None, P.NO_ACTION, f"refused: no step of the ladder applies to {engine}")]
    again = P.decide(d.state, [obs(**COLLAPSED)], T0 + 10, P.Settings("on", engine=engine),
                     node="n1", view_fresh=True, steps=steps)
    assert again.records == () and again.actions == ()  # said once per alert episode


def test_the_ladder_per_engine_has_no_cache_step_for_llamacpp() -> None:
    """Issue 36 item 4: SGLang's compile caches are moved aside like vLLM's (step 1);
    llama.cpp has none, so its collapse starts at step 2 (restart without the drafter)."""
    assert outcomes(decide(obs(**COLLAPSED), engine="sglang")) == [(1, "started")]
    d = decide(obs(**COLLAPSED), engine="llamacpp")
    assert outcomes(d) == [(2, "started")]
    assert d.records[0].why["step1"] == "not applicable to llamacpp"
    on, off = P.steps_for("llamacpp")
    assert [s.action for s in off] == [P.MOVE_CACHE_RESTART]
    assert all("llamacpp" in s.engines for s in on)


def test_a_step_that_does_not_list_the_engine_is_passed_over_with_its_reason() -> None:
    # llama.cpp has no compile cache: a table whose step 2 (not step 1) lists it
    steps = tuple(dataclasses.replace(s, engines=s.engines | {"llamacpp"})
                  if s.action == P.RESTART_NO_DRAFTER else s for s in P.LADDER)
    d = decide(obs(**COLLAPSED), engine="llamacpp", steps=steps)
    assert outcomes(d) == [(2, "started")]
    assert [(a.action, a.mode) for a in d.actions] == [(P.RESTART_NO_DRAFTER, Mode.NO_DRAFTER)]
    assert d.records[0].why["step1"] == "not applicable to llamacpp"
    assert d.state.ladders["r0"].pending.collapsed_tps == 34.0  # 340 tokens in 10 s
    # the same table on vLLM: step 1 still applies
    assert outcomes(decide(obs(**COLLAPSED), steps=steps)) == [(1, "started")]


def test_a_stall_is_dealt_with_before_a_collapse_and_twice_takes_it_out() -> None:
    stalled = obs(alerts=(A.REPLICA_STALLED, A.SPEC_DRAFTER_DEAD))
    d = decide(stalled)
    assert [(a.action, a.mode) for a in d.actions] == [(P.RESTART, Mode.DRAFTER)]
    ladder = dataclasses.replace(d.state.ladders["r0"], pending=None)
    again = decide(stalled, state=dataclasses.replace(d.state, ladders={"r0": ladder}))
    assert again.actions == ()
    assert [(r.step, r.action, r.outcome) for r in again.records] == [
        (3, P.OUT_OF_ROTATION, "out of rotation")]
    assert again.state.ladders["r0"].mode is Mode.OUT_OF_ROTATION


def _copy_state(tmp_path: Path) -> Path:
    state = tmp_path / "state"
    shutil.copytree(OLD / "remediation", state / "remediation")
    for path in [state, *state.rglob("*")]:  # as rocmseat leaves them: its own, 0700 / 0600
        path.chmod(0o700 if path.is_dir() else 0o600)
    return state


def test_documents_written_before_the_table_read_and_write_back_byte_for_byte(tmp_path) -> None:
    state_dir = _copy_state(tmp_path)
    state, meta = journal.load_state(state_dir, "heal")
    assert {n: lad.mode for n, lad in state.ladders.items()} == {
        "r0": Mode.DRAFTER, "r1": Mode.DRAFTER, "r2": Mode.NO_DRAFTER,
        "r3": Mode.OUT_OF_ROTATION, "r4": Mode.RESETTING, "r5": Mode.DRAFTER,
        "r6": Mode.NO_DRAFTER}
    assert all(isinstance(lad.mode, Mode) for lad in state.ladders.values())
    out = tmp_path / "again"
    journal.save_state(out, meta, state, WRITTEN_AT_S)
    # what the code before the table wrote when it read the file back and saved it
    written = (out / "remediation/heal/state.json").read_text()
    assert written == (OLD / "state-read-and-written.json").read_text()
    records, problems = journal.read_records(state_dir, "heal", last=100)
    assert problems == [] and len(records) == 7
    assert dumps(status_json(state, meta, records)) + "\n" == (OLD / "status.json").read_text()
    for path in sorted((OLD / "remediation/heal/journal").iterdir()):
        doc = documents.parse_record(path.read_text())
        raw = json.loads(path.read_text())  # why and figures as written, null values kept
        when = dt.datetime.fromisoformat(doc.when.replace("Z", "+00:00")).timestamp()
        record = P.StepRecord(doc.replica, doc.step, doc.action, doc.outcome, when,
                              why=raw["why"], figures=raw["figures"], diagnosis=doc.diagnosis,
                              dry_run=doc.dry_run)
        assert dumps(journal.record_json(meta, record)) + "\n" == path.read_text(), path.name


@pytest.mark.parametrize(("key", "value", "says"), [
    (("ladders", "r0", "mode"), "sideways", "Input should be 'drafter', 'no-drafter', "
     "'out-of-rotation' or 'resetting'"),
    (("ladders", "r0", "pending", "action"), "out-of-rotation", "is not an action the edge runs"),
    (("ladders", "r0", "pending", "action"), "reboot", "is not an action the edge runs"),
    (("ladders", "r0", "pending", "step"), 4, "is not a step of the ladder (1, 2, 3)"),
    (("taken", 0, "action"), "reboot", "is not an action of the ladder"),
])
def test_a_mode_step_or_action_outside_the_table_is_refused_by_name(tmp_path, key, value,
                                                                     says) -> None:
    state_dir = _copy_state(tmp_path)
    path = state_dir / "remediation/heal/state.json"
    doc = json.loads(path.read_text())
    where = doc
    for part in key[:-1]:
        where = where[part]
    where[key[-1]] = value
    path.write_text(json.dumps(doc))
    with pytest.raises(journal.StateUnusable) as info:
        journal.load_state(state_dir, "heal")
    shown = ".".join(str(k) for k in key)
    assert f"key '{shown}'" in info.value.message and says in info.value.message


def test_docs_show_the_table_the_policy_runs() -> None:
    text = (REPO / "docs" / "remediate.md").read_text()
    begin, end = text.index(LADDER_BEGIN), text.index(LADDER_END) + len(LADDER_END) + 1
    assert text[begin:end] == ladder_table(), (
        "docs/remediate.md's ladder differs from policy.LADDER: paste the output of "
        "`python3 -c 'from rocmseat.watch.remediate.render import ladder_table; "
        "print(ladder_table(), end=\"\")'` between its markers")


def _imports(path: Path, package: str) -> set[str]:
    """The modules of `package` that `path` imports, at its top or inside a function."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        found |= {n.removeprefix(package + ".").split(".")[0] for n in names
                  if n.startswith(package + ".")}
    return found


def test_no_module_of_remediation_imports_one_that_imports_it_back() -> None:
    # issue 32 item 4: policy <-> documents once met through a lazy import (state_from_json)
    package = "rocmseat.watch.remediate"
    room = REPO / "rocmseat" / "watch" / "remediate"
    graph = {p.stem: _imports(p, package) - {p.stem} for p in room.glob("*.py")}
    assert graph["documents"] >= {"policy"}  # the checker sees what it must

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in graph.get(todo.pop(), set()) - seen:
                seen.add(nxt)
                todo.append(nxt)
        return seen

    cycles = sorted(m for m in graph if m in reach(m))
    assert cycles == [], f"modules of {package} on an import cycle: {cycles}"


@pytest.mark.parametrize(("model", "cls"), [
    (documents.PendingDoc, P.Pending), (documents.LadderDoc, P.Ladder),
    (documents.TakenDoc, P.Taken), (documents.HaltDoc, P.Halt)])
def test_each_state_model_holds_its_dataclass_fields_and_no_other(model: type, cls: type) -> None:
    """documents.state_of builds each dataclass from its model's fields by name: a field the
    model lacks would silently take the dataclass's default after a restart."""
    assert list(model.model_fields) == [f.name for f in dataclasses.fields(cls)]
