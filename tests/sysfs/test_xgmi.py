"""The XGMI reader (rocmseat.sysfs.xgmi), the partition/pm_policy reader and gpu_metrics' xGMI
fields, against the hive fixtures (tests/fixtures/build_sysfs_fixtures.py mi300x_hive) and tables
of malformed text. xgmi_error is read-and-clear: a test proves no reader opens it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from rocmseat.errors import ParseError
from rocmseat.node.inventory import read_inventory
from rocmseat.sysfs.gpu_metrics import parse_gpu_metrics
from rocmseat.sysfs.partition import parse_policy, read_partition
from rocmseat.sysfs.xgmi import parse_byte_row, parse_port_num, read_xgmi
from tests.sysfs.conftest import SYSFS_FIXTURES, fixture_builder

HIVE = SYSFS_FIXTURES / "mi300x-hive"


def _dev(root: Path, bdf: str) -> Path:
    return Path(os.path.realpath(root / "bus/pci/devices" / bdf))


@pytest.mark.parametrize("text,values", [
    ("41 41 00 41 \n", (0x41, 0x41, 0, 0x41)),
    ("00 \n", (0,)),
    ("\n", ()),
    ("01 01", (1, 1)),
])
def test_byte_rows(text, values):
    assert parse_byte_row(text) == values


@pytest.mark.parametrize("text", ["4 41 \n", "zz \n", "41  41 \n", "41 41\n41\n", "-1 \n",
                                  "41\x1b[2J \n", "41 " * 65 + "\n"])
def test_byte_rows_refused(text):
    with pytest.raises(ParseError):
        parse_byte_row(text, "xgmi_num_hops")


def test_port_lines():
    (link,) = parse_port_num("03:02 ->  01:01\n")
    assert (link.position, link.port, link.peer_position, link.peer_port) == (3, 2, 1, 1)
    for bad in ("03:02 -> 01:01\n", "3:02 ->  01:01\n", "03:02 ->  01:01 x\n"):
        with pytest.raises(ParseError):
            parse_port_num(bad, "xgmi_port_num")


@pytest.mark.parametrize("text,current", [
    ("0 : soc_pstate_default*\n1 : soc_pstate_0\n", "soc_pstate_default"),
    ("0 : plpd_disallow\n1 : plpd_default\n2 : plpd_optimized*\n", "plpd_optimized"),
    ("0 : plpd_disallow\n1 : plpd_default\n", None),
])
def test_policy_star(text, current):
    assert parse_policy(text) == current


@pytest.mark.parametrize("text", ["0 : a*\n1 : b*\n", "zero : a\n", "0 : a\x07\n"])
def test_policy_refused(text):
    with pytest.raises(ParseError):
        parse_policy(text, "pm_policy/xgmi_plpd")


def test_hive_members_follow_join_order_not_pci_order():
    builder = fixture_builder()
    bdfs = [g.pci_address for g in read_inventory(HIVE).gpus]
    joined = tuple(bdfs[i] for i in builder.JOIN_ORDER)
    for index, bdf in enumerate(bdfs):
        reading = read_xgmi(_dev(HIVE, bdf))
        assert reading is not None and reading.errors == ()
        assert reading.members == joined
        assert reading.position == builder.JOIN_ORDER.index(index)
        assert reading.hive_id == builder.HIVE_ID
        assert reading.device_id == builder.xgmi_device_id(index)
        assert reading.physical_id == builder.PHYSICAL_IDS[index]
        assert sorted(p for p, _h, _l in reading.peers()) == sorted(set(bdfs) - {bdf})
        assert {(h, n) for _p, h, n in reading.peers()} == {(1, 1)}
    # xgmi_hive_info is a directory on the first to join only
    first = _dev(HIVE, joined[0]) / "xgmi_hive_info"
    assert first.is_dir() and not first.is_symlink()
    assert (_dev(HIVE, joined[1]) / "xgmi_hive_info").is_symlink()


def test_port_num_names_the_peer_of_each_port():
    builder = fixture_builder()
    bdfs = [g.pci_address for g in read_inventory(HIVE).gpus]
    reading = read_xgmi(_dev(HIVE, bdfs[1]))
    assert reading is not None
    for peer in (0, 2, 3, 7):
        assert reading.port_peer(builder.xgmi_port(1, peer)) == bdfs[peer]
    assert reading.port_peer(7) is None


def test_a_gpu_that_did_not_join_has_no_reading():
    split = SYSFS_FIXTURES / "mi300x-hive-split"
    assert read_xgmi(_dev(split, "0000:df:00.0")) is None
    other = read_xgmi(_dev(split, "0000:0c:00.0"))
    assert other is not None and other.members is not None and len(other.members) == 7
    assert read_xgmi(_dev(SYSFS_FIXTURES / "x99-r9700", "0000:05:00.0")) is None


def test_broken_hive_links_are_reasons_not_tracebacks(copy_tree):
    root = copy_tree("mi300x-hive")
    master = _dev(root, "0000:5c:00.0") / "xgmi_hive_info"
    os.unlink(master / "node3")
    reading = read_xgmi(_dev(root, "0000:0c:00.0"))
    assert reading is not None and reading.members is None
    assert "not node1..nodeN" in reading.errors[0]
    (master / "node3").symlink_to("/nonexistent")
    reading = read_xgmi(_dev(root, "0000:0c:00.0"))
    assert reading is not None and reading.members is None and reading.errors


def test_the_readers_never_open_xgmi_error():
    opened: list[str] = []
    armed = [True]

    def hook(event, args):
        if armed[0] and event == "open" and args and isinstance(args[0], (str, bytes, Path)):
            opened.append(os.fsdecode(args[0]))

    sys.addaudithook(hook)  # audit hooks cannot be removed: disarmed below
    try:
        inventory = read_inventory(HIVE)
    finally:
        armed[0] = False
    assert len(inventory.gpus) == 8
    assert any(p.endswith("xgmi_num_hops") for p in opened)  # the hook saw the reader
    assert not [p for p in opened if os.path.basename(p) == "xgmi_error"]
    assert all((_dev(HIVE, g.pci_address) / "xgmi_error").is_file() for g in inventory.gpus)


def test_gpu_metrics_xgmi_fields_from_the_attribute_table():
    table = (_dev(SYSFS_FIXTURES / "mi300x-hive-degraded", "0000:22:00.0") / "gpu_metrics")
    metrics = parse_gpu_metrics(table.read_bytes())
    assert (metrics.xgmi_link_width, metrics.xgmi_link_speed_gts) == (8, 32)
    assert metrics.xgmi_link_status == (1, 0, 0, 1, 1, 1, 1, None)
    assert metrics.xgmi_read_data_acc == (1 << 30,) * 7 + (None,)


@pytest.mark.parametrize("revision,status", [((1, 5), None), ((1, 7), (1, 0, 1, 1, 1, 1, 1, None)),
                                             ((1, 8), (1, 0, 1, 1, 1, 1, 1, None))])
def test_gpu_metrics_xgmi_fields_from_the_structs(revision, status):
    builder = fixture_builder()
    values = {"pcie_link_width": 16, "pcie_link_speed": 320, "xgmi_link_width": 16,
              "xgmi_link_speed": 32}
    if status is not None:
        values["xgmi_link_status"] = [0xFFFF if s is None else s for s in status]
    metrics = parse_gpu_metrics(builder.gpu_metrics(revision, values))
    assert (metrics.xgmi_link_width, metrics.xgmi_link_speed_gts) == (16, 32)
    assert metrics.xgmi_link_status == status  # v1.5 has no link status at all


def test_partition_modes():
    assert read_partition(_dev(HIVE, "0000:0c:00.0")).compute == "SPX"
    cpx = read_partition(_dev(SYSFS_FIXTURES / "mi300x-hive-cpx", "0000:0c:00.0"))
    assert (cpx.compute, cpx.memory) == ("CPX", "NPS4")
    assert dict(cpx.policies) == {"soc_pstate": "soc_pstate_default", "xgmi_plpd": "plpd_default"}
    none = read_partition(_dev(SYSFS_FIXTURES / "x99-r9700", "0000:05:00.0"))
    assert (none.compute, none.memory, none.policies, none.errors) == (None, None, (), ())


def test_a_bad_partition_mode_is_a_reason(copy_tree):
    root = copy_tree("mi300x-hive")
    (_dev(root, "0000:0c:00.0") / "current_compute_partition").write_text("SPX\x1b]\n")
    reading = read_partition(_dev(root, "0000:0c:00.0"))
    assert reading.compute is None and "not a partition mode" in reading.errors[0]
