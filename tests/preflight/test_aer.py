"""AER by deltas: since boot, since the AER baseline (state file), during a sample."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rocmseat.findings import Severity
from rocmseat.node.inventory import read_inventory
from rocmseat.preflight.aer import AerThresholds, judge_aer, snapshot
from rocmseat.preflight.aer_state import load_baseline, save_baseline, state_path
from rocmseat.preflight.run import preflight_report
from tests.sysfs.conftest import SYSFS_FIXTURES

DEGRADED = SYSFS_FIXTURES / "x99-r9700-degraded"


def _aer(findings):
    return [f for f in findings if f.family == "aer"]


def test_first_run_reports_counts_since_boot(tmp_path):
    report = preflight_report(DEGRADED, tmp_path, families={"aer"})
    bad = [f for f in report.findings if f.severity != Severity.OK]
    assert [(f.check_id, f.severity, f.subject) for f in bad] == [
        ("aer.badtlp", Severity.FAIL, "0000:80:02.0")
    ]
    assert (
        bad[0].message
        == "root port 0000:80:02.0 (path of GPU 0000:86:00.0): 6655 BadTLP since boot"
    )
    assert bad[0].data["delta"] == 6655
    saved = json.loads(state_path(tmp_path).read_text())
    assert saved["schema"] == "rocmseat.aer-baseline/v2"
    # an --only run keeps its own baseline: the full run's (scope "node") is not advanced
    assert list(saved["scopes"]) == ["partial"]
    assert saved["scopes"]["partial"]["devices"]["0000:80:02.0"]["correctable.BadTLP"] == 6655


def test_second_run_reports_only_what_is_new(copy_tree, tmp_path):
    root = copy_tree("x99-r9700-degraded")
    state = tmp_path / "state"
    preflight_report(root, state, families={"aer"}, now=lambda: "2026-11-29T10:00:00Z")
    before = state_path(state).read_bytes()
    again = preflight_report(root, state, families={"aer"}, now=lambda: "2026-11-29T11:00:00Z")
    assert {f.severity for f in again.findings} == {Severity.OK}
    assert again.aer_window == "since the AER baseline of 2026-11-29T10:00:00Z"
    # nothing new was counted: the baseline is not rewritten (no fsync per run), its date stays
    assert state_path(state).read_bytes() == before
    rp = root / "devices/pci0000:80/0000:80:02.0/aer_dev_correctable"
    rp.write_text(rp.read_text().replace("BadTLP 6655", "BadTLP 6660"))
    third = preflight_report(root, state, families={"aer"}, now=lambda: "2026-11-29T12:00:00Z")
    (warn,) = [f for f in third.findings if f.severity != Severity.OK]
    assert (warn.check_id, warn.severity, warn.data["delta"]) == ("aer.badtlp", Severity.WARN, 5)
    assert third.aer_window == "since the AER baseline of 2026-11-29T10:00:00Z"
    saved = json.loads(state_path(state).read_text())["scopes"]["partial"]
    assert saved["taken_at"] == "2026-11-29T12:00:00Z"  # a change moves the baseline on
    assert saved["devices"]["0000:80:02.0"]["correctable.BadTLP"] == 6660


def test_nonfatal_growth_fails_even_once(copy_tree, tmp_path):
    root = copy_tree("x99-r9700")
    preflight_report(root, tmp_path, families={"aer"})
    gpu = (root / "class/drm/card2/device").resolve()
    text = (gpu / "aer_dev_nonfatal").read_text()
    (gpu / "aer_dev_nonfatal").write_text(
        text.replace("CmpltTO 0", "CmpltTO 1").replace(
            "TOTAL_ERR_NONFATAL 0", "TOTAL_ERR_NONFATAL 1"
        )
    )
    report = preflight_report(root, tmp_path, families={"aer"})
    (fail,) = [f for f in report.findings if f.severity != Severity.OK]
    assert (fail.check_id, fail.severity, fail.subject) == (
        "aer.nonfatal",
        Severity.FAIL,
        "0000:09:00.0",
    )
    assert "1 uncorrectable (nonfatal) CmpltTO since the AER baseline of" in fail.message


def test_sample_takes_two_readings(copy_tree, tmp_path):
    root = copy_tree("x99-r9700-degraded")
    slept = []

    def load_meanwhile(seconds):
        slept.append(seconds)
        usp = root / "devices/pci0000:00/0000:00:02.0/0000:03:00.0/aer_dev_correctable"
        usp.write_text(usp.read_text().replace("RxErr 0", "RxErr 3"))

    report = preflight_report(root, tmp_path, families={"aer"}, sample_s=30, sleep=load_meanwhile)
    assert slept == [30]
    assert report.aer_window == "during the 30 s sample"
    bad = [f for f in report.findings if f.severity != Severity.OK]
    # the 6655 BadTLP since boot did not grow during the sample; the new RxErr did
    assert [(f.check_id, f.subject, f.data["delta"]) for f in bad] == [
        ("aer.rxerr", "0000:03:00.0", 3)
    ]


def test_counter_reset_counts_anew(copy_tree, tmp_path):
    root = copy_tree("x99-r9700-degraded")
    preflight_report(root, tmp_path, families={"aer"})
    rp = root / "devices/pci0000:80/0000:80:02.0/aer_dev_correctable"
    rp.write_text(rp.read_text().replace("BadTLP 6655", "BadTLP 2"))
    report = preflight_report(root, tmp_path, families={"aer"})
    (warn,) = [f for f in report.findings if f.severity != Severity.OK]
    assert "since the counters reset" in warn.message and warn.data["delta"] == 2


def test_thresholds():
    gpu = read_inventory(DEGRADED).gpu("0000:86:00.0")
    current = snapshot([gpu])
    lenient = judge_aer(gpu, current, None, "since boot", AerThresholds(correctable_fail=10000))
    assert [f.severity for f in lenient] == [Severity.WARN]


def test_rootport_total_without_device_counts(copy_tree, tmp_path):
    # firmware-first: device counters stay 0, the root port's ERR_COR total grows
    root = copy_tree("x99-r9700")
    (root / "devices/pci0000:00/0000:00:02.0/aer_rootport_total_err_cor").write_text("7\n")
    findings = preflight_report(root, tmp_path, families={"aer"}).findings
    (warn,) = [f for f in findings if f.severity != Severity.OK]
    assert warn.check_id == "aer.rootport_total" and "7 ERR_COR" in warn.message


def test_unreadable_or_absent_aer_is_unknown(copy_tree, tmp_path):
    root = copy_tree("x99-r9700")
    (root / "devices/pci0000:00/0000:00:02.0/aer_dev_fatal").write_text("nonsense\n")
    findings = preflight_report(root, tmp_path, families={"aer"}).findings
    assert [f.check_id for f in findings if f.severity == Severity.UNKNOWN] == ["aer.unknown"]
    mi = copy_tree("mi300x-8gpu")
    for path in mi.rglob("aer_*"):
        path.unlink()
    findings = preflight_report(mi, tmp_path / "s2", families={"aer"}).findings
    assert {f.check_id for f in findings} == {"aer.unavailable"}


def test_baseline_for_another_root_is_ignored_and_corrupt_one_warned(tmp_path):
    save_baseline(tmp_path, SYSFS_FIXTURES / "x99-r9700", {"0000:05:00.0": {"a.b": 1}}, "T")
    assert load_baseline(tmp_path, DEGRADED) == (None, None)
    assert load_baseline(tmp_path, SYSFS_FIXTURES / "x99-r9700")[0].devices == {
        "0000:05:00.0": {"a.b": 1}
    }
    state_path(tmp_path).write_text("{not json")
    baseline, problem = load_baseline(tmp_path, DEGRADED)
    assert baseline is None and "unusable baseline" in problem
    report = preflight_report(DEGRADED, tmp_path, families={"aer"})
    assert any(
        f.check_id == "aer.baseline" and f.severity == Severity.WARN for f in report.findings
    )
    assert report.aer_window == "since boot"


def test_unwritable_state_dir_is_a_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    report = preflight_report(SYSFS_FIXTURES / "x99-r9700", blocker / "state", families={"aer"})
    (warn,) = [f for f in report.findings if f.check_id == "aer.baseline"]
    assert warn.severity == Severity.WARN and "cannot save the AER baseline" in warn.message


def test_baseline_save_holds_the_lock_and_merges(tmp_path, monkeypatch):
    import rocmseat.preflight.aer_state as aer_state
    from rocmseat.atomic import exclusive_lock

    root = SYSFS_FIXTURES / "x99-r9700"
    assert save_baseline(tmp_path, root, {"0000:05:00.0": {"correctable.BadTLP": 1}}, "T1") is None
    # a second run that read other devices (--pair) merges into the file, keeping the first's
    assert save_baseline(tmp_path, root, {"0000:86:00.0": {"correctable.RxErr": 2}}, "T2") is None
    baseline, problem = load_baseline(tmp_path, root)
    assert problem is None and baseline.taken_at == "T2"
    assert baseline.devices == {
        "0000:05:00.0": {"correctable.BadTLP": 1},
        "0000:86:00.0": {"correctable.RxErr": 2},
    }
    # another process holds the lock: save waits, then gives up with a reason, file untouched
    before = state_path(tmp_path).read_bytes()
    monkeypatch.setattr(aer_state, "LOCK_TIMEOUT_S", 0.2)
    with exclusive_lock(state_path(tmp_path).with_suffix(".lock")):
        problem = save_baseline(tmp_path, root, {"0000:05:00.0": {"x.y": 9}}, "T3")
    assert problem is not None and "still locked by another process after 0.2 s" in problem
    assert state_path(tmp_path).read_bytes() == before
    assert sorted(p.name for p in state_path(tmp_path).parent.iterdir()) == [
        "aer-baseline.json",
        "aer-baseline.lock",
    ]  # atomic: no temp file left behind


def test_state_dir_blocked_by_a_file_says_so(tmp_path):
    (tmp_path / "preflight").write_text("")  # a file where the directory should be
    problem = save_baseline(tmp_path, SYSFS_FIXTURES / "x99-r9700", {}, "T")
    assert problem == (
        f"{state_path(tmp_path)}: cannot save the AER baseline "
        "(a file stands where a directory should be)"
    )


@settings(max_examples=200, deadline=None)
@given(
    content=st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(
                    st.sampled_from(["schema", "sysfs_root", "taken_at", "devices", "x"])
                    | st.text(),
                    inner,
                    max_size=4,
                )
            ),
            max_leaves=12,
        ).map(lambda v: json.dumps(v).encode()),
    )
)
def test_hypothesis_any_baseline_file_loads_or_is_a_one_line_problem(tmp_path_factory, content):
    state = tmp_path_factory.mktemp("state")
    path = state_path(state)
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    baseline, problem = load_baseline(state, DEGRADED)
    assert baseline is None or isinstance(baseline.devices, dict)
    if problem is not None:
        assert baseline is None and problem.startswith(str(path)) and "\n" not in problem


def test_gpu_lost_during_the_sample_fails(copy_tree, tmp_path):
    root = copy_tree("x99-r9700")

    def fall_off_the_bus(_seconds):
        (root / "class/drm/card3").unlink()

    report = preflight_report(root, tmp_path, families={"aer"}, sample_s=5, sleep=fall_off_the_bus)
    lost = [(f.check_id, f.severity, f.subject) for f in report.findings if f.severity != "ok"]
    assert lost == [("inventory.gpu_lost", Severity.FAIL, "0000:86:00.0")]
    (finding,) = [f for f in report.findings if f.check_id == "inventory.gpu_lost"]
    assert finding.message == (
        "GPU 0000:86:00.0 disappeared during the 5 s sample (its DRM card or PCI function is gone)"
    )
