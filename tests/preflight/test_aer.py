"""AER by deltas over the error window (rocmseat.preflight.windows), or during a sample."""

from __future__ import annotations

import json

from rocmseat.findings import Severity
from rocmseat.node.inventory import read_inventory
from rocmseat.preflight.aer import AerThresholds, judge_aer, snapshot
from rocmseat.preflight.run import PreflightOptions, preflight_report
from rocmseat.preflight.windows import state_path
from tests.sysfs.conftest import SYSFS_FIXTURES

DEGRADED = SYSFS_FIXTURES / "x99-r9700-degraded"


def _aer(findings):
    return [f for f in findings if f.family == "aer"]


def test_first_run_reports_counts_since_boot(tmp_path):
    report = preflight_report(DEGRADED, tmp_path, PreflightOptions(families={"aer"}))
    bad = [f for f in report.findings if f.severity != Severity.OK]
    assert [(f.check_id, f.severity, f.subject) for f in bad] == [
        ("aer.badtlp", Severity.FAIL, "0000:80:02.0")
    ]
    assert bad[0].message == (
        "root port 0000:80:02.0 (path of GPU 0000:86:00.0): +6,655 BadTLP since boot "
        "(no reading of this boot is 24 h old yet)"
    )
    assert bad[0].data["delta"] == 6655
    saved = json.loads(state_path(tmp_path).read_text())
    assert saved["schema"] == "rocmseat.error-readings/v1"
    (entry,) = saved["devices"]["0000:80:02.0"]
    assert entry["counters"] == {
        "correctable.BadTLP": 6655, "correctable.TOTAL": 6655, "rootport.cor": 6655,
    }


def test_later_runs_judge_the_same_window(copy_tree, tmp_path):
    root = copy_tree("x99-r9700-degraded")
    state = tmp_path / "state"

    def run(stamp):
        report = preflight_report(root, state,
                                  PreflightOptions(families={"aer"}, now=lambda: stamp))
        return report, [(f.check_id, f.severity, f.data.get("delta"))
                        for f in report.findings if f.severity != Severity.OK]

    _, bad = run("2026-11-29T10:00:00Z")
    assert bad == [("aer.badtlp", Severity.FAIL, 6655)]
    # an hour later nothing grew, and the 6,655 are still within the window: still a failure
    report, bad = run("2026-11-29T11:00:00Z")
    assert bad == [("aer.badtlp", Severity.FAIL, 6655)]
    assert report.aer_window == "since boot (no reading of this boot is 24 h old yet)"
    # a day later the window starts after the last reading that saw 6,655: nothing new
    report, bad = run("2026-11-30T11:30:00Z")
    assert bad == []
    assert report.aer_window == "in the last 24 h (since 2026-11-29 11:00 UTC)"
    rp = root / "devices/pci0000:80/0000:80:02.0/aer_dev_correctable"
    rp.write_text(rp.read_text().replace("BadTLP 6655", "BadTLP 6660"))
    report, bad = run("2026-11-30T12:00:00Z")
    assert bad == [("aer.badtlp", Severity.WARN, 5)]
    (finding,) = [f for f in report.findings if f.check_id == "aer.badtlp"]
    assert finding.message.endswith(
        "+5 BadTLP in the last 24 h (since 2026-11-29 12:00 UTC); 6,660 since boot"
    )


def test_nonfatal_growth_fails_even_once(copy_tree, tmp_path):
    root = copy_tree("x99-r9700")
    preflight_report(root, tmp_path, PreflightOptions(families={"aer"}))
    gpu = (root / "class/drm/card2/device").resolve()
    text = (gpu / "aer_dev_nonfatal").read_text()
    (gpu / "aer_dev_nonfatal").write_text(
        text.replace("CmpltTO 0", "CmpltTO 1").replace(
            "TOTAL_ERR_NONFATAL 0", "TOTAL_ERR_NONFATAL 1"
        )
    )
    report = preflight_report(root, tmp_path, PreflightOptions(families={"aer"}))
    (fail,) = [f for f in report.findings if f.severity != Severity.OK]
    assert (fail.check_id, fail.severity, fail.subject) == (
        "aer.nonfatal",
        Severity.FAIL,
        "0000:09:00.0",
    )
    assert "+1 uncorrectable (nonfatal) CmpltTO since boot" in fail.message


def test_sample_takes_two_readings(copy_tree, tmp_path):
    root = copy_tree("x99-r9700-degraded")
    slept = []

    def load_meanwhile(seconds):
        slept.append(seconds)
        usp = root / "devices/pci0000:00/0000:00:02.0/0000:03:00.0/aer_dev_correctable"
        usp.write_text(usp.read_text().replace("RxErr 0", "RxErr 3"))

    report = preflight_report(root, tmp_path,
                              PreflightOptions(families={"aer"}, sample_s=30, sleep=load_meanwhile))
    assert slept == [30]
    assert report.aer_window == "during the 30 s sample"
    bad = [f for f in report.findings if f.severity != Severity.OK]
    # the 6655 BadTLP since boot did not grow during the sample; the new RxErr did
    assert [(f.check_id, f.subject, f.data["delta"]) for f in bad] == [
        ("aer.rxerr", "0000:03:00.0", 3)
    ]


def test_counter_reset_counts_anew(copy_tree, tmp_path):
    root = copy_tree("x99-r9700-degraded")
    preflight_report(root, tmp_path,
                     PreflightOptions(families={"aer"}, now=lambda: "2026-11-29T10:00:00Z"))
    rp = root / "devices/pci0000:80/0000:80:02.0/aer_dev_correctable"
    rp.write_text(rp.read_text().replace("BadTLP 6655", "BadTLP 2"))
    report = preflight_report(root, tmp_path, PreflightOptions(families={"aer"},
                              now=lambda: "2026-11-30T11:00:00Z"))
    (warn,) = [f for f in report.findings if f.severity != Severity.OK]
    assert "since the counters reset" in warn.message and warn.data["delta"] == 2


def test_thresholds():
    gpu = read_inventory(DEGRADED).gpu("0000:86:00.0")
    current = snapshot([gpu])
    lenient = judge_aer(gpu, current, {}, AerThresholds(correctable_fail=10000))
    assert [f.severity for f in lenient] == [Severity.WARN]


def test_rootport_total_without_device_counts(copy_tree, tmp_path):
    # firmware-first: device counters stay 0, the root port's ERR_COR total grows
    root = copy_tree("x99-r9700")
    (root / "devices/pci0000:00/0000:00:02.0/aer_rootport_total_err_cor").write_text("7\n")
    findings = preflight_report(root, tmp_path, PreflightOptions(families={"aer"})).findings
    (warn,) = [f for f in findings if f.severity != Severity.OK]
    assert warn.check_id == "aer.rootport_total" and "+7 ERR_COR" in warn.message


def test_unreadable_or_absent_aer_is_unknown(copy_tree, tmp_path):
    root = copy_tree("x99-r9700")
    (root / "devices/pci0000:00/0000:00:02.0/aer_dev_fatal").write_text("nonsense\n")
    findings = preflight_report(root, tmp_path, PreflightOptions(families={"aer"})).findings
    assert [f.check_id for f in findings if f.severity == Severity.UNKNOWN] == ["aer.unknown"]
    mi = copy_tree("mi300x-8gpu")
    for path in mi.rglob("aer_*"):
        path.unlink()
    findings = preflight_report(mi, tmp_path / "s2", PreflightOptions(families={"aer"})).findings
    assert {f.check_id for f in findings} == {"aer.unavailable"}


def test_gpu_lost_during_the_sample_fails(copy_tree, tmp_path):
    root = copy_tree("x99-r9700")

    def fall_off_the_bus(_seconds):
        (root / "class/drm/card3").unlink()

    options = PreflightOptions(families={"aer"}, sample_s=5, sleep=fall_off_the_bus)
    report = preflight_report(root, tmp_path, options)
    lost = [(f.check_id, f.severity, f.subject) for f in report.findings if f.severity != "ok"]
    assert lost == [("inventory.gpu_lost", Severity.FAIL, "0000:86:00.0")]
    (finding,) = [f for f in report.findings if f.check_id == "inventory.gpu_lost"]
    assert finding.message == (
        "GPU 0000:86:00.0 disappeared during the 5 s sample (its DRM card or PCI function is gone)"
    )
