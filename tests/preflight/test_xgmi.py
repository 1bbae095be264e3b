"""The xgmi family on the hive fixtures (build_sysfs_fixtures.mi300x_hive): a full hive is ok, the
degraded one fails naming each GPU and peer of an inactive link, the split one fails the GPU
outside and names it on every member, and what cannot be read is unknown, never ok."""

from __future__ import annotations

import dataclasses
import os

import pytest

from rocmseat.findings import Severity, exit_code_for
from rocmseat.node.inventory import read_inventory
from rocmseat.preflight.run import PreflightOptions, preflight_report
from rocmseat.preflight.xgmi import XgmiExpectations, judge_xgmi
from tests.sysfs.conftest import SYSFS_FIXTURES, fixture_builder

ONLY = PreflightOptions(families=("xgmi",))


@pytest.fixture(scope="module")
def builder():
    return fixture_builder()


def _bdfs():
    return [g.pci_address for g in read_inventory(SYSFS_FIXTURES / "mi300x-hive").gpus]


def _dev(root, bdf):
    return os.path.realpath(root / "bus/pci/devices" / bdf)


def _bad(findings):
    return sorted((f.check_id, f.severity.value, f.subject, f.data.get("peer"))
                  for f in findings if f.severity != Severity.OK)


def test_the_full_hive_is_ok_on_every_gpu(tmp_path):
    report = preflight_report(SYSFS_FIXTURES / "mi300x-hive", tmp_path)
    xgmi = [f for f in report.findings if f.family == "xgmi"]
    assert "xgmi" in report.families
    assert _bad(xgmi) == [] and exit_code_for(report.findings) == 0
    assert {f.check_id for f in xgmi} == {"xgmi.hive", "xgmi.link", "xgmi.peer"}
    assert len([f for f in xgmi if f.check_id == "xgmi.link"]) == 8


def test_the_degraded_hive_fails_each_end_of_each_inactive_link(tmp_path):
    bdfs = _bdfs()
    report = preflight_report(SYSFS_FIXTURES / "mi300x-hive-degraded", tmp_path, ONLY)
    down = {(1, 2), (1, 3)}  # the fixture's (build_sysfs_fixtures.mi300x_hive "degraded")
    expected = sorted(
        [("xgmi.link", "fail", bdfs[a], bdfs[b]) for a, b in down]
        + [("xgmi.link", "fail", bdfs[b], bdfs[a]) for a, b in down]
        + [("xgmi.width", "warn", bdfs[1], None)]
    )
    assert _bad(report.findings) == expected
    assert exit_code_for(report.findings) == 1
    named = [f.message for f in report.findings if f.severity == Severity.FAIL]
    assert all("inactive" in m and "topology says it exists" in m for m in named)


def test_the_split_hive_fails_and_names_the_gpu_outside(tmp_path):
    bdfs = _bdfs()
    report = preflight_report(SYSFS_FIXTURES / "mi300x-hive-split", tmp_path, ONLY)
    hive = [f for f in report.findings if f.check_id == "xgmi.hive"]
    assert {f.severity for f in hive} == {Severity.FAIL}
    (outside,) = [f for f in hive if f.subject == bdfs[7]]
    assert "in no XGMI hive" in outside.message
    assert all(f.data["outside"] == [bdfs[7]] for f in hive if f.subject != bdfs[7])


def test_two_hive_ids_fail():
    inventory = read_inventory(SYSFS_FIXTURES / "mi300x-hive")
    first = inventory.gpus[0]
    other = dataclasses.replace(first.amdgpu.xgmi, hive_id=7)
    gpus = (dataclasses.replace(first, amdgpu=dataclasses.replace(first.amdgpu, xgmi=other)),
            *inventory.gpus[1:])
    inventory = dataclasses.replace(inventory, gpus=gpus)
    hive = [f for f in judge_xgmi(inventory, inventory.gpus) if f.check_id == "xgmi.hive"]
    assert {f.severity for f in hive} == {Severity.FAIL}
    assert "2 XGMI hives" in hive[0].message


def test_no_link_status_is_unknown_never_ok(copy_tree, tmp_path, builder):
    root = copy_tree("mi300x-hive")
    gpu = _bdfs()[0]
    with open(os.path.join(_dev(root, gpu), "gpu_metrics"), "wb") as table:
        table.write(builder.mi300x_metrics())  # v1.5: width and speed, no xgmi_link_status
    report = preflight_report(root, tmp_path, ONLY)
    (link,) = [f for f in report.findings if f.check_id == "xgmi.link" and f.subject == gpu]
    assert link.severity == Severity.UNKNOWN and "v1.5 has no xgmi_link_status" in link.message
    assert exit_code_for(report.findings) == 2


def test_a_peer_two_hops_away_warns(copy_tree, tmp_path):
    root = copy_tree("mi300x-hive")
    gpu = _bdfs()[0]
    hops = os.path.join(_dev(root, gpu), "xgmi_num_hops")
    row = open(hops).read().split()
    row[0] = "42"  # join position 0 (the hive master) is two hops from this GPU
    with open(hops, "w") as out:
        out.write(" ".join(row) + " \n")
    report = preflight_report(root, tmp_path, ONLY)
    (far,) = [f for f in report.findings if f.severity != Severity.OK]
    assert (far.check_id, far.severity, far.subject, far.data["hops"]) == (
        "xgmi.peer", Severity.WARN, gpu, 2)


def test_the_profile_expects_links_width_and_partitions(tmp_path):
    inventory = read_inventory(SYSFS_FIXTURES / "mi300x-hive-cpx")
    expected = XgmiExpectations(hive_members=8, links_per_peer=2, width=16, speed_gts=32,
                                compute_partition="SPX", memory_partition="NPS1")
    findings = judge_xgmi(inventory, inventory.gpus[:1], expected)
    bad = sorted((f.check_id, f.severity.value) for f in findings if f.severity != Severity.OK)
    assert bad == [("xgmi.partition", "fail")] * 2 + [("xgmi.peer", "fail")] * 7


def test_asked_for_on_a_node_without_a_hive(tmp_path):
    (mi,) = preflight_report(SYSFS_FIXTURES / "mi300x-8gpu", tmp_path, ONLY).findings
    assert mi.severity == Severity.UNKNOWN  # Instinct GPUs in no hive: a hive may have failed
    (radeon,) = preflight_report(SYSFS_FIXTURES / "x99-r9700", tmp_path, ONLY).findings
    assert radeon.severity == Severity.OK and "not applicable" in radeon.message
    # by default the family runs only where there is a hive
    assert "xgmi" not in preflight_report(SYSFS_FIXTURES / "x99-r9700", tmp_path).families


def test_xgmi_wafl_growth_is_judged_by_the_ras_family(copy_tree, tmp_path):
    root = copy_tree("mi300x-hive")
    gpu = _bdfs()[2]
    count = os.path.join(_dev(root, gpu), "ras", "xgmi_wafl_err_count")

    def grow(_seconds):
        with open(count, "w") as out:
            out.write("ue: 2\nce: 5\n")

    report = preflight_report(root, tmp_path, PreflightOptions(
        families=("ras",), sample_s=1.0, sleep=grow))
    bad = sorted((f.check_id, f.severity.value, f.subject) for f in report.findings
                 if f.severity != Severity.OK)
    assert bad == [("ras.ce", "warn", gpu), ("ras.ue", "fail", gpu)]
    assert all("xgmi_wafl" in f.message for f in report.findings
               if f.severity != Severity.OK)


@pytest.mark.parametrize("name,text,check", [
    ("current_compute_partition", "SPX\x1b[2J\n", "xgmi.partition"),
    ("xgmi_device_id", "-3\n", "xgmi.read"),
    ("xgmi_port_num", "01:02 -> 03\n", "xgmi.read"),
    ("xgmi_num_links", "zz \n", "xgmi.peer"),
])
def test_an_unreadable_xgmi_file_is_unknown(copy_tree, tmp_path, name, text, check):
    root = copy_tree("mi300x-hive")
    gpu = _bdfs()[1]
    with open(os.path.join(_dev(root, gpu), name), "w") as out:
        out.write(text)
    report = preflight_report(root, tmp_path, ONLY)
    (bad,) = [f for f in report.findings if f.severity != Severity.OK]
    assert (bad.check_id, bad.severity, bad.subject) == (check, Severity.UNKNOWN, gpu)
    assert exit_code_for(report.findings) == 2


def test_a_node_link_that_is_no_link_breaks_the_hive_reading(copy_tree, tmp_path):
    root = copy_tree("mi300x-hive")
    node = os.path.join(_dev(root, "0000:5c:00.0"), "xgmi_hive_info", "node3")
    os.unlink(node)
    os.mkdir(node)
    report = preflight_report(root, tmp_path, ONLY)
    hive = [f for f in report.findings if f.check_id == "xgmi.hive"]
    assert {f.severity for f in hive} == {Severity.UNKNOWN}
    assert "not a link to a PCI device directory" in hive[0].message


def test_a_dead_link_outside_the_replicas_gpus_warns(tmp_path):
    """launch's gate checks a replica's own GPUs (`--pair` of each pair of its group): a link of
    one of them to a GPU of another group carries none of its all-reduce."""
    from rocmseat.placement.groups import group_pairs, plan_groups

    tree = SYSFS_FIXTURES / "mi300x-hive-degraded"
    groups = plan_groups(read_inventory(tree), 4).groups
    for group in groups:
        report = preflight_report(tree, tmp_path / group[0], PreflightOptions(
            families=("xgmi", "numa"), pairs=group_pairs(group)))
        assert exit_code_for(report.findings) == 0
        scoped = [f for f in report.findings if "outside this replica's GPUs" in f.message]
        assert scoped and {f.severity for f in scoped} == {Severity.WARN}
    bdfs = _bdfs()
    across = preflight_report(tree, tmp_path / "x", PreflightOptions(
        families=("xgmi",), pairs=[(bdfs[1], bdfs[2])]))
    assert {(f.subject, f.data.get("peer")) for f in across.findings
            if f.severity == Severity.FAIL} == {(bdfs[1], bdfs[2]), (bdfs[2], bdfs[1])}
