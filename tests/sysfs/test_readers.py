"""Readers against fixture trees and broken copies of them."""

from __future__ import annotations

import os

from rocmseat.sysfs.aer import read_aer
from rocmseat.sysfs.amdgpu import read_amdgpu
from rocmseat.sysfs.drm import list_cards
from rocmseat.sysfs.kfd import read_kfd_topology
from rocmseat.sysfs.numa import read_cpu_topology, read_numa_nodes
from rocmseat.sysfs.pci import parent_chain, read_pci_device
from tests.sysfs.conftest import SYSFS_FIXTURES

X99 = SYSFS_FIXTURES / "x99-r9700"
GPU3 = X99 / "devices/pci0000:80/0000:80:03.0/0000:87:00.0/0000:88:00.0/0000:89:00.0"


def test_cards_by_numeric_suffix_skipping_render_and_connectors():
    cards = list_cards(SYSFS_FIXTURES / "mi300x-8gpu")
    assert [c.name for c in cards] == [f"card{n}" for n in (1, 9, 17, 25, 33, 41, 49, 57)]
    x99 = list_cards(X99)
    assert [c.name for c in x99] == ["card1", "card2", "card3", "card4"]
    assert x99[3].device_dir == GPU3.resolve()


def test_card_order_is_numeric_not_lexical(tmp_path):
    drm = tmp_path / "class/drm"
    drm.mkdir(parents=True)
    for n in (10, 9, 2):
        (tmp_path / f"dev{n}").mkdir()
        (drm / f"card{n}").mkdir()
        os.symlink(f"../../../dev{n}", drm / f"card{n}" / "device")
    (drm / "renderD128").mkdir()
    (drm / "card2-DP-1").mkdir()
    assert [c.index for c in list_cards(tmp_path)] == [2, 9, 10]


def test_card_without_device_link(copy_tree):
    root = copy_tree("x99-r9700")
    card = (root / "class/drm/card2").resolve()
    (card / "device").unlink()
    cards = list_cards(root)
    assert cards[1].device_dir is None
    assert "card2/device: missing" in cards[1].error


def test_pci_device_and_chain():
    dev = read_pci_device(GPU3.resolve())
    assert (dev.vendor_id, dev.device_id, dev.class_code) == (0x1002, 0x7551, 0x030000)
    assert (dev.link.current_speed_gts, dev.link.current_width) == (32.0, 16)
    assert dev.numa_node == 1 and dev.local_cpulist == "14-27,42-55"
    assert [p.name for p in parent_chain(GPU3.resolve())] == [
        "0000:88:00.0",
        "0000:87:00.0",
        "0000:80:03.0",
    ]


def test_old_kernel_spellings():
    root = SYSFS_FIXTURES / "single-socket-numa-unknown"
    usp = next(root.glob("devices/pci0000:00/0000:00:01.1/0000:03:00.0")).resolve()
    assert (usp / "current_link_speed").read_text() == "16 GT/s\n"
    dev = read_pci_device(usp)
    assert dev.link.current_speed_gts == 16.0
    assert dev.numa_node is None and dev.numa_node_raw == -1
    aer = read_aer(usp)
    assert aer.correctable.as_dict()["dev_cor_errs_bit[9]"] == 2
    assert aer.correctable.as_dict()["BadTLP"] == 0  # from "Bad TLP"


def test_aer_root_port_totals():
    degraded = SYSFS_FIXTURES / "x99-r9700-degraded" / "devices/pci0000:80/0000:80:02.0"
    aer = read_aer(degraded)
    assert aer.correctable.as_dict()["BadTLP"] == 6655
    assert dict(aer.rootport_totals) == {"cor": 6655, "nonfatal": 0, "fatal": 0}
    assert aer.flat()["correctable.BadTLP"] == 6655


def test_amdgpu():
    reading = read_amdgpu(GPU3)
    assert reading.driver == "amdgpu"
    assert reading.product_name == "AMD Radeon AI PRO R9700"
    assert [lv.active for lv in reading.pp_dpm_pcie] == [True, False]
    assert reading.mem_info_vram_total_bytes == 32 << 30
    mi300 = (SYSFS_FIXTURES / "mi300x-8gpu/class/drm/card9/device").resolve()
    reading = read_amdgpu(mi300)
    assert reading.driver == "amdgpu" and reading.product_name  # a real GPU directory ...
    assert not (mi300 / "pp_dpm_pcie").exists()
    assert reading.pp_dpm_pcie is None and reading.errors == ()  # ... absent is None, no error


def test_unreadable_and_garbage_become_errors(copy_tree):
    root = copy_tree("x99-r9700")
    gpu = (root / "class/drm/card4/device").resolve()
    (gpu / "current_link_speed").write_text("warp 9\n")
    (gpu / "pp_dpm_pcie").write_text("garbage\n")
    dev = read_pci_device(gpu)
    assert dev.link.current_speed_gts is None
    assert any("current_link_speed: not a PCIe link speed: 'warp 9\\n'" in e for e in dev.errors)
    assert read_amdgpu(gpu).pp_dpm_pcie is None
    assert any("pp_dpm_pcie:1" in e for e in read_amdgpu(gpu).errors)


def test_numa_and_cpus():
    nodes = read_numa_nodes(X99)
    assert [(n.node_id, n.cpulist, n.distance) for n in nodes] == [
        (0, "0-13,28-41", (10, 21)),
        (1, "14-27,42-55", (21, 10)),
    ]
    packages = read_cpu_topology(X99).package_of()
    assert packages[0] == 0 and packages[14] == 1 and packages[28] == 0 and len(packages) == 56


def test_kfd_gfx_by_address():
    assert read_kfd_topology(X99).as_dict()["0000:89:00.0"] == "gfx1201"
    assert read_kfd_topology(SYSFS_FIXTURES / "mi300x-8gpu").as_dict()["0000:df:00.0"] == "gfx942"
    assert read_kfd_topology(SYSFS_FIXTURES / "no-amdgpu").as_dict() == {}
