"""Tier 3 through the CLI: `rocmseat preflight --only hip` on the X99 fixture tree, with the fake
library (configured as the X99 bench) and with Debian's real libamdhip64-5 (no GPU here)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.hip.conftest import A, C
from tests.hip.test_real_library import DEBIAN_LIBRARY

pytestmark = pytest.mark.hip

X99_TREE = FIXTURES / "sysfs" / "x99-r9700"


@pytest.fixture
def x99_cli(
    fake_hip: Path, x99: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    rocmseat_cli: Callable[..., object],
) -> Callable[..., object]:
    if not X99_TREE.is_dir():
        pytest.skip("the x99-r9700 sysfs fixture is not built yet (tests/fixtures/sysfs)")
    monkeypatch.setenv("ROCMSEAT_HIP_LIBRARY", str(fake_hip))
    for key, value in x99.items():
        monkeypatch.setenv(key, value)

    def run(*args: str) -> object:
        return rocmseat_cli("preflight", "--only", "hip", "--sysfs-root", str(X99_TREE),
                            "--state-dir", str(tmp_path / "state"), *args)

    return run


def hip_rows(stdout: str) -> list[str]:
    rows = [line for line in stdout.splitlines() if re.match(r"^(OK|WARN|FAIL|UNKNOWN)\s", line)]
    # the wall time and the session's temporary library path vary from run to run
    rows = [re.sub(r"probe \d+\.\d+ s", "probe <wall> s", " ".join(r.split())) for r in rows]
    return [re.sub(r" from \S+/libamdhip64\.so, ", " from <fake library>, ", r) for r in rows]


def test_proposed_socket_local_pairs_pass_ipc(
    x99_cli: Callable[..., object], golden: Callable[[str, str], None]
) -> None:
    result = x99_cli()
    assert result.exit_code == 0, result.stdout + result.stderr  # the x8 warning alone: exit 0
    rows = hip_rows(result.stdout)
    assert ("OK hip.ipc 0000:05:00.0+0000:09:00.0 IPC verified both ways (32 MiB each, every "
            "byte); probe <wall> s") in rows
    assert ("OK hip.ipc 0000:86:00.0+0000:89:00.0 IPC verified both ways (32 MiB each, every "
            "byte); probe <wall> s") in rows
    assert len(re.findall(r"probe \d+\.\d\d s", result.stdout)) == 2  # each pair's wall time
    golden("hip-cli-x99-proposed.txt", "\n".join(rows) + "\n")


def test_cross_socket_pair_fails_at_open_with_17(
    x99_cli: Callable[..., object], golden: Callable[[str, str], None]
) -> None:
    result = x99_cli("--pair", "05:00.0,86:00.0")
    assert result.exit_code == 1
    rows = hip_rows(result.stdout)
    assert ("FAIL hip.ipc 0000:05:00.0+0000:86:00.0 05:00.0 -> 86:00.0: failed at stage open: "
            "hipErrorInvalidDevicePointer (17) in hipIpcOpenMemHandle; probe <wall> s "
            "(both directions failed)") in rows
    golden("hip-cli-x99-cross-socket.txt", "\n".join(rows) + "\n")


def test_json_carries_stage_error_and_wall_time(x99_cli: Callable[..., object]) -> None:
    import json

    result = x99_cli("--pair", f"{A},{C}", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    ipc = next(f for f in doc["findings"] if f["check_id"] == "hip.ipc")
    assert (ipc["data"]["stage"], ipc["data"]["error_code"], ipc["data"]["error_name"]) == (
        "open", 17, "hipErrorInvalidDevicePointer")
    assert ipc["data"]["wall_s"] > 0


def test_injected_hang_is_reported_naming_the_stage(
    x99_cli: Callable[..., object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKEHIP_HANG", "hipIpcOpenMemHandle")
    result = x99_cli("--pair", "05:00.0,09:00.0", "--hip-timeout", "4")
    assert result.exit_code == 1
    rows = hip_rows(result.stdout)
    assert ("FAIL hip.ipc 0000:05:00.0+0000:09:00.0 05:00.0 -> 09:00.0: stage open hung: no "
            "progress within 4 s; probe <wall> s (reverse direction not run)") in rows


@pytest.mark.parametrize("via", ["ROCMSEAT_HIP_LIBRARY", "loader search"])
def test_real_library_without_gpu_is_unknown_exit_2(
    via: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    rocmseat_cli: Callable[..., object],
) -> None:
    if not DEBIAN_LIBRARY.exists():
        pytest.skip("Debian package libamdhip64-5 is not installed (apt-get install libamdhip64-5)")
    if Path("/dev/kfd").exists():
        pytest.skip("this machine has an AMD GPU (/dev/kfd): the no-GPU behaviour cannot be shown")
    if not X99_TREE.is_dir():
        pytest.skip("the x99-r9700 sysfs fixture is not built yet (tests/fixtures/sysfs)")
    if via == "ROCMSEAT_HIP_LIBRARY":
        monkeypatch.setenv("ROCMSEAT_HIP_LIBRARY", str(DEBIAN_LIBRARY))
    else:
        monkeypatch.delenv("ROCMSEAT_HIP_LIBRARY", raising=False)
        monkeypatch.setenv("ROCM_PATH", str(tmp_path))
    result = rocmseat_cli("preflight", "--only", "hip", "--sysfs-root", str(X99_TREE),
                          "--state-dir", str(tmp_path / "state"))
    assert result.exit_code == 2, result.stdout + result.stderr
    rows = hip_rows(result.stdout)
    source = str(DEBIAN_LIBRARY) if via == "ROCMSEAT_HIP_LIBRARY" else DEBIAN_LIBRARY.name
    assert rows == [
        f"UNKNOWN hip.runtime {pair} HIP could not be used ({source}): hipGetDeviceCount: "
        "hipErrorNoDevice (100)"
        for pair in ("0000:05:00.0+0000:09:00.0", "0000:86:00.0+0000:89:00.0")
    ]
    assert "Traceback" not in result.stdout + result.stderr


def test_a_failed_pair_cites_a_small_bar(
    fake_hip: Path, x99: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    rocmseat_cli: Callable[..., object],
) -> None:
    """Issue 24: GPU 05:00.0 with a 256 MiB VRAM BAR (no Above 4G decoding / Resizable BAR) over
    its 32 GiB: the failed cross-socket pair names it, even with only the hip family asked."""
    import shutil

    from tests.sysfs.conftest import fixture_builder

    root = tmp_path / "x99"
    shutil.copytree(X99_TREE, root, symlinks=True)
    resource = (root / "bus/pci/devices" / A).resolve() / "resource"
    resource.write_text(fixture_builder().gpu_bars(256 << 20, base=0xE0000000))
    monkeypatch.setenv("ROCMSEAT_HIP_LIBRARY", str(fake_hip))
    for key, value in x99.items():
        monkeypatch.setenv(key, value)
    result = rocmseat_cli("preflight", "--only", "hip", "--sysfs-root", str(root),
                          "--state-dir", str(tmp_path / "state"), "--pair", "05:00.0,86:00.0")
    assert result.exit_code == 1
    (row,) = [r for r in hip_rows(result.stdout) if r.startswith("FAIL hip.ipc")]
    assert row.endswith(f"; GPU {A} has a small VRAM BAR (pcie.bar.small): ROCm disables peer "
                        "access over PCIe without large BAR")
