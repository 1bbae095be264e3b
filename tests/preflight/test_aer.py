"""AER by deltas: since boot, since the last preflight (state file), during a sample."""

from __future__ import annotations

import json

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
    assert saved["schema"] == "rocmseat.aer-baseline/v1"
    assert saved["devices"]["0000:80:02.0"]["correctable.BadTLP"] == 6655


def test_second_run_reports_only_what_is_new(copy_tree, tmp_path):
    root = copy_tree("x99-r9700-degraded")
    state = tmp_path / "state"
    preflight_report(root, state, families={"aer"}, now=lambda: "2026-11-29T10:00:00Z")
    again = preflight_report(root, state, families={"aer"})
    assert {f.severity for f in again.findings} == {Severity.OK}
    assert again.aer_window == "since the last preflight (2026-11-29T10:00:00Z)"
    rp = root / "devices/pci0000:80/0000:80:02.0/aer_dev_correctable"
    rp.write_text(rp.read_text().replace("BadTLP 6655", "BadTLP 6660"))
    third = preflight_report(root, state, families={"aer"})
    (warn,) = [f for f in third.findings if f.severity != Severity.OK]
    assert (warn.check_id, warn.severity, warn.data["delta"]) == ("aer.badtlp", Severity.WARN, 5)


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
    assert "1 uncorrectable (nonfatal) CmpltTO since the last preflight" in fail.message


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
