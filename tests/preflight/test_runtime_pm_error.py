"""Issue 34 item 1: a GPU whose runtime resume failed is failed, not asleep.

`power/runtime_status` reads `error` once a runtime PM callback failed
(drivers/base/power/sysfs.c runtime_status_show(): `if (dev->power.runtime_error) "error"`,
checked before every status), and rpm_resume() (drivers/base/power/runtime.c) returns -EINVAL
for every later resume until the status is set again (a driver rebind). Before: only `suspended`
was asleep; the pm getters answered EPERM (amdgpu_pm_get_access_if_active(), as the kernel does
for a GPU that is not active) and `pcie.dpm.asleep` said ok, "it wakes when a client opens it",
exit 0. The tree is tests/fixtures/sysfs/vm-rdna4-resume-failed (the builder's
vm_rdna4_resume_failed()).
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from rocmseat.findings import Severity, exit_code_for
from rocmseat.preflight.run import PreflightOptions, preflight_report
from rocmseat.sysfs import attrs as attrs_module
from rocmseat.sysfs.amdgpu import read_amdgpu
from rocmseat.sysfs.fs import Unreadable
from tests.sysfs.conftest import SYSFS_FIXTURES

TREE = SYSFS_FIXTURES / "vm-rdna4-resume-failed"
GPU = "0000:00:05.0"
# amdgpu_device.c amdgpu_device_resume(): dev_err(adev->dev, "amdgpu_device_ip_resume failed
# (%d).\n", r) (drm_err() in 6.13+: the same words after the device), here -ETIMEDOUT; printed
# by every kernel from 4.x through 6.12 in these words
RESUME_LINE = f"[  812.104233] amdgpu {GPU}: amdgpu: amdgpu_device_ip_resume failed (-110).\n"
PM_GETTERS = ("pp_dpm_pcie", "gpu_metrics", "gpu_busy_percent")


@pytest.fixture
def eperm_getters(monkeypatch):
    """The pm getters as the kernel answers them for a GPU that is not active: EPERM; and the
    names of the ones read."""
    read: list[str] = []
    real_text, real_bytes = attrs_module.read_attr, attrs_module.read_attr_bytes

    def denied(real):
        def reader(path):
            name = str(path).rsplit("/", 1)[-1]
            if name in PM_GETTERS:
                read.append(name)
                return Unreadable(str(path), "Operation not permitted", errno.EPERM)
            return real(path)
        return reader

    monkeypatch.setattr(attrs_module, "read_attr", denied(real_text))
    monkeypatch.setattr(attrs_module, "read_attr_bytes", denied(real_bytes))
    return read


def _log(tmp_path: Path) -> Path:
    path = tmp_path / "kern.log"
    path.write_text(RESUME_LINE)
    return path


def test_runtime_status_error_is_read_as_a_failed_resume_never_asleep(eperm_getters):
    reading = read_amdgpu((TREE / "bus/pci/devices" / GPU).resolve())
    assert reading.runtime_status == "error"
    assert reading.runtime_error == "power/runtime_status is error"
    assert reading.asleep is None
    assert eperm_getters == []  # the getters of a GPU that cannot resume are not read


def test_a_failed_resume_fails_the_gpu_and_exits_1(eperm_getters, tmp_path):
    report = preflight_report(TREE, tmp_path / "state",
                              PreflightOptions(kernel_log=_log(tmp_path)))
    checks = {(f.check_id, f.severity, f.subject) for f in report.findings}
    assert ("pcie.dpm.resume_failed", Severity.FAIL, GPU) in checks
    assert not [f for f in report.findings if f.check_id.endswith(".asleep")]
    failed = next(f for f in report.findings if f.check_id == "pcie.dpm.resume_failed")
    assert GPU in failed.message and "not asleep" in failed.message
    assert "rebind" in failed.hint
    assert exit_code_for(report.findings) == 1


def test_the_cli_says_it_and_exits_1(rocmseat_cli, eperm_getters, tmp_path):
    result = rocmseat_cli("preflight", "--sysfs-root", str(TREE), "--state-dir",
                          str(tmp_path / "s"), "--kernel-log", str(_log(tmp_path)), "--json")
    assert result.exit_code == 1, result.output
    findings = json.loads(result.stdout)["findings"]
    by_id = {f["check_id"]: f for f in findings}
    assert by_id["pcie.dpm.resume_failed"]["severity"] == "fail"
    assert by_id["pcie.dpm.resume_failed"]["subject"] == GPU
    assert "pcie.dpm.asleep" not in by_id


def test_suspended_stays_asleep_and_ok(copy_tree, eperm_getters, tmp_path):
    """The other side of the line: `suspended` is still asleep (issue 24), not a failure."""
    root = copy_tree("vm-rdna4-resume-failed")
    (root / "bus/pci/devices" / GPU).resolve().joinpath("power/runtime_status").write_text(
        "suspended\n")
    report = preflight_report(root, tmp_path / "state", PreflightOptions(families={"pcie"}))
    dpm = next(f for f in report.findings if f.check_id.startswith("pcie.dpm."))
    assert (dpm.check_id, dpm.severity) == ("pcie.dpm.asleep", Severity.OK)
    assert eperm_getters == []
