"""Error windows that no look can shorten (issue 17): every run adds its reading to one ring per
device, every run judges the same fixed span, and the cached verdict (NPD, Slurm, NHC, the
textfile) reads the run's findings, so a look by hand never clears what the timer found.

The real flow where it matters: real `rocmseat preflight` runs through the CLI's error boundary on
copies of the fixture trees, counters grown in the tree's own files as the kernel grows them."""

from __future__ import annotations

import json
import os
import re
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmseat.findings import Severity
from rocmseat.preflight import windows
from rocmseat.preflight.run import PreflightOptions, preflight_report
from rocmseat.preflight.windows import (
    MAX_ENTRIES,
    Entry,
    load_ring,
    save_readings,
    state_path,
    window_for,
)
from tests.sysfs.conftest import SYSFS_FIXTURES

ROOT_PORT = "devices/pci0000:80/0000:80:02.0/aer_dev_correctable"  # on GPU 86:00.0's path


def _grow(root, badtlp):
    path = root / ROOT_PORT
    text = re.sub(r"(?m)^BadTLP \d+$", f"BadTLP {badtlp}", path.read_text())
    path.write_text(re.sub(r"(?m)^TOTAL_ERR_COR \d+$", f"TOTAL_ERR_COR {badtlp}", text))


def _bad(doc):
    return [(f["check_id"], f["severity"], f["data"].get("delta")) for f in doc["findings"]
            if f["check_id"].split(".")[0] in ("aer", "ras") and f["severity"] != "ok"]


@pytest.fixture
def node(rocmseat_cli, copy_tree, tmp_path):
    def make(tree):
        root = copy_tree(tree)
        state = tmp_path / "state"

        def run(*args):
            return rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir",
                                str(state), *args)

        run.root, run.state = root, state
        return run

    return make


# --- the story of issue 17 ---------------------------------------------------------------------
def test_a_look_by_hand_does_not_clear_the_timers_failure(node):
    run = node("x99-r9700-degraded")
    timer = run("--format", "npd")  # the timer's full run (the degraded link leads its line)
    assert (timer.exit_code, timer.stdout) == (1, "FAIL pcie.link.degraded 0000:89:00.0 +1 more\n")
    by_hand = run("--json")  # a person runs preflight once by hand
    doc = json.loads(by_hand.stdout)
    assert by_hand.exit_code == 1
    assert ("aer.badtlp", "fail", 6655) in _bad(doc)
    (badtlp,) = [f for f in doc["findings"] if f["check_id"] == "aer.badtlp"]
    assert "+6,655 BadTLP since boot (no reading of this boot is 24 h old yet)" in (
        badtlp["message"]
    )
    cached = run("--format", "npd", "--cached", "--only", "aer")
    assert (cached.exit_code, cached.stdout) == (1, "FAIL aer.badtlp 0000:80:02.0\n")
    # a replica's ExecStartPre and an --only run read the same window
    for partial in (["--pair", "86:00.0,89:00.0"], ["--only", "aer"]):
        result = run(*partial, "--json")
        assert result.exit_code == 1
        assert ("aer.badtlp", "fail", 6655) in _bad(json.loads(result.stdout))
    cached = run("--format", "npd", "--cached", "--only", "aer")
    assert (cached.exit_code, cached.stdout) == (1, "FAIL aer.badtlp 0000:80:02.0\n")


def test_many_looks_never_shorten_the_window(copy_tree, tmp_path):
    root = copy_tree("x99-r9700")
    state = tmp_path / "state"

    def run(stamp, **kw):
        report = preflight_report(root, state,
                                  PreflightOptions(families={"aer"}, now=lambda: stamp, **kw))
        return [(f.check_id, f.severity, f.data.get("delta"))
                for f in report.findings if f.severity != Severity.OK]

    run("2026-12-01T00:00:00Z")  # the timer: nothing
    _grow(root, 6655)
    assert run("2026-12-01T05:12:00Z") == [("aer.badtlp", Severity.FAIL, 6655)]
    # a person looks every minute for an hour, with --pair and --only among them
    for minute in range(60):
        stamp = f"2026-12-01T06:{minute:02d}:00Z"
        kwargs = {"pairs": [("0000:86:00.0", "0000:89:00.0")]} if minute % 3 == 0 else {}
        assert run(stamp, **kwargs) == [("aer.badtlp", Severity.FAIL, 6655)]
    # the timer, 23 h after the errors appeared: still within its 24 h window
    assert run("2026-12-02T04:12:00Z") == [("aer.badtlp", Severity.FAIL, 6655)]
    # a day and more later the window has moved past them
    assert run("2026-12-02T07:00:00Z") == []


def test_a_sample_judges_its_own_two_readings_and_stores_none(node):
    run = node("x99-r9700")
    run()
    before = state_path(run.state).read_bytes()
    _grow(run.root, 7)
    assert run("--sample", "0", "--json").exit_code == 0  # nothing grew during the sample
    assert state_path(run.state).read_bytes() == before
    assert _bad(json.loads(run("--json").stdout)) == [("aer.badtlp", "warn", 7)]


def test_profile_sets_the_window(copy_tree, tmp_path):
    root = copy_tree("x99-r9700")
    profile = tmp_path / "p.toml"
    profile.write_text('name = "p"\n[thresholds]\nwindow_h = 2\n')
    state = tmp_path / "state"
    kw = {"families": {"aer"}, "profile": profile}
    preflight_report(root, state, PreflightOptions(now=lambda: "2026-12-01T00:00:00Z", **kw))
    _grow(root, 3)
    report = preflight_report(root, state,
                              PreflightOptions(now=lambda: "2026-12-01T03:00:00Z", **kw))
    assert report.aer_window == "in the last 2 h (since 2026-12-01 00:00 UTC)"
    assert [f.data["delta"] for f in report.findings if f.severity != Severity.OK] == [3]


# --- the ring ------------------------------------------------------------------------------------
def _stamp(hour):
    return f"2026-12-{1 + hour // 24:02d}T{hour % 24:02d}:00:00Z"


def test_window_base_is_the_newest_reading_at_or_before_the_start():
    entries = (
        Entry(_stamp(0), _stamp(2), {"a.b": 1}),
        Entry(_stamp(3), _stamp(3), {"a.b": 4}),
        Entry(_stamp(30), _stamp(30), {"a.b": 9}),
    )
    window = window_for(entries, _stamp(28), 24 * 3600)
    assert window.base == {"a.b": 4}
    assert window.phrase == "in the last 24 h (since 2026-12-01 03:00 UTC)"
    # the base seen unchanged across the start: the window starts at the start
    window = window_for(entries, _stamp(25), 24 * 3600)
    assert window.base == {"a.b": 1} and "(since 2026-12-01 01:00 UTC)" in window.phrase
    assert window_for(entries, _stamp(20), 24 * 3600).base is None


def test_the_ring_is_bounded_and_a_base_only_moves_earlier(tmp_path):
    root = SYSFS_FIXTURES / "x99-r9700"
    address = "0000:80:02.0"
    for hour in range(0, 24 * 10):  # ten days of hourly readings, each one different
        assert save_readings(tmp_path, root, None, {address: {"correctable.BadTLP": hour}},
                             _stamp(hour)) is None
    ring = load_ring(tmp_path, root, None).ring
    entries = ring.devices[address]
    assert len(entries) <= MAX_ENTRIES
    # older than the longest window (7 d) they went, but the base of that window stayed
    assert windows.parse_stamp(entries[0].first) <= windows.parse_stamp(_stamp(239 - 7 * 24))
    now = _stamp(239)
    assert window_for(entries, now, 24 * 3600).base == {"correctable.BadTLP": 215}
    size = state_path(tmp_path).stat().st_size
    assert size < 64 << 10, size


def test_thinning_keeps_the_first_and_the_newest():
    entries = tuple(Entry(_stamp(h), _stamp(h), {"x.y": h + 1}) for h in range(MAX_ENTRIES + 40))
    kept = windows._pruned(entries, windows.parse_stamp(entries[-1].first))
    assert len(kept) <= MAX_ENTRIES
    assert kept[-1] == entries[-1]
    assert kept[0] == entries[0] or windows.parse_stamp(kept[0].first) <= windows.parse_stamp(
        entries[-1].first) - __import__("datetime").timedelta(days=7)


def test_readings_of_another_root_or_boot_are_not_used(tmp_path):
    root = SYSFS_FIXTURES / "x99-r9700"
    boot = "2b3c0b52-9a8e-4c1e-9f57-6d2f3a1b0c4d"
    assert save_readings(tmp_path, root, boot, {"0000:80:02.0": {"a.b": 9}}, _stamp(0)) is None
    assert load_ring(tmp_path, root, boot).ring is not None
    assert load_ring(tmp_path, root, "7e1d2c3b-4a59-4687-8b9a-0c1d2e3f4a5b").ring is None
    assert load_ring(tmp_path, SYSFS_FIXTURES / "x99-r9700-degraded", boot).ring is None


def test_save_holds_the_lock(tmp_path, monkeypatch):
    from rocmseat.atomic import exclusive_lock

    root = SYSFS_FIXTURES / "x99-r9700"
    assert save_readings(tmp_path, root, None, {"0000:05:00.0": {"a.b": 1}}, _stamp(0)) is None
    before = state_path(tmp_path).read_bytes()
    monkeypatch.setattr(windows, "LOCK_TIMEOUT_S", 0.2)
    with exclusive_lock(state_path(tmp_path).with_suffix(".lock")):
        problem = save_readings(tmp_path, root, None, {"0000:05:00.0": {"a.b": 2}}, _stamp(1))
    assert problem is not None and "still locked by another process after 0.2 s" in problem
    assert state_path(tmp_path).read_bytes() == before
    assert sorted(p.name for p in state_path(tmp_path).parent.iterdir()) == [
        "error-readings.json", "error-readings.lock",
    ]


def test_state_dir_blocked_by_a_file_says_so(tmp_path):
    (tmp_path / "preflight").write_text("")
    problem = save_readings(tmp_path, SYSFS_FIXTURES / "x99-r9700", None, {}, _stamp(0))
    assert problem == (
        f"{state_path(tmp_path)}: cannot save the error readings "
        f"({tmp_path / 'preflight'}: is a file where a directory should be)"
    )


def _write(state, doc):
    path = state_path(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


@pytest.mark.parametrize(
    "devices",
    [
        {"0000:80:02.0": [{"first": _stamp(0), "last": _stamp(0), "counters": {"a.b": -1}}]},
        {"0000:80:02.0": [{"first": _stamp(0), "last": _stamp(0), "counters": {"a.b": 10**30}}]},
        {"0000:80:02.0": [{"first": "T\n", "last": _stamp(0), "counters": {}}]},
        {"0000:80:02.0": [{"first": "2026-13-40T99:00:00Z", "last": _stamp(0), "counters": {}}]},
        {"not an address": []},
        {"0000:80:02.0": [{"first": _stamp(0), "last": _stamp(0), "counters": {"a\nb": 1}}]},
        {"0000:80:02.0": [{"first": _stamp(0), "last": _stamp(0), "counters": {"a.b": True}}]},
        {"0000:80:02.0": [None] * (MAX_ENTRIES + 1)},
        [],
    ],
)
def test_hostile_reading_files_are_one_line_problems(tmp_path, devices):
    root = SYSFS_FIXTURES / "x99-r9700"
    path = _write(tmp_path, {"schema": windows.SCHEMA, "sysfs_root": str(root.resolve()),
                             "boot_id": None, "devices": devices})
    loaded = load_ring(tmp_path, root, None)
    assert loaded.ring is None
    assert loaded.problem.startswith(f"{path}: unusable error readings (")
    assert "\n" not in loaded.problem
    # a run says so, counts since boot (never fewer errors), and writes a fresh file
    report = preflight_report(root, tmp_path, PreflightOptions(families={"aer"}))
    (warn,) = [f for f in report.findings if f.check_id == "aer.window"]
    assert warn.severity == Severity.WARN
    assert report.aer_window.startswith("since boot")


def test_nan_in_a_reading_file_is_refused(tmp_path):
    root = SYSFS_FIXTURES / "x99-r9700"
    _write(tmp_path, f'{{"schema": "{windows.SCHEMA}", "sysfs_root": "x", "boot_id": null, '
           '"devices": NaN}')
    # NaN where the devices belong: the located line names the key (issue 23)
    problem = load_ring(tmp_path, root, None).problem
    assert "unusable error readings (key 'devices': expected an object, not a non-finite " \
        "number)" in problem


def test_an_untrusted_reading_file_is_unknown_and_left_alone(tmp_path):
    root = SYSFS_FIXTURES / "x99-r9700-degraded"
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("{}")
    state = tmp_path / "state"
    path = state_path(state)
    path.parent.mkdir(parents=True)
    path.symlink_to(elsewhere)
    report = preflight_report(root, state, PreflightOptions(families={"aer"}))
    (unknown,) = [f for f in report.findings if f.check_id == "aer.window"]
    assert unknown.severity == Severity.UNKNOWN and "untrusted" in unknown.message
    # the errors are still counted (since boot), and the planted link is not written through
    assert any(f.check_id == "aer.badtlp" for f in report.findings)
    assert path.is_symlink() and elsewhere.read_text() == "{}"
    path.unlink()
    path.write_text("{}")
    path.chmod(0o666)
    report = preflight_report(root, state, PreflightOptions(families={"aer"}))
    (unknown,) = [f for f in report.findings if f.check_id == "aer.window"]
    assert unknown.severity == Severity.UNKNOWN


def test_a_fifo_reading_file_never_blocks(tmp_path):
    root = SYSFS_FIXTURES / "x99-r9700"
    path = state_path(tmp_path)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    result = []
    worker = threading.Thread(target=lambda: result.append(load_ring(tmp_path, root, None)),
                              daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():
        with open(path, "wb"):
            pass
        raise AssertionError("load_ring blocked on a FIFO")
    (loaded,) = result
    assert loaded.ring is None and "FIFO" in loaded.problem


@settings(max_examples=150, deadline=None)
@given(
    content=st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(
                    st.sampled_from(["schema", "sysfs_root", "boot_id", "devices", "first",
                                     "last", "counters"]) | st.text(),
                    inner,
                    max_size=4,
                )
            ),
            max_leaves=12,
        ).map(lambda v: json.dumps({"schema": windows.SCHEMA, "devices": v}).encode()),
    )
)
def test_hypothesis_any_reading_file_loads_or_is_a_one_line_problem(tmp_path_factory, content):
    state = tmp_path_factory.mktemp("state")
    path = state_path(state)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    loaded = load_ring(state, SYSFS_FIXTURES / "x99-r9700", None)
    if loaded.problem is not None:
        assert loaded.ring is None and loaded.problem.startswith(str(path))
        assert "\n" not in loaded.problem


def test_a_clock_stepped_back_keeps_the_readings(tmp_path):
    root = SYSFS_FIXTURES / "x99-r9700"
    address = "0000:80:02.0"
    save_readings(tmp_path, root, None, {address: {"correctable.BadTLP": 1}}, _stamp(10))
    save_readings(tmp_path, root, None, {address: {"correctable.BadTLP": 5}}, _stamp(8))
    entries = load_ring(tmp_path, root, None).ring.devices[address]
    assert [e.first for e in entries] == [_stamp(8), _stamp(10)]
    # once the clock has caught up, the reading taken "in the future" is a window's base again
    assert window_for(entries, _stamp(34), 24 * 3600).base == {"correctable.BadTLP": 1}
