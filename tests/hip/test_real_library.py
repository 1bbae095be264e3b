"""Tier 3 with the real runtime: Debian's libamdhip64-5 on a machine without a GPU must give
`unknown` with HIP's own error name, not a crash (the same Python code as against the fake)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmseat.findings import Severity
from rocmseat.hip.check import hip_findings
from tests.hip.conftest import A, B

pytestmark = pytest.mark.hip

DEBIAN_LIBRARY = Path("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5")  # dpkg -L libamdhip64-5


@pytest.fixture
def real_hip() -> Path:
    if not DEBIAN_LIBRARY.exists():
        pytest.skip("Debian package libamdhip64-5 is not installed (apt-get install libamdhip64-5)")
    if Path("/dev/kfd").exists():
        pytest.skip("this machine has an AMD GPU (/dev/kfd): the no-GPU behaviour cannot be shown")
    return DEBIAN_LIBRARY


def test_real_library_without_gpu_is_unknown_with_hips_reason(real_hip: Path) -> None:
    findings = hip_findings([(A, B)], library=real_hip)
    assert [(f.check_id, f.severity) for f in findings] == [("hip.runtime", Severity.UNKNOWN)]
    assert findings[0].message == \
        f"HIP could not be used ({real_hip}): hipGetDeviceCount: hipErrorNoDevice (100)"
    assert findings[0].data["error_name"] == "hipErrorNoDevice"
    assert findings[0].data["wall_s"] > 0


def test_real_library_is_found_by_discovery_through_its_versioned_soname(
    real_hip: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No explicit path: ROCM_PATH points nowhere, so only the loader's search by the versioned
    # name libamdhip64.so.5 (Debian ships no unversioned symlink without -dev) can find it.
    monkeypatch.delenv("ROCMSEAT_HIP_LIBRARY", raising=False)
    monkeypatch.delenv("HIP_PATH", raising=False)
    findings = hip_findings([(A, B)], env={"ROCM_PATH": str(tmp_path)})
    assert findings[0].severity is Severity.UNKNOWN
    assert findings[0].message == \
        "HIP could not be used (libamdhip64.so.5): hipGetDeviceCount: hipErrorNoDevice (100)"
    assert findings[0].data["error_code"] == 100
