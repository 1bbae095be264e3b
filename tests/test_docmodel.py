"""The shared constrained types of the documents read back (rocmseat/docmodel.py) and the one
located-error builder (rocmseat/located.py)."""

from __future__ import annotations

import pytest

from rocmseat.docmodel import EpochSeconds, JsonTree, StrictDoc, UtcStamp, parse_doc
from rocmseat.located import DocumentInvalid, load_json, located, where_key


class _Stamps(StrictDoc):
    at_s: EpochSeconds | None = None
    stamp: UtcStamp | None = None
    tree: JsonTree = None


@pytest.mark.parametrize(("value", "ok"), [
    (946_684_800, True), (1_790_000_000.5, True), (7_258_118_400, True), (946_684_799, False),
    (7_258_118_401, False), (-1e11, False), (253_402_300_800, False), (float("nan"), False),
    (float("inf"), False), (10**400, False), (True, False), ("1790000000", False)])
def test_epoch_seconds_are_2000_to_2200(value, ok):
    if ok:
        assert parse_doc(_Stamps, {"at_s": value}, "f.json").at_s == value
    else:
        with pytest.raises(DocumentInvalid, match=r"^f\.json: key 'at_s': "):
            parse_doc(_Stamps, {"at_s": value}, "f.json")


@pytest.mark.parametrize(("value", "ok"), [
    ("2026-12-01T14:00:00Z", True), ("2199-12-31T23:59:59Z", True),
    ("1999-12-31T23:59:59Z", False), ("2200-01-01T00:00:01Z", False),
    ("10000-01-01T00:00:00Z", False), ("2026-02-30T00:00:00Z", False),
    ("2026-12-01 14:00:00Z", False), ("2026-12-01T14:00:00+00:00", False), (5, False)])
def test_utc_stamps_are_one_spelling_inside_2000_to_2200(value, ok):
    if ok:
        assert parse_doc(_Stamps, {"stamp": value}, "f.json").stamp == value
    else:
        with pytest.raises(DocumentInvalid, match=r"^f\.json: key 'stamp': "):
            parse_doc(_Stamps, {"stamp": value}, "f.json")


def test_a_json_tree_is_finite_bounded_and_shallow():
    assert parse_doc(_Stamps, {"tree": {"a": [1, 2.5, None, "x"]}}, "f").tree == {
        "a": [1, 2.5, None, "x"]}
    deep: object = 1
    for _ in range(40):
        deep = [deep]
    for bad in ({"a": [float("nan")]}, {"a": 10**30}, deep):
        with pytest.raises(DocumentInvalid, match=r"^f: key 'tree"):
            parse_doc(_Stamps, {"tree": bad}, "f")


def test_the_one_located_line_for_toml_and_json():
    text = 'name = "x"\n[[gpu]]\npci_address = "a"\n[[gpu]]\nwidth = 9\n'
    assert located("p.toml", ("gpu", 1, "width"), "bad", text=text) == \
        "p.toml:5: key 'gpu[1].width': bad"
    assert located("p.toml", ("gpu", 1, "socket"), "missing", text=text) == \
        "p.toml:4: key 'gpu[1].socket': missing"  # the nearest written prefix
    assert located("f.json", ("a", 0), "bad\nline") == "f.json: key 'a[0]': bad\\nline"
    assert located("f.json", (), "not JSON") == "f.json: not JSON"
    assert where_key(None, ("env", "X")) == "key 'env.X'"


@pytest.mark.parametrize("text", ['{"a": ', "[" * 100_000, "1" * 5000, "\x00"])
def test_text_that_is_not_json_is_one_line(text):
    with pytest.raises(DocumentInvalid) as info:
        load_json(text, "f.json")
    assert str(info.value).startswith("f.json: not JSON") and "\n" not in str(info.value)
