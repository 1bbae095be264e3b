"""The speculation room's document models (rocmseat/speculation/documents.py): any JSON value is a
model or one DocumentInvalid naming the key, never another exception (hypothesis)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocmseat.speculation.documents import (
    ArmDoc,
    DocumentError,
    DocumentInvalid,
    GateDoc,
    WatchAlertDoc,
    load_document,
    parse,
)
from tests.conftest import FIXTURES
from tests.speculation.test_hostile_spec_battery import json_paths

GATE = FIXTURES / "spec" / "gate-cpu-deep"
ARM = json.loads((GATE / "arms" / "candidate" / "arm.json").read_text())
GATE_DOC = json.loads((GATE / "gate.json").read_text())

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)


def _replaced(doc, path, value):
    doc = json.loads(json.dumps(doc))
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return doc


DOCS = {"arm.json": (ArmDoc, ARM), "gate.json": (GateDoc, GATE_DOC)}
PLACES = [(name, path) for name, (_, doc) in DOCS.items() for path in json_paths(doc)]


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PLACES), values)
def test_any_value_anywhere_in_a_record(place, value):
    name, path = place
    model, doc = DOCS[name]
    try:
        parse(model, _replaced(doc, path, value), name)
    except DocumentInvalid as exc:
        assert str(exc).startswith(f"{name}: ") and "\n" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(values)
def test_any_json_as_an_alert(value):
    try:
        parse(WatchAlertDoc, value, "alerts")
    except DocumentInvalid:
        pass


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_as_a_document(text):
    try:
        load_document(text)
    except DocumentError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize("text", ["1" * 21, "-" + "1" * 21, '{"a": ' + "9" * 5000 + "}",
                                  "[" * 100_000, "NaN", '{"a": Infinity}'])
def test_documents_that_are_not_bounded_json(text):
    with pytest.raises(DocumentError):
        load_document(text)
