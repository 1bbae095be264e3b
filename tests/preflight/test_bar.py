"""Issue 24: large BAR, the precondition ROCm P2P needs. The VRAM BAR's size (`resource`, the
64-bit prefetchable BAR) against mem_info_vram_total; a small BAR warns naming the BIOS settings,
and the hip family's failure cites it."""

from __future__ import annotations

import pytest

from rocmseat.errors import ParseError
from rocmseat.findings import Finding, Severity
from rocmseat.preflight.bar import cite_small_bar
from rocmseat.preflight.run import PreflightOptions, preflight_report
from rocmseat.sysfs.pci import parse_resource, vram_bar
from tests.sysfs.conftest import SYSFS_FIXTURES, fixture_builder

GPU = "0000:0c:00.0"


def _resource(root):
    return (root / "bus/pci/devices" / GPU).resolve() / "resource"


def test_large_bar_is_ok(tmp_path):
    report = preflight_report(SYSFS_FIXTURES / "mi300x-8gpu-rocm7", tmp_path,
                              PreflightOptions(families={"pcie"}))
    oks = [f for f in report.findings if f.check_id == "pcie.bar.ok"]
    assert len(oks) == 8
    assert oks[0].message == "VRAM BAR0 256 GiB covers 196,592 MiB of VRAM (large BAR)"


def test_a_256_mib_bar_warns_naming_the_bios_settings(copy_tree, tmp_path):
    root = copy_tree("mi300x-8gpu-rocm7")
    _resource(root).write_text(fixture_builder().gpu_bars(256 << 20, base=0xE0000000))
    report = preflight_report(root, tmp_path, PreflightOptions(families={"pcie"}))
    (small,) = [f for f in report.findings if f.check_id == "pcie.bar.small"]
    assert (small.severity, small.subject) == (Severity.WARN, GPU)
    assert small.message.startswith(
        f"GPU {GPU}: VRAM BAR0 is 256 MiB for 196,592 MiB of VRAM (small BAR): peer "
        "access and HIP IPC over PCIe will be disabled or staged")
    assert "Above 4G decoding" in small.hint and "Resizable BAR" in small.hint


def test_the_hip_failure_cites_the_small_bar():
    findings = [
        Finding("pcie.bar.small", Severity.WARN, GPU, "small"),
        Finding("hip.ipc", Severity.FAIL, f"{GPU}+0000:22:00.0", "hipIpcOpenMemHandle failed",
                "check the IPC setup"),
        Finding("hip.bandwidth", Severity.OK, f"{GPU}+0000:22:00.0", "fine"),
        Finding("hip.ipc", Severity.FAIL, "0000:38:00.0+0000:5c:00.0", "another pair"),
    ]
    cited = cite_small_bar(findings, [GPU])
    assert cited[1].message.endswith(
        f"; GPU {GPU} has a small VRAM BAR (pcie.bar.small): ROCm disables peer access over "
        "PCIe without large BAR")
    assert cited[1].hint.startswith("enable Above 4G decoding and Resizable BAR")
    assert cited[2] == findings[2] and cited[0] == findings[0]
    assert cited[3] == findings[3]  # a pair without a small-BAR GPU: nothing cited
    assert cite_small_bar(findings, []) == findings  # no small BAR seen: nothing cited


@pytest.mark.parametrize("text", ["", "0x1 0x2\n" * 13, "garbage\n" * 13,
                                  "0x0000000000000010 0x0000000000000001 0x0\n" * 13])
def test_a_broken_resource_file_is_unknown(copy_tree, tmp_path, text):
    root = copy_tree("mi300x-8gpu-rocm7")
    _resource(root).write_text(text)
    report = preflight_report(root, tmp_path, PreflightOptions(families={"pcie"}))
    (unknown,) = [f for f in report.findings if f.check_id.startswith("pcie.bar")
                  and f.subject == GPU]
    assert (unknown.check_id, unknown.severity) == ("pcie.bar.unknown", Severity.UNKNOWN)


def test_parse_resource_picks_the_vram_aperture():
    bars = parse_resource(fixture_builder().gpu_bars(32 << 30))
    assert [b.index for b in bars] == [0, 2, 5]
    assert vram_bar(bars).size_bytes == 32 << 30
    with pytest.raises(ParseError):
        parse_resource("0x1 0x0 0x0\n" * 13)
