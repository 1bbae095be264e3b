"""NUMA locality and TP2 pairs."""

from __future__ import annotations

import pytest

from rocmseat.findings import Severity
from rocmseat.node.inventory import read_inventory
from rocmseat.preflight.numa import judge_locality, judge_proposed, judge_requested
from rocmseat.preflight.pairs import Pair, propose_pairs
from tests.sysfs.conftest import SYSFS_FIXTURES


def test_x99_pairs_same_socket_noting_asymmetry():
    inv = read_inventory(SYSFS_FIXTURES / "x99-r9700")
    pairs = propose_pairs(inv)
    assert [(p.a, p.b, p.socket, p.numa_node, p.symmetric) for p in pairs] == [
        ("0000:05:00.0", "0000:09:00.0", 0, 0, False),
        ("0000:86:00.0", "0000:89:00.0", 1, 1, True),
    ]
    assert all(isinstance(p, Pair) and p.a < p.b for p in pairs)
    findings = judge_proposed(pairs, inv)
    assert [f.severity for f in findings] == [Severity.OK, Severity.OK]
    assert (
        "asymmetric links: 0000:05:00.0 8 GT/s x16, 0000:09:00.0 8 GT/s x8" in findings[0].message
    )


def test_mi300x_pairs_never_straddle():
    inv = read_inventory(SYSFS_FIXTURES / "mi300x-8gpu")
    pairs = propose_pairs(inv)
    assert len(pairs) == 4
    for pair in pairs:
        assert inv.gpu(pair.a).socket == inv.gpu(pair.b).socket == pair.socket


def test_symmetric_links_preferred(copy_tree):
    # make one GPU on each socket x8: the x8 GPUs pair with each other only within a socket
    root = copy_tree("mi300x-8gpu")
    for rp in ("0000:09:01.1", "0000:1f:01.1"):
        (next(root.glob(f"devices/*/{rp}")) / "current_link_width").write_text("8\n")
        (next(root.glob(f"devices/*/{rp}")) / "max_link_width").write_text("8\n")
    pairs = propose_pairs(read_inventory(root))
    assert ("0000:0c:00.0", "0000:22:00.0") in [(p.a, p.b) for p in pairs]
    assert all(p.symmetric for p in pairs)


def test_odd_gpu_and_unknown_socket_left_unpaired(copy_tree):
    root = copy_tree("x99-r9700")
    gpu = (root / "class/drm/card4/device").resolve()
    (gpu / "numa_node").write_text("-1\n")
    (gpu / "local_cpulist").write_text("0-55\n")
    inv = read_inventory(root)
    pairs = propose_pairs(inv)
    assert [(p.a, p.b) for p in pairs] == [("0000:05:00.0", "0000:09:00.0")]
    findings = judge_proposed(pairs, inv)
    unpaired = {f.subject: f.severity for f in findings if f.check_id == "numa.pair.unpaired"}
    assert unpaired == {"0000:86:00.0": Severity.OK, "0000:89:00.0": Severity.WARN}
    (locality,) = judge_locality(inv.gpu("0000:89:00.0"), inv)
    assert (locality.check_id, locality.severity) == ("numa.node_unknown", Severity.WARN)
    assert "socket unknown (local_cpulist 0-55 spans packages 0,1)" in locality.message


def test_numa_minus_one_multi_socket_warns_saying_how(copy_tree):
    root = copy_tree("x99-r9700")
    ((root / "class/drm/card3/device").resolve() / "numa_node").write_text("-1\n")
    inv = read_inventory(root)
    (finding,) = judge_locality(inv.gpu("0000:86:00.0"), inv)
    assert finding.severity == Severity.WARN
    assert finding.message == (
        "numa_node is -1 on a 2-socket host (no ACPI _PXM); socket 1 inferred from the "
        "package of local_cpulist 14-27,42-55"
    )


def test_numa_minus_one_single_socket_is_ok():
    inv = read_inventory(SYSFS_FIXTURES / "single-socket-numa-unknown")
    (finding,) = judge_locality(inv.gpus[0], inv)
    assert (
        finding.severity == Severity.OK
        and "socket 0 (package of local_cpulist 0-47)" in finding.message
    )


def test_requested_pairs():
    inv = read_inventory(SYSFS_FIXTURES / "x99-r9700")
    findings = judge_requested(
        [
            ("0000:05:00.0", "0000:86:00.0"),
            ("0000:05:00.0", "0000:09:00.0"),
            ("0000:05:00.0", "0000:42:00.0"),
        ],
        inv,
    )
    assert [(f.check_id, f.severity) for f in findings] == [
        ("numa.pair.cross_socket", Severity.FAIL),
        ("numa.pair", Severity.OK),
        ("numa.pair.missing", Severity.FAIL),
    ]
    assert "straddles sockets 0 and 1" in findings[0].message


@pytest.mark.parametrize(
    ("relpath", "needle"),
    [
        ("class/drm/card3/device/numa_node", "numa_node: not an integer: 'one\\n'"),
        ("class/drm/card3/device/local_cpulist", "local_cpulist: not a cpulist: 'one\\n'"),
        ("devices/system/node/node1/cpulist", "node1/cpulist: not a cpulist: 'one\\n'"),
        (
            "devices/system/cpu/cpu14/topology/physical_package_id",
            "cpu14/topology/physical_package_id: not an integer: 'one\\n'",
        ),
    ],
)
def test_unreadable_locality_files_are_unknown_not_a_quiet_ok(copy_tree, relpath, needle):
    root = copy_tree("x99-r9700")
    (root / relpath).write_text("one\n")
    inv = read_inventory(root)
    (finding,) = judge_locality(inv.gpu("0000:86:00.0"), inv)
    assert (finding.check_id, finding.severity) == ("numa.unknown", Severity.UNKNOWN)
    assert needle in finding.message


@pytest.mark.parametrize("value", ["99", "2"])
def test_numa_node_the_host_does_not_have_is_unknown(copy_tree, value):
    """Issue 13 (inventory gaps): `numa_node` 99 on a 2-node host was judged OK (the socket was
    then inferred from local_cpulist). A node id the host does not list is not a locality."""
    root = copy_tree("x99-r9700")
    gpu_dir = (root / "class/drm/card3/device").resolve()
    (gpu_dir / "numa_node").write_text(f"{value}\n")
    inv = read_inventory(root)
    gpu = inv.gpu("0000:86:00.0")
    assert gpu.numa_node == int(value)
    (finding,) = judge_locality(gpu, inv)
    assert (finding.check_id, finding.severity) == ("numa.unknown", Severity.UNKNOWN)
    assert finding.message.startswith(
        f"numa_node {value} is not a NUMA node of this host (nodes: 0, 1); socket ")
