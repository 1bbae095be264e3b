"""Issue 26, item 10: the worst first. Findings sort by severity, then by the weight of their
check family (a degraded link before an AER count), so the NPD line, the drain reason, the
table and `--problems` all lead with the same, worst, finding."""

from __future__ import annotations

from rocmseat.findings import Finding, Severity
from rocmseat.fleet.npd import npd_line
from rocmseat.fleet.slurm import drain_reason
from rocmseat.preflight.order import FAMILY_WEIGHT, worst_first, worst_first_in_run_order


def f(check_id, severity=Severity.FAIL, subject="0000:05:00.0"):
    return Finding(check_id, severity, subject, "m")


def test_a_degraded_link_leads_an_aer_count():
    findings = [f("aer.badtlp", subject="0000:80:02.0"),
                f("pcie.link.degraded", subject="0000:89:00.0"),
                f("pcie.dpm.unknown", Severity.UNKNOWN)]
    assert [x.check_id for x in worst_first(findings)] == [
        "pcie.link.degraded", "aer.badtlp", "pcie.dpm.unknown"]
    # before: by check id, so "aer..." sorted first and the link hid behind "+1 more"
    assert npd_line(findings, gpus=4) == ("FAIL pcie.link.degraded 0000:89:00.0 +1 more", 1)
    assert drain_reason(findings, Severity.FAIL) == (
        "rocmseat: pcie.link.degraded 0000:89:00.0 +1 more: aer.badtlp [aer,pcie]")


def test_severity_outranks_the_family_and_an_unknown_family_weighs_least():
    findings = [f("hip.ipc", Severity.WARN), f("aer.badtlp"), f("newfamily.x"),
                f("ras.uncorrectable"), f("preflight.error", Severity.UNKNOWN)]
    assert [x.check_id for x in worst_first(findings)] == [
        "ras.uncorrectable", "aer.badtlp", "newfamily.x", "preflight.error", "hip.ipc"]
    assert "newfamily" not in FAMILY_WEIGHT


def test_the_table_keeps_the_runs_order_within_a_family():
    findings = [f("pcie.link.ok", Severity.OK, "b"), f("numa.pair", Severity.OK),
                f("pcie.link.ok", Severity.OK, "a")]
    assert [x.subject for x in worst_first_in_run_order(findings)] == ["b", "a", "0000:05:00.0"]
