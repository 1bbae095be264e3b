"""Issue 17: the GPU firmware's view of the link (pp_dpm_pcie's star, gpu_metrics) is a source of
the verdict. The four captured cards of the issue, as VM-shaped fixture trees (each endpoint
alone under the root complex), and the walked cases where the firmware contradicts the hops."""

from __future__ import annotations

import pytest

from rocmseat.findings import Severity
from rocmseat.node.inventory import read_inventory
from rocmseat.preflight.link import judge_dpm, judge_link
from rocmseat.preflight.run import PreflightOptions, preflight_report
from tests.sysfs.conftest import SYSFS_FIXTURES, fixture_builder


def _gpu(tree, address="0000:00:05.0"):
    root = tree if not isinstance(tree, str) else SYSFS_FIXTURES / tree
    gpu = read_inventory(root).gpu(address)
    assert gpu is not None
    return gpu


def _checks(findings):
    return [(f.check_id, f.severity) for f in findings]


# --- the table of issue 17 ---------------------------------------------------------------------
def test_rdna4_alone_on_a_root_bus_is_judged_from_the_firmware():
    gpu = _gpu("vm-rdna4")
    (link,) = judge_link(gpu)
    assert (link.check_id, link.severity) == ("pcie.link.ok", Severity.OK)
    assert link.message.startswith(
        "16 GT/s x16 from the GPU firmware (pp_dpm_pcie level 1, gpu_metrics v1.3)"
    )
    assert "the endpoint claims 32 GT/s x16 (what lspci would show)" in link.message
    assert (link.data["effective_speed_gts"], link.data["effective_width"]) == (16.0, 16)
    assert link.data["source"] == "firmware" and link.data["hierarchy"] == "hidden"
    # the top DPM level is the firmware's link: no pcie.dpm.below_link against the claim
    assert _checks(judge_dpm(gpu)) == [("pcie.dpm.ok", Severity.OK)]


def test_rdna4_under_a_qemu_root_port_claiming_32_gts():
    gpu = _gpu("vm-qemu-rootport", "0000:01:00.0")
    (link,) = judge_link(gpu)
    assert (link.check_id, link.severity) == ("pcie.link.ok", Severity.OK)
    assert link.message.startswith("16 GT/s x16 from the GPU firmware")
    assert "0000:00:1c.0 (1b36:000c), is QEMU's emulated port" in link.message
    assert link.data["hierarchy"] == "emulated"


def test_rdna2_x8_card_on_a_gen3_host():
    (link,) = judge_link(_gpu("vm-rdna2-x8"))
    assert link.message.startswith("8 GT/s x8 from the GPU firmware (pp_dpm_pcie level 1)")
    assert "the endpoint claims 16 GT/s x16" in link.message


def test_polaris_with_empty_link_files_gets_no_width_from_smu7():
    """Issue 24: smu7 prints fixed lane strings (smu7_hwmgr.c): its star gives the speed only,
    so with the link files unreadable the width is not known (issue 17 took "x16" as lanes)."""
    (link,) = judge_link(_gpu("vm-polaris"))
    assert (link.check_id, link.severity) == ("pcie.link.unknown", Severity.UNKNOWN)
    assert "pp_dpm_pcie says 8 GT/s and no width (smu7 prints fixed lane strings" in link.message


def test_rdna3_laptop_with_no_starred_row_is_unknown_never_ok():
    gpu = _gpu("vm-rdna3-laptop")
    assert _checks(judge_link(gpu)) == [("pcie.link.unknown", Severity.UNKNOWN)]
    (dpm,) = judge_dpm(gpu)
    assert (dpm.check_id, dpm.severity) == ("pcie.dpm.unknown", Severity.UNKNOWN)
    assert "stars no row" in dpm.message


def test_a_suspended_gpu_says_runtime_status(copy_tree):
    root = copy_tree("vm-rdna3-laptop")
    status = next(root.glob("devices/pci0000:00/0000:00:05.0/power/runtime_status"))
    status.write_text("suspended\n")
    # issue 24: asleep, not unreadable: the pm getters are not read, an ok finding says why
    (dpm,) = judge_dpm(_gpu(root))
    assert (dpm.check_id, dpm.severity) == ("pcie.dpm.asleep", Severity.OK)
    assert dpm.message.startswith("GPU in runtime suspend: firmware not read (it wakes when a "
                                  "client opens it)")
    (link,) = judge_link(_gpu(root))
    assert (link.check_id, link.severity) == ("pcie.link.asleep", Severity.OK)


# --- stars ---------------------------------------------------------------------------------------
def _with_dpm(copy_tree, tree, text, address="0000:00:05.0"):
    root = copy_tree(tree)
    (root / "bus/pci/devices" / address).resolve().joinpath("pp_dpm_pcie").write_text(text)
    return _gpu(root, address)


def test_several_starred_rows_with_equal_values_are_one_level(copy_tree):
    gpu = _with_dpm(copy_tree, "vm-rdna2-x8",
                    "0: 8.0GT/s, x8 619Mhz *\n1: 8.0GT/s, x8 619Mhz *\n")
    (link,) = judge_link(gpu)
    assert link.severity == Severity.OK
    assert link.message.startswith("8 GT/s x8 from the GPU firmware (pp_dpm_pcie level 0, 1)")


def test_starred_rows_that_differ_are_unknown(copy_tree):
    gpu = _with_dpm(copy_tree, "vm-rdna2-x8",
                    "0: 2.5GT/s, x1 310Mhz *\n1: 8.0GT/s, x8 619Mhz *\n")
    assert _checks(judge_link(gpu)) == [("pcie.link.unknown", Severity.UNKNOWN)]
    (dpm,) = judge_dpm(gpu)
    assert dpm.severity == Severity.UNKNOWN
    assert "stars rows that differ: 0 (2.5 GT/s x1), 1 (8 GT/s x8)" in dpm.message


def test_pp_dpm_pcie_and_gpu_metrics_disagreeing_is_unknown(copy_tree):
    gpu = _with_dpm(copy_tree, "vm-rdna4", "0: 2.5GT/s, x1 97Mhz \n1: 8.0GT/s, x16 1800Mhz *\n")
    (link,) = judge_link(gpu)
    assert link.severity == Severity.UNKNOWN
    assert "gpu_metrics says 16 GT/s x16" in link.message


def test_firmware_idle_below_its_top_level_is_idle_not_ok(copy_tree):
    gpu = _with_dpm(copy_tree, "vm-rdna2-x8", "0: 2.5GT/s, x1 310Mhz *\n1: 8.0GT/s, x8 619Mhz \n")
    (link,) = judge_link(gpu)
    assert (link.check_id, link.severity) == ("pcie.link.idle", Severity.WARN)
    assert "its top level is 1 (8 GT/s x8)" in link.message


# --- walked hierarchy: the firmware contradicts the hops ---------------------------------------
def test_firmware_below_the_walked_link_at_the_top_level_fails(copy_tree):
    # x99 GPU0: root port trained 8 GT/s x16; the firmware at its top level runs x8
    gpu = _with_dpm(copy_tree, "x99-r9700",
                    "0: 2.5GT/s, x1 600Mhz \n1: 8.0GT/s, x8 1500Mhz *\n", "0000:05:00.0")
    findings = judge_link(gpu)
    assert _checks(findings) == [("pcie.link.firmware_below", Severity.FAIL)]
    assert "runs the link at 8 GT/s x8 at its top DPM level (pp_dpm_pcie level 1)" in (
        findings[0].message
    )
    assert "hop 0000:00:02.0 trained 8 GT/s x16" in findings[0].message


def test_instinct_gpu_metrics_below_the_walked_link_fails(copy_tree):
    root = copy_tree("mi300x-8gpu")
    table = fixture_builder().gpu_metrics((1, 5), {"pcie_link_width": 16, "pcie_link_speed": 160})
    (root / "bus/pci/devices/0000:0c:00.0").resolve().joinpath("gpu_metrics").write_bytes(table)
    (finding,) = judge_link(_gpu(root, "0000:0c:00.0"))
    assert (finding.check_id, finding.severity) == ("pcie.link.firmware_below", Severity.FAIL)
    assert "16 GT/s x16 (no DPM levels: its current link) (gpu_metrics v1.5)" in finding.message


def test_walked_and_firmware_agreeing_is_as_before():
    (finding,) = judge_link(_gpu("mi300x-8gpu", "0000:0c:00.0"))
    assert finding.message == "32 GT/s x16 at root port 0000:09:01.1"


def test_x99_idle_firmware_below_the_walked_link_keeps_the_walked_verdict():
    (finding,) = judge_link(_gpu("x99-r9700", "0000:05:00.0"))
    assert finding.message.startswith("8 GT/s x16 at root port 0000:00:02.0")


# --- profiles and DMI ---------------------------------------------------------------------------
@pytest.mark.parametrize(("expected", "check"), [((16.0, 16), "pcie.link.ok"),
                                                 ((32.0, 16), "pcie.link.expected")])
def test_profile_expectation_is_judged_against_the_firmware(expected, check):
    (finding,) = judge_link(_gpu("vm-rdna4"), expected)
    assert finding.check_id == check
    assert "from the GPU firmware" in finding.message


def test_dmi_naming_a_hypervisor_makes_a_walked_path_emulated(copy_tree):
    root = copy_tree("x99-r9700")
    dmi = root / "class" / "dmi" / "id"
    dmi.mkdir(parents=True)
    (dmi / "sys_vendor").write_text("VMware, Inc.\n")
    (dmi / "product_name").write_text("VMware Virtual Platform\n")
    (finding,) = judge_link(_gpu(root, "0000:89:00.0"))
    assert finding.data["hierarchy"] == "emulated"
    assert "the host's DMI names VMware" in finding.message


def test_the_full_run_table_shows_the_verdict_link(tmp_path):
    report = preflight_report(SYSFS_FIXTURES / "vm-rdna4", tmp_path,
                              PreflightOptions(families={"pcie"}))
    from rocmseat.preflight.render import to_json

    (gpu,) = to_json(report)["gpus"]
    assert (gpu["effective_link"]["speed_gts"], gpu["effective_link"]["width"]) == (16.0, 16)
    assert gpu["endpoint_claims"] == {"speed_gts": 32.0, "width": 16}


def test_an_unreadable_gpu_metrics_makes_the_firmware_unsure(copy_tree):
    # found by the hostile battery: a FIFO or a torn table where gpu_metrics should be, with
    # pp_dpm_pcie readable, gave a healthy verdict from pp_dpm_pcie alone
    root = copy_tree("vm-rdna4")
    table = root / "devices/pci0000:00/0000:00:05.0/gpu_metrics"
    table.write_bytes(table.read_bytes()[:64])
    (link,) = judge_link(_gpu(root))
    assert link.severity == Severity.UNKNOWN
    assert "the file holds 64" in link.message


def test_a_generation_index_in_gpu_metrics_leaves_pp_dpm_pcie_the_source(copy_tree):
    root = copy_tree("vm-rdna4")
    table = root / "devices/pci0000:00/0000:00:05.0/gpu_metrics"
    table.write_bytes((SYSFS_FIXTURES.parent / "gpu_metrics" / "v1_3-gen-index.bin").read_bytes())
    (link,) = judge_link(_gpu(root))
    assert link.severity == Severity.OK
    assert link.message.startswith("16 GT/s x16 from the GPU firmware (pp_dpm_pcie level 1);")
    (root / "devices/pci0000:00/0000:00:05.0/pp_dpm_pcie").unlink()
    (link,) = judge_link(_gpu(root))
    assert link.severity == Severity.UNKNOWN and "generation index" in link.message


def test_only_the_gpus_own_switch_ports_visible_is_hidden(tmp_path):
    builder = fixture_builder()
    # a container that shows the card's USP/DSP/endpoint on a root bus, no platform port
    chain = builder._amd_gpu_chain(
        usp="0000:00:05.0", dsp="0000:01:00.0", ep="0000:02:00.0", ep_device=0x7550,
        ep_class=0x030000, up_link=(32.0, 16), asic=(32.0, 16), numa=-1, cpus="0-7", card=1,
        files={"pp_dpm_pcie": builder._RDNA4_DPM},
    )
    host = builder.Host("hidden", "", [0] * 8, [("0-7", "10")], {"pci0000:00": [chain]},
                        [("0000:02:00.0", 120001, 64)])
    builder.write_host(tmp_path / "tree", host)
    (link,) = judge_link(_gpu(tmp_path / "tree", "0000:02:00.0"))
    assert link.data["hierarchy"] == "hidden"
    assert "only the GPU's own AMD switch ports are visible above it" in link.message
    assert link.message.startswith("16 GT/s x16 from the GPU firmware (pp_dpm_pcie level 1)")


def test_an_instinct_alone_on_a_root_bus_is_judged_from_gpu_metrics(tmp_path):
    # MI300X passed through alone: no pp_dpm_pcie on MI300, gpu_metrics is the firmware's word
    builder = fixture_builder()
    gpu = builder.Fn("0000:00:05.0", 0x1002, 0x74A1, 0x120000, (32.0, 16, 32.0, 16), -1, "0-7",
                     aer=builder._zero_aer(), driver="amdgpu",
                     binary={"gpu_metrics": builder.gpu_metrics(
                         (1, 5), {"pcie_link_width": 16, "pcie_link_speed": 160})},
                     cards=((1, ()),))
    host = builder.Host("vm-mi300x", "", [0] * 8, [("0-7", "10")], {"pci0000:00": [gpu]},
                        [("0000:00:05.0", 90402, 304)])
    builder.write_host(tmp_path / "tree", host)
    (link,) = judge_link(_gpu(tmp_path / "tree"))
    assert (link.check_id, link.severity) == ("pcie.link.ok", Severity.OK)
    assert link.message.startswith("16 GT/s x16 from the GPU firmware (gpu_metrics v1.5)")
    assert "the endpoint claims 32 GT/s x16" in link.message
