"""Issue 24: the driver as it is on the nodes people run. One test per row of the issue's table
(each failed on the code before the change: the verdict it gave is in the test's docstring), and
the MI300X-like 8-GPU tree with format 1.9 tables (tests/fixtures/sysfs/mi300x-8gpu-rocm7)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from rocmseat.findings import Severity, exit_code_for
from rocmseat.preflight.run import PreflightOptions, preflight_report
from rocmseat.sysfs import attrs as attrs_module
from rocmseat.sysfs.fs import Unreadable
from tests.sysfs.conftest import SYSFS_FIXTURES, fixture_builder

ROCM7 = "mi300x-8gpu-rocm7"
# amdgpu_pm.c getters behind amdgpu_pm_get_access_if_active() (rocmseat.sysfs.amdgpu.PM_GETTERS,
# spelled out so this file also runs against the code before issue 24)
PM_GETTERS = ("pp_dpm_pcie", "gpu_metrics", "gpu_busy_percent")
MI_GPU = "0000:0c:00.0"


@pytest.fixture(scope="module")
def builder():
    return fixture_builder()


def _dev(root: Path, address: str) -> Path:
    return (root / "bus/pci/devices" / address).resolve()


def _bad(report):
    return sorted((f.check_id, f.severity, f.subject) for f in report.findings
                  if f.severity != Severity.OK)


def _ids(report, severity=None):
    return sorted({f.check_id for f in report.findings
                   if severity is None or f.severity == severity})


# --- row 1: gpu_metrics format 1.9 -------------------------------------------------------------
def test_rocm7_mi300x_node_with_format_1_9_is_clean_exit_0(tmp_path):
    """Before: `aer.unknown ... gpu_metrics v1.9 is a layout rocmseat does not know` on every
    GPU, exit 2 (checked against main's code on this tree)."""
    report = preflight_report(SYSFS_FIXTURES / ROCM7, tmp_path)
    assert len(report.checked) == 8
    assert _bad(report) == []
    assert exit_code_for(report.findings) == 0
    assert sum(f.check_id == "aer.clean" for f in report.findings) == 8
    (link,) = [f for f in report.findings if f.check_id == "pcie.link.ok" and f.subject == MI_GPU]
    assert link.data["firmware_sources"] == ["gpu_metrics v1.9"]


def test_rocm7_replays_growing_fail(copy_tree, tmp_path, builder):
    root = copy_tree(ROCM7)
    state = tmp_path / "state"
    assert _bad(preflight_report(root, state,
                                 PreflightOptions(now=lambda: "2026-12-01T00:00:00Z"))) == []
    (_dev(root, MI_GPU) / "gpu_metrics").write_bytes(
        builder.mi300x_metrics_v19(replay=500, recovery=3, nak_received=120))
    report = preflight_report(root, state, PreflightOptions(now=lambda: "2026-12-01T01:00:00Z"))
    assert _bad(report) == [
        ("aer.fw_l0_recovery", Severity.WARN, MI_GPU),
        ("aer.fw_nak_received", Severity.FAIL, MI_GPU),
        ("aer.fw_replay", Severity.FAIL, MI_GPU),
    ]
    assert exit_code_for(report.findings) == 1


# --- row 2: the driver's bad-page threshold ------------------------------------------------------
def test_200_retired_pages_with_module_defaults_fail_naming_128(copy_tree, tmp_path, builder):
    """Before: `ras.clean ... 200 retired VRAM pages (threshold 1,965)`, exit 0."""
    root = copy_tree(ROCM7)
    pages = builder.mi300x_ras(bad_pages=200)["ras/gpu_vram_bad_pages"]
    (_dev(root, MI_GPU) / "ras/gpu_vram_bad_pages").write_text(pages)
    report = preflight_report(root, tmp_path)
    assert _bad(report) == [("ras.bad_pages", Severity.FAIL, MI_GPU)]
    (bad,) = [f for f in report.findings if f.check_id == "ras.bad_pages"]
    assert bad.message.startswith(
        f"GPU {MI_GPU}: RAS records:200 exceed threshold:128 (200 retired VRAM pages")
    assert "bad_page_threshold -1: 16 MiB of reserved VRAM on MP0 13.0.6 (ip_discovery)" in (
        bad.message)
    assert "consult AMD Service Action Guide (SAG)" in bad.hint
    assert bad.data["threshold"] == 128
    assert exit_code_for(report.findings) == 1


@pytest.mark.parametrize(("param", "mp0", "pages", "verdict", "words"), [
    ("-1", "6", 127, "ras.clean", "threshold 128"),
    ("-1", "6", 128, "ras.bad_pages", "exceed threshold:128"),
    ("-1", "14", 200, "ras.clean", "threshold 256"),
    ("-1", "0", 200, "ras.clean", "MP0 13.0.0 reserves no VRAM"),
    ("-2", "6", 1964, "ras.clean", "threshold 1,965"),
    ("-2", "6", 1965, "ras.bad_pages", "VRAM / 100 MiB"),
    ("10", "6", 10, "ras.bad_pages", "user-defined"),
    ("0", "6", 2000, "ras.clean", "the driver does not retire bad pages"),
])
def test_bad_page_threshold_module_parameter(copy_tree, tmp_path, builder, param, mp0, pages,
                                             verdict, words):
    root = copy_tree(ROCM7)
    (root / "module/amdgpu/parameters/bad_page_threshold").write_text(f"{param}\n")
    for address in (MI_GPU,):
        dev = _dev(root, address)
        (dev / "ip_discovery/die/0/255/0/revision").write_text(f"{mp0}\n")
        (dev / "ras/gpu_vram_bad_pages").write_text(
            builder.mi300x_ras(bad_pages=pages)["ras/gpu_vram_bad_pages"])
    report = preflight_report(root, tmp_path,
                              PreflightOptions(families={"ras"}, pairs=[(MI_GPU, MI_GPU)]))
    (finding,) = [f for f in report.findings if f.subject == MI_GPU]
    assert finding.check_id == verdict
    assert words in finding.message


def test_an_unreadable_module_parameter_is_unknown_not_a_guess(copy_tree, tmp_path):
    root = copy_tree(ROCM7)
    (root / "module/amdgpu/parameters/bad_page_threshold").write_text("lots\n")
    report = preflight_report(root, tmp_path,
                              PreflightOptions(families={"ras"}, pairs=[(MI_GPU, MI_GPU)]))
    (finding,) = [f for f in report.findings if f.subject == MI_GPU]
    assert (finding.check_id, finding.severity) == ("ras.unknown", Severity.UNKNOWN)
    assert "bad_page_threshold" in finding.message


# --- row 3: an Instinct without ras/ -------------------------------------------------------------
def test_mi300x_without_ras_is_unknown(copy_tree, tmp_path):
    """Before: no RAS finding at all, exit 0 (looked like a Radeon)."""
    import shutil

    root = copy_tree(ROCM7)
    shutil.rmtree(_dev(root, MI_GPU) / "ras")
    report = preflight_report(root, tmp_path, PreflightOptions(families={"ras"}))
    assert _bad(report) == [("ras.unknown", Severity.UNKNOWN, MI_GPU)]
    (unknown,) = [f for f in report.findings if f.check_id == "ras.unknown"]
    assert "RAS disabled or failed to initialise: memory errors are not counted" in (
        unknown.message)
    assert exit_code_for(report.findings) == 2


# --- row 8: a RAS count that vanishes, a feature mask without count files ----------------------
def test_feature_mask_without_count_files_is_unknown(copy_tree, tmp_path):
    """Before: `ras.clean ... in 0 blocks`, exit 0."""
    root = copy_tree(ROCM7)
    for count in (_dev(root, MI_GPU) / "ras").glob("*_err_count"):
        count.unlink()
    report = preflight_report(root, tmp_path, PreflightOptions(families={"ras"}))
    assert _bad(report) == [("ras.unknown", Severity.UNKNOWN, MI_GPU)]


def test_a_count_that_vanishes_after_growing_is_unknown(copy_tree, tmp_path):
    """Before: the grown count's file gone -> exit 0 (the growth silently dropped)."""
    root = copy_tree(ROCM7)
    state = tmp_path / "state"
    umc = _dev(root, MI_GPU) / "ras/umc_err_count"
    umc.write_text("ue: 0\nce: 7\nde: 0\n")
    preflight_report(root, state,
                     PreflightOptions(families={"ras"}, now=lambda: "2026-12-01T00:00:00Z"))
    umc.unlink()
    report = preflight_report(root, state, PreflightOptions(families={"ras"},
                              now=lambda: "2026-12-02T06:00:00Z"))
    assert _bad(report) == [("ras.unknown", Severity.UNKNOWN, MI_GPU)]
    (unknown,) = [f for f in report.findings if f.check_id == "ras.unknown"]
    assert "ras.umc.ce counted 7 and is gone now" in unknown.message


def test_a_firmware_counter_that_vanishes_after_growing_is_unknown(copy_tree, tmp_path, builder):
    root = copy_tree(ROCM7)
    state = tmp_path / "state"
    table = _dev(root, MI_GPU) / "gpu_metrics"
    table.write_bytes(builder.mi300x_metrics_v19(replay=40))
    preflight_report(root, state,
                     PreflightOptions(families={"aer"}, now=lambda: "2026-12-01T00:00:00Z"))
    values = {"pcie_link_width": 16, "pcie_link_speed": 320}  # replay left all-ones
    table.write_bytes(builder.attr_table(values))
    options = PreflightOptions(families={"aer"}, now=lambda: "2026-12-02T06:00:00Z")
    report = preflight_report(root, state, options)
    assert ("aer.unknown", Severity.UNKNOWN, MI_GPU) in _bad(report)


# --- row 4: a GPU in runtime suspend -------------------------------------------------------------
def _eperm_pm_getters(monkeypatch):
    """What amdgpu_pm_get_access_if_active() answers on a runtime-suspended GPU: EPERM."""
    real_text, real_bytes = attrs_module.read_attr, attrs_module.read_attr_bytes

    def eperm(path):
        try:
            return Unreadable(str(path), "Operation not permitted", errno.EPERM)
        except TypeError:  # the code before issue 24 kept no errno: the same read, unmarked
            return Unreadable(str(path), "Operation not permitted")

    def denied(real):
        def read(path):
            if str(path).rsplit("/", 1)[-1] in PM_GETTERS:
                return eperm(path)
            return real(path)
        return read

    monkeypatch.setattr(attrs_module, "read_attr", denied(real_text))
    monkeypatch.setattr(attrs_module, "read_attr_bytes", denied(real_bytes))


def test_an_idle_r9700_answering_eperm_is_asleep_not_unknown(monkeypatch, tmp_path):
    """Before: `pcie.dpm.unknown` "Operation not permitted", hint "run as root", exit 2."""
    _eperm_pm_getters(monkeypatch)
    report = preflight_report(SYSFS_FIXTURES / "x99-r9700", tmp_path)
    assert _bad(report) == [] and exit_code_for(report.findings) == 0
    asleep = [f for f in report.findings if f.check_id == "pcie.dpm.asleep"]
    assert len(asleep) == 4
    assert all(f.severity == Severity.OK and "run as root" not in f.message + f.hint
               for f in report.findings)
    assert asleep[0].message.startswith(
        "GPU in runtime suspend: firmware not read (it wakes when a client opens it)")
    # the walked hierarchy still judges the link, the AER files the errors
    assert sum(f.check_id == "pcie.link.ok" for f in report.findings) == 4
    assert sum(f.check_id == "aer.clean" for f in report.findings) == 4


def test_a_suspended_gpus_pm_getters_are_never_read(copy_tree, tmp_path, monkeypatch):
    root = copy_tree("x99-r9700-degraded")
    for status in root.glob("devices/**/0000:*/power/runtime_status"):
        status.write_text("suspended\n")
    for dev in ("0000:05:00.0", "0000:09:00.0", "0000:86:00.0", "0000:89:00.0"):
        (_dev(root, dev) / "power").mkdir(exist_ok=True)
        (_dev(root, dev) / "power/runtime_status").write_text("suspended\n")
    read: list[str] = []
    real = attrs_module.read_attr

    def spy(path):
        read.append(str(path).rsplit("/", 1)[-1])
        return real(path)

    monkeypatch.setattr(attrs_module, "read_attr", spy)
    report = preflight_report(root, tmp_path)
    assert not set(read) & set(PM_GETTERS)  # never woken by a read
    # the degraded node still fails: the walked link and the root port's AER judge it
    assert ("pcie.link.degraded", Severity.FAIL, "0000:89:00.0") in _bad(report)
    assert ("aer.badtlp", Severity.FAIL, "0000:80:02.0") in _bad(report)
    assert exit_code_for(report.findings) == 1


def test_a_radeon_table_unreadable_is_no_aer_unknown(copy_tree, tmp_path):
    """gpu_metrics of a format-1.3 class GPU carries no AER data: unreadable, it hides none."""
    root = copy_tree("vm-rdna4")
    table = _dev(root, "0000:00:05.0") / "gpu_metrics"
    table.write_bytes(table.read_bytes()[:64])
    report = preflight_report(root, tmp_path, PreflightOptions(families={"aer"}))
    assert "aer.unknown" not in _ids(report)


# --- row 5: smu_v14_0_2 clamps gpu_metrics' speed above Gen4 -------------------------------------
def test_rdna4_gen5_in_a_vm_takes_pp_dpm_pcies_figure(copy_tree, tmp_path, builder):
    """Before: "the firmware contradicts itself" -> `pcie.link.unknown`, exit 2."""
    root = copy_tree("vm-rdna4")
    dev = _dev(root, "0000:00:05.0")
    (dev / "pp_dpm_pcie").write_text("0: 2.5GT/s, x1 97Mhz \n1: 32.0GT/s, x16 1800Mhz *\n")
    (dev / "gpu_metrics").write_bytes(
        builder.gpu_metrics((1, 3), {"pcie_link_width": 16, "pcie_link_speed": 25}))
    report = preflight_report(root, tmp_path, PreflightOptions(families={"pcie"}))
    assert _bad(report) == []
    (link,) = [f for f in report.findings if f.check_id == "pcie.link.ok"]
    assert link.message.startswith("32 GT/s x16 from the GPU firmware (pp_dpm_pcie level 1, "
                                   "gpu_metrics v1.3 clamped to 2.5 GT/s above Gen4")


def test_the_clamp_is_only_smu_14_0_2s(copy_tree, tmp_path, builder):
    """The same contradiction on an RDNA3 part (gfx1100) is still a contradiction."""
    root = copy_tree("vm-rdna4")
    props = next(p for p in root.glob("class/kfd/kfd/topology/nodes/*/properties")
                 if "gfx_target_version 120001" in p.read_text())
    props.write_text(props.read_text().replace("120001", "110000"))
    dev = _dev(root, "0000:00:05.0")
    (dev / "pp_dpm_pcie").write_text("0: 2.5GT/s, x1 97Mhz \n1: 16.0GT/s, x16 1800Mhz *\n")
    (dev / "gpu_metrics").write_bytes(
        builder.gpu_metrics((1, 3), {"pcie_link_width": 16, "pcie_link_speed": 25}))
    report = preflight_report(root, tmp_path, PreflightOptions(families={"pcie"}))
    assert "pcie.link.unknown" in _ids(report)


# --- row 6: smu7's fixed lane strings ------------------------------------------------------------
def test_an_idle_x16_rx580_at_gen1_is_idle_not_degraded(copy_tree, tmp_path):
    """Before: smu7's "2.5GT/s, x8" star on an x16 link at Gen1 -> `pcie.link.degraded` FAIL."""
    root = copy_tree("x99-r9700-degraded")
    gpu = "0000:89:00.0"  # trained 2.5 GT/s x16 under an 8 GT/s x16 port
    props = next(p for p in root.glob("class/kfd/kfd/topology/nodes/*/properties")
                 if f"location_id {0x89 << 8}\n" in p.read_text())
    props.write_text(props.read_text().replace("120001", "80003"))  # Polaris, gfx803
    (_dev(root, gpu) / "pp_dpm_pcie").write_text("0: 2.5GT/s, x8 *\n1: 8.0GT/s, x16 \n")
    report = preflight_report(root, tmp_path, PreflightOptions(families={"pcie"}))
    mine = [(f.check_id, f.severity) for f in report.findings if f.subject == gpu]
    assert ("pcie.link.idle", Severity.WARN) in mine
    assert ("pcie.link.degraded", Severity.FAIL) not in mine


def test_an_unreadable_mp0_version_is_unknown_under_the_default(copy_tree, tmp_path):
    """The default threshold derives from MP0's version: unreadable, it is not guessed."""
    root = copy_tree(ROCM7)
    (_dev(root, MI_GPU) / "ip_discovery/die/0/255/0/minor").write_text("zero\n")
    report = preflight_report(root, tmp_path,
                              PreflightOptions(families={"ras"}, pairs=[(MI_GPU, MI_GPU)]))
    (finding,) = [f for f in report.findings if f.subject == MI_GPU]
    assert (finding.check_id, finding.severity) == ("ras.unknown", Severity.UNKNOWN)
    assert "the MP0 version the default threshold derives from" in finding.message
    # a positive module parameter needs no MP0 version
    (root / "module/amdgpu/parameters/bad_page_threshold").write_text("50\n")
    report = preflight_report(root, tmp_path,
                              PreflightOptions(families={"ras"}, pairs=[(MI_GPU, MI_GPU)]))
    assert [f.check_id for f in report.findings if f.subject == MI_GPU] == ["ras.clean"]
