"""Issue 17 on an MI300X-like tree: the firmware's PCIe counters (gpu_metrics v1.5) and the RAS
counts join the error window; growth fails, whoever looked in between."""

from __future__ import annotations

import pytest

from rocmseat.findings import Severity
from rocmseat.preflight.run import PreflightOptions, preflight_report
from tests.sysfs.conftest import SYSFS_FIXTURES, fixture_builder

GPU = "0000:0c:00.0"


@pytest.fixture(scope="module")
def builder():
    return fixture_builder()


def _gpu_dir(root):
    return (root / "bus/pci/devices" / GPU).resolve()


def _bad(report):
    return sorted((f.check_id, f.severity, f.data.get("delta")) for f in report.findings
                  if f.severity != Severity.OK)


def test_clean_mi300x_has_clean_ras_and_firmware_counters(tmp_path):
    report = preflight_report(SYSFS_FIXTURES / "mi300x-8gpu", tmp_path)
    assert _bad(report) == []
    (ras,) = [f for f in report.findings if f.check_id == "ras.clean" and f.subject == GPU]
    # the driver's own bad-page threshold: the default -1 on MP0 13.0.6 (16 MiB reserved: 128)
    assert ras.message.endswith(
        "in 8 blocks; 0 retired VRAM pages (threshold 128: bad_page_threshold -1 (the default: "
        "the module parameter is not exposed): 16 MiB of reserved VRAM on MP0 13.0.6 (gfx942's))"
    )


def test_firmware_pcie_counters_and_ras_ue_growing_fail(copy_tree, tmp_path, builder):
    root = copy_tree("mi300x-8gpu")
    state = tmp_path / "state"

    def run(stamp):
        return preflight_report(root, state, PreflightOptions(now=lambda: stamp))

    assert _bad(run("2026-12-01T00:00:00Z")) == []
    (_gpu_dir(root) / "gpu_metrics").write_bytes(
        builder.mi300x_metrics(replay=150, rollover=2, recovery=40, nak_sent=1, nak_received=0)
    )
    (_gpu_dir(root) / "ras/umc_err_count").write_text("ue: 1\nce: 3\nde: 0\n")
    report = run("2026-12-01T01:00:00Z")
    assert _bad(report) == [
        ("aer.fw_l0_recovery", Severity.WARN, 40),
        ("aer.fw_nak_sent", Severity.WARN, 1),
        ("aer.fw_replay", Severity.FAIL, 150),
        ("aer.fw_replay_rollover", Severity.WARN, 2),
        ("ras.ce", Severity.WARN, 3),
        ("ras.ue", Severity.FAIL, 1),
    ]
    (replay,) = [f for f in report.findings if f.check_id == "aer.fw_replay"]
    assert replay.message == (
        f"GPU {GPU}: +150 PCIe replays (gpu_metrics) since boot (no reading of this boot is "
        "24 h old yet)"
    )
    (ue,) = [f for f in report.findings if f.check_id == "ras.ue"]
    assert "+1 uncorrectable umc errors" in ue.message
    # a look by hand an hour later: the window has not moved, still failing
    assert ("ras.ue", Severity.FAIL, 1) in _bad(run("2026-12-01T02:00:00Z"))
    # two days later, nothing new: clean
    assert _bad(run("2026-12-03T02:00:00Z")) == []
    (_gpu_dir(root) / "ras/umc_err_count").write_text("ue: 2\nce: 3\nde: 0\n")
    report = run("2026-12-03T03:00:00Z")
    (ue,) = [f for f in report.findings if f.check_id == "ras.ue"]
    assert ue.message.endswith(
        "+1 uncorrectable umc errors in the last 24 h (since 2026-12-02 03:00 UTC); 2 since "
        "the driver loaded"
    )


def test_retired_pages_above_the_threshold_fail(copy_tree, tmp_path, builder):
    root = copy_tree("mi300x-8gpu")
    pages = builder.mi300x_ras(bad_pages=5)["ras/gpu_vram_bad_pages"]
    (_gpu_dir(root) / "ras/gpu_vram_bad_pages").write_text(pages)
    profile = tmp_path / "p.toml"
    profile.write_text('name = "p"\n[thresholds]\nras_bad_pages_fail = 4\n')
    report = preflight_report(root, tmp_path / "s",
                              PreflightOptions(families={"ras"}, profile=profile))
    assert _bad(report) == [("ras.bad_pages", Severity.FAIL, None)]
    report = preflight_report(root, tmp_path / "s2", PreflightOptions(families={"ras"}))
    assert _bad(report) == []  # under the driver's threshold of 128


@pytest.mark.parametrize(
    ("name", "text", "check"),
    [
        ("umc_err_count", "Query currently inaccessible\n", "ras.unknown"),
        ("umc_err_count", "ue: x\nce: 0\n", "ras.unknown"),
        ("umc_err_count", "ce: 0\n", "ras.unknown"),
        ("features", "garbage\n", "ras.unknown"),
        ("gpu_vram_bad_pages", "0x1 : 0x1000 : Q\n", "ras.unknown"),
    ],
)
def test_unreadable_ras_is_unknown(copy_tree, tmp_path, name, text, check):
    root = copy_tree("mi300x-8gpu")
    (_gpu_dir(root) / "ras" / name).write_text(text)
    report = preflight_report(root, tmp_path, PreflightOptions(families={"ras"}))
    assert _bad(report) == [(check, Severity.UNKNOWN, None)]


def test_radeon_has_no_ras_finding(tmp_path):
    report = preflight_report(SYSFS_FIXTURES / "x99-r9700", tmp_path,
                              PreflightOptions(families={"ras"}))
    assert report.findings == ()


@pytest.mark.parametrize("table", ["v1_3-truncated.bin", "v1_9-future.bin",
                                   "v1_3-size-mismatch.bin"])
def test_an_undecodable_gpu_metrics_is_unknown_not_clean(copy_tree, tmp_path, table):
    root = copy_tree("mi300x-8gpu")
    data = (SYSFS_FIXTURES.parent / "gpu_metrics" / table).read_bytes()
    (_gpu_dir(root) / "gpu_metrics").write_bytes(data)
    report = preflight_report(root, tmp_path, PreflightOptions(families={"aer"}))
    (unknown,) = [f for f in report.findings if f.severity != Severity.OK]
    assert (unknown.check_id, unknown.severity) == ("aer.unknown", Severity.UNKNOWN)
    assert "gpu_metrics" in unknown.message
