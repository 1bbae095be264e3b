"""pcie.link and pcie.dpm judges."""

from __future__ import annotations

import pytest

from rocmseat.findings import Severity
from rocmseat.node.inventory import read_inventory
from rocmseat.preflight.link import judge_dpm, judge_link
from tests.sysfs.conftest import SYSFS_FIXTURES


def _gpu(host, address):
    return read_inventory(SYSFS_FIXTURES / host).gpu(address)


def test_gen1_hop_fails_naming_hop_and_endpoint_claim():
    (finding,) = judge_link(_gpu("x99-r9700-degraded", "0000:89:00.0"))
    assert finding.check_id == "pcie.link.degraded" and finding.severity == Severity.FAIL
    assert finding.message == (
        "root port 0000:80:03.0 trained 2.5 GT/s x16; both ends support 8 GT/s x16; "
        "the endpoint claims 32 GT/s x16 (what lspci on 0000:89:00.0 would falsely show)"
    )


def test_x8_by_design_is_ok_and_said():
    (finding,) = judge_link(_gpu("x99-r9700", "0000:09:00.0"))
    assert finding.severity == Severity.OK
    assert "the slot is x8 (the GPU could do x16): capability-limited by design" in finding.message


def test_profile_can_make_x8_a_fault():
    findings = judge_link(_gpu("x99-r9700", "0000:09:00.0"), expected=(8.0, 16))
    assert [(f.check_id, f.severity) for f in findings] == [("pcie.link.expected", Severity.FAIL)]
    assert "the profile expects 8 GT/s x16" in findings[0].message


def test_low_link_at_an_active_dpm_level_is_idle_not_degraded(copy_tree):
    root = copy_tree("x99-r9700")
    rp = root / "devices/pci0000:00/0000:00:02.0"
    (rp / "current_link_speed").write_text("2.5 GT/s PCIe\n")
    (rp / "current_link_width").write_text("1\n")
    (finding,) = judge_link(read_inventory(root).gpu("0000:05:00.0"))
    assert (finding.check_id, finding.severity) == ("pcie.link.idle", Severity.WARN)
    assert "pp_dpm_pcie level 0 (idle power saving)" in finding.message


@pytest.mark.parametrize("content", ["garbage\n", "Unknown\n"])
def test_unreadable_link_is_unknown(copy_tree, content):
    root = copy_tree("x99-r9700")
    for name in ("current_link_speed",):
        (root / "devices/pci0000:00/0000:00:02.0" / name).write_text(content)
    (root / "devices/pci0000:00/0000:00:02.0/0000:03:00.0" / "current_link_speed").write_text(
        content
    )
    # the firmware still speaks (pp_dpm_pcie stars idle level 0): judged from it, never ok at
    # a guessed link (issue 17)
    (finding,) = judge_link(read_inventory(root).gpu("0000:05:00.0"))
    assert (finding.check_id, finding.severity) == ("pcie.link.idle", Severity.WARN)
    assert "2.5 GT/s x1 from the GPU firmware (pp_dpm_pcie level 0)" in finding.message
    assert ("the link files cannot be read" in finding.message) == (content == "garbage\n")
    gpu_dir = root / "devices/pci0000:00/0000:00:02.0/0000:03:00.0/0000:04:00.0/0000:05:00.0"
    (gpu_dir / "pp_dpm_pcie").unlink()
    (finding,) = judge_link(read_inventory(root).gpu("0000:05:00.0"))
    assert finding.severity == Severity.UNKNOWN


def test_dpm_idle_star_at_level_zero_is_ok():
    (finding,) = judge_dpm(_gpu("x99-r9700", "0000:05:00.0"))
    assert finding.severity == Severity.OK
    assert finding.message == "active level 0 (2.5 GT/s x1) (idle); highest level 1 (8 GT/s x16)"


def test_dpm_highest_below_trained_link_warns():
    (finding,) = judge_dpm(_gpu("single-socket-numa-unknown", "0000:0d:00.0"))
    assert (finding.check_id, finding.severity) == ("pcie.dpm.below_link", Severity.WARN)


def test_dpm_absent_and_empty(copy_tree):
    (absent,) = judge_dpm(_gpu("mi300x-8gpu", "0000:0c:00.0"))
    assert absent.check_id == "pcie.dpm.absent" and absent.severity == Severity.OK
    root = copy_tree("x99-r9700")
    ((root / "class/drm/card1/device").resolve() / "pp_dpm_pcie").write_text("\n")
    (empty,) = judge_dpm(read_inventory(root).gpu("0000:05:00.0"))
    assert empty.check_id == "pcie.dpm.empty"


def test_dpm_garbage_is_unknown(copy_tree):
    root = copy_tree("x99-r9700")
    ((root / "class/drm/card1/device").resolve() / "pp_dpm_pcie").write_text("0: 9GT/s\n")
    (finding,) = judge_dpm(read_inventory(root).gpu("0000:05:00.0"))
    assert finding.severity == Severity.UNKNOWN and "pp_dpm_pcie:1" in finding.message


def test_link_down_x0_fails(copy_tree):
    root = copy_tree("x99-r9700")
    (root / "devices/pci0000:80/0000:80:03.0/current_link_width").write_text("0\n")
    (finding,) = judge_link(read_inventory(root).gpu("0000:89:00.0"))
    assert (finding.check_id, finding.severity) == ("pcie.link.down", Severity.FAIL)
    assert finding.message.startswith(
        "root port 0000:80:03.0 reports its link down (x0) toward 0000:87:00.0; the endpoint "
        "claims 32 GT/s x16"
    )
