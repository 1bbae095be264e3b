"""Inventory from fixture trees: GPUs keyed by PCI address, paths, effective links, sockets."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from rocmseat.node.inventory import Hop, read_inventory
from rocmseat.node.link import effective_link, physical_links
from tests.sysfs.conftest import SYSFS_FIXTURES


def test_x99_inventory_interface():
    inv = read_inventory(SYSFS_FIXTURES / "x99-r9700")
    assert [g.pci_address for g in inv.gpus] == [
        "0000:05:00.0",
        "0000:09:00.0",
        "0000:86:00.0",
        "0000:89:00.0",
    ]
    gpu = inv.gpus[1]
    assert (gpu.card, gpu.gfx_target, gpu.numa_node, gpu.socket) == ("card2", "gfx1201", 0, 0)
    assert gpu.local_cpulist == "0-13,28-41"
    assert gpu.product_name == "AMD Radeon AI PRO R9700"
    assert [h.role for h in gpu.path] == [
        "endpoint",
        "amd-switch-port",
        "amd-switch-port",
        "root-port",
    ]
    assert inv.sockets == (0, 1) and inv.multi_socket
    assert [n.node_id for n in inv.numa_nodes] == [0, 1]


def test_effective_link_skips_amd_internal_hops():
    inv = read_inventory(SYSFS_FIXTURES / "x99-r9700")
    gpu = inv.gpu("0000:09:00.0")
    assert (gpu.endpoint.link.current_speed_gts, gpu.endpoint.link.current_width) == (32.0, 16)
    eff = effective_link(gpu)
    assert (eff.speed_gts, eff.width, eff.limited_at) == (8.0, 8, "0000:00:03.0")
    (link,) = physical_links(gpu)
    assert (link.upstream.address, link.downstream.address) == ("0000:00:03.0", "0000:07:00.0")
    assert (link.capable_speed_gts, link.capable_width) == (8.0, 8)


def test_degraded_gen1():
    inv = read_inventory(SYSFS_FIXTURES / "x99-r9700-degraded")
    eff = effective_link(inv.gpu("0000:89:00.0"))
    assert (eff.speed_gts, eff.width, eff.capable_speed_gts) == (2.5, 16, 8.0)


def test_mi300x_cards_keyed_by_address():
    inv = read_inventory(SYSFS_FIXTURES / "mi300x-8gpu")
    assert [g.card for g in inv.gpus] == [f"card{n}" for n in (1, 9, 17, 25, 33, 41, 49, 57)]
    assert {g.gfx_target for g in inv.gpus} == {"gfx942"}
    assert [g.socket for g in inv.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(g.amdgpu.pp_dpm_pcie is None for g in inv.gpus)
    # EPYC root ports are vendor 0x1022, not 0x1002: they count as real hops
    assert effective_link(inv.gpus[0]).limited_at == "0000:09:01.1"


def test_single_socket_numa_unknown_socket_from_local_cpulist():
    inv = read_inventory(SYSFS_FIXTURES / "single-socket-numa-unknown")
    for gpu in inv.gpus:
        assert gpu.numa_node is None and gpu.numa_node_raw == -1
        assert gpu.socket == 0
        assert gpu.socket_source == "package of local_cpulist 0-47"
    assert inv.gpus[1].product_name is None  # an empty product_name file


def test_no_amdgpu():
    inv = read_inventory(SYSFS_FIXTURES / "no-amdgpu")
    assert inv.gpus == ()
    assert inv.other_cards == ("card0 0000:03:00.0 1a03:2000 ast",)


def test_numa_minus_one_on_two_sockets(copy_tree):
    root = copy_tree("x99-r9700")
    gpu_dir = (root / "class/drm/card3/device").resolve()
    (gpu_dir / "numa_node").write_text("-1\n")
    gpu2 = (root / "class/drm/card4/device").resolve()
    (gpu2 / "numa_node").write_text("-1\n")
    (gpu2 / "local_cpulist").write_text("0-55\n")
    inv = read_inventory(root)
    a, b = inv.gpu("0000:86:00.0"), inv.gpu("0000:89:00.0")
    assert (a.numa_node, a.socket, a.socket_source) == (
        None,
        1,
        "package of local_cpulist 14-27,42-55",
    )
    assert b.socket is None and b.socket_source == "local_cpulist 0-55 spans packages 0,1"


def test_card_without_device_link_is_a_problem_not_a_crash(copy_tree):
    root = copy_tree("x99-r9700")
    ((root / "class/drm/card2").resolve() / "device").unlink()
    inv = read_inventory(root)
    assert len(inv.gpus) == 3
    assert len(inv.problems) == 1 and inv.problems[0].startswith("card2: ")


def test_gpus_keyed_by_address_not_card_index(copy_tree):
    # renumber the DRM cards against address order (card57 first): the inventory still sorts
    # and keys by PCI address, and each GPU keeps the card that really points at it
    root = copy_tree("x99-r9700")
    drm = root / "class/drm"
    for old, new in (("card1", "card57"), ("card4", "card0")):
        (drm / old).rename(drm / new)
    inv = read_inventory(root)
    assert [g.pci_address for g in inv.gpus] == [
        "0000:05:00.0",
        "0000:09:00.0",
        "0000:86:00.0",
        "0000:89:00.0",
    ]
    assert [g.card for g in inv.gpus] == ["card57", "card2", "card3", "card0"]
    assert inv.gpu("0000:89:00.0").socket == 1


def _hop(address, role, vendor, current, maximum):
    from rocmseat.sysfs.aer import AerReading
    from rocmseat.sysfs.pci import LinkState

    link = LinkState(current[0], current[1], maximum[0], maximum[1])
    return Hop(address, role, vendor, 0x1234, link, AerReading(address, None, None, None, ()))


def test_effective_link_through_a_platform_switch():
    """GPU -> AMD internal ports -> a Broadcom/PLX switch -> root port: two physical links,
    the slower one (root port <-> switch upstream port, Gen3) limits the path; the AMD hops'
    own 32 GT/s never counts."""
    from rocmseat.preflight.link import judge_link

    base = read_inventory(SYSFS_FIXTURES / "x99-r9700").gpus[0]
    path = (
        _hop("0000:0a:00.0", "endpoint", 0x1002, (32.0, 16), (32.0, 16)),
        _hop("0000:09:00.0", "amd-switch-port", 0x1002, (32.0, 16), (32.0, 16)),
        _hop("0000:08:00.0", "amd-switch-port", 0x1002, (16.0, 16), (32.0, 16)),
        _hop("0000:07:08.0", "bridge", 0x10B5, (16.0, 16), (16.0, 16)),  # PLX downstream port
        _hop("0000:06:00.0", "bridge", 0x10B5, (8.0, 16), (16.0, 16)),  # PLX upstream port
        _hop("0000:00:01.1", "root-port", 0x1022, (8.0, 16), (16.0, 16)),
    )
    gpu = replace(base, pci_address="0000:0a:00.0", path=path)
    links = physical_links(gpu)
    # the switch's own internal bus (07:08.0 <-> 06:00.0) is no link: 06:00.0's registers
    # describe the link above it, to the root port
    assert [(x.upstream.address, x.downstream.address) for x in links] == [
        ("0000:07:08.0", "0000:08:00.0"),
        ("0000:00:01.1", "0000:06:00.0"),
    ]
    eff = effective_link(gpu)
    assert (eff.speed_gts, eff.width, eff.limited_at) == (8.0, 16, "0000:00:01.1")
    assert (eff.capable_speed_gts, eff.capable_width) == (16.0, 16)
    (finding,) = judge_link(gpu)
    assert finding.check_id == "pcie.link.degraded"
    assert finding.message.startswith(
        "root port 0000:00:01.1 trained 8 GT/s x16; both ends support 16 GT/s x16"
    )


GPU3_IN_TREE = "devices/pci0000:80/0000:80:03.0/0000:87:00.0/0000:88:00.0/0000:89:00.0"


def _break(path, how):
    """Make one attribute file unreadable the ways issue 11's hostile run found."""
    import os

    if how in ("directory", "dangling", "fifo"):
        path.unlink()
    if how == "garbage":
        path.write_text("garbage\n")
    elif how == "empty":
        path.write_text("")
    elif how == "directory":
        path.mkdir()
    elif how == "dangling":
        path.symlink_to(path.parent / "no-such-file")
    elif how == "fifo":
        os.mkfifo(path)


# (a FIFO is covered by bounded child processes: tests/sysfs/test_read_attr.py and the hostile
# battery; here, in-process, a regression would hang the suite)
BROKEN = ["garbage", "empty", "directory", "dangling"]


@pytest.mark.parametrize("name", ["vendor", "device", "class"])
@pytest.mark.parametrize("how", BROKEN)
def test_gpu_with_unreadable_identity_is_kept(copy_tree, name, how):
    # Before the fix a garbage `vendor` made 89:00.0 "not an AMD GPU": the inventory said 3 GPUs
    # and the degraded link was never judged. The card is bound to amdgpu and listed by KFD: it
    # stays a GPU, with the reason.
    root = copy_tree("x99-r9700-degraded")
    attr = root / GPU3_IN_TREE / name
    _break(attr, how)
    inv = read_inventory(root)
    assert [g.pci_address for g in inv.gpus][-1] == "0000:89:00.0"
    gpu = inv.gpu("0000:89:00.0")
    assert any(e.startswith(str(attr)) for e in gpu.identity_errors), gpu.identity_errors
    assert effective_link(gpu).speed_gts == 2.5


def test_unidentifiable_card_is_a_problem_not_another_card(copy_tree):
    # no vendor, no driver link, not in KFD: rocmseat cannot tell what card4 is; it says so
    root = copy_tree("x99-r9700")
    gpu_dir = root / GPU3_IN_TREE
    (gpu_dir / "vendor").write_text("garbage\n")
    (gpu_dir / "driver").unlink()
    props = root / "class/kfd/kfd/topology/nodes/5/properties"
    props.write_text(props.read_text().replace("simd_count 128", "simd_count 0"))
    inv = read_inventory(root)
    assert len(inv.gpus) == 3
    assert inv.other_cards == ()
    (problem,) = inv.problems
    assert problem.startswith("card4: cannot tell whether 0000:89:00.0 is an AMD GPU: ")
    assert f"{gpu_dir}/vendor: not a 0x-prefixed hex id" in problem


def test_a_gpu_kfd_lists_without_a_drm_card_is_named(copy_tree, tmp_path, rocmseat_cli):
    """Issue 13 (inventory gaps): the DRM card of 0000:86:00.0 is gone while KFD still lists the
    GPU. The run counted 3 GPUs and said OK; it must name the GPU it cannot check."""
    root = copy_tree("x99-r9700")
    (root / "class/drm/card3").unlink()
    inventory = read_inventory(root)
    assert [g.pci_address for g in inventory.gpus] == ["0000:05:00.0", "0000:09:00.0",
                                                       "0000:89:00.0"]
    assert inventory.kfd_only == ("0000:86:00.0",)
    result = rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir",
                          str(tmp_path / "s"), "--format", "npd")
    assert (result.exit_code, result.stdout) == (2, "UNKNOWN inventory.kfd_only 0000:86:00.0\n")
    result = rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir",
                          str(tmp_path / "s"), "--json")
    (finding,) = [f for f in json.loads(result.stdout)["findings"]
                  if f["check_id"] == "inventory.kfd_only"]
    assert finding["severity"] == "unknown" and finding["message"] == (
        "GPU 0000:86:00.0 is listed by KFD (class/kfd topology) but has no DRM card: it cannot "
        "be checked")
    # a replica's own pair check is not held up by another pair's GPU
    result = rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir",
                          str(tmp_path / "s"), "--pair", "05:00.0,09:00.0", "--format", "npd")
    assert result.exit_code == 0


def test_an_unreadable_kfd_topology_is_unknown(copy_tree, tmp_path, rocmseat_cli):
    root = copy_tree("x99-r9700")
    (path,) = [p for p in (root / "class/kfd/kfd/topology/nodes").glob("*/properties")
               if "location_id 34304" in p.read_text()]  # 86:00.0 = (0x86 << 8) | 0
    path.write_text("garbage\n")
    result = rocmseat_cli("preflight", "--sysfs-root", str(root), "--state-dir",
                          str(tmp_path / "s"), "--format", "npd")
    assert (result.exit_code, result.stdout) == (2, "UNKNOWN inventory.kfd node\n")
