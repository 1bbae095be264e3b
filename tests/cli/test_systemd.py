"""`rocmseat systemd render/install`: golden unit files, and `systemd-analyze verify` (tools)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO

R9700 = str(REPO / "launchers" / "r9700-mxfp4-dflash.toml")
DEMO = str(REPO / "launchers" / "demo-cpu.toml")
X99 = str(FIXTURES / "sysfs" / "x99-r9700")
BIN = "/usr/local/bin/rocmseat"


def normalise(text: str) -> str:
    return text.replace(str(REPO), "<repo>")


def render(rocmseat_cli, seat, out: Path, *extra: str):
    result = rocmseat_cli("systemd", "render", seat, "--out", str(out), "--sysfs-root", X99,
                          *extra)
    assert result.exit_code == 0, result.stderr
    return {p.name: p.read_text() for p in sorted(out.iterdir())}


def test_render_r9700_golden(rocmseat_cli, golden, tmp_path):
    units = render(rocmseat_cli, R9700, tmp_path, "--rocmseat-bin", BIN)
    assert sorted(units) == [
        "rocmseat-r9700-mxfp4-dflash-preflight.service",
        "rocmseat-r9700-mxfp4-dflash-r0.service",
        "rocmseat-r9700-mxfp4-dflash-r1.service",
        "rocmseat-r9700-mxfp4-dflash-watch.service",
    ]
    for name, text in units.items():
        golden(f"units/{name}", normalise(text))
    r0 = units["rocmseat-r9700-mxfp4-dflash-r0.service"]
    assert "Type=notify\nNotifyAccess=main\n" in r0
    assert ("ExecStartPre=/usr/local/bin/rocmseat preflight --state-dir /var/lib/rocmseat "
            "--pair 0000:05:00.0,0000:09:00.0 ") in r0
    assert "TimeoutStartSec=1080\n" in r0  # 900 s readiness + 180 s margin
    assert "KillMode=mixed\nKillSignal=SIGTERM\n" in r0
    assert "DevicePolicy=closed\nDeviceAllow=/dev/kfd rw\nDeviceAllow=char-drm rw\n" in r0
    assert "ReadWritePaths=/var/cache/rocmseat/r9700-mxfp4-dflash /var/lib/rocmseat\n" in r0
    assert "\nRestartSteps=" not in r0  # systemd 252 does not know it
    r1 = units["rocmseat-r9700-mxfp4-dflash-r1.service"]
    assert "--pair 0000:86:00.0,0000:89:00.0" in r1 and "NUMA node 1, port 8001" in r1


def test_render_cpu_seat_golden(rocmseat_cli, golden, tmp_path):
    units = render(rocmseat_cli, DEMO, tmp_path, "--rocmseat-bin", BIN, "--user", "rocmseat")
    assert sorted(units) == ["rocmseat-demo-cpu-r0.service", "rocmseat-demo-cpu-watch.service"]
    for name, text in units.items():
        golden(f"units/{name}", normalise(text))
    r0 = units["rocmseat-demo-cpu-r0.service"]
    assert "preflight" not in r0.split("[Service]")[1].split("ExecStart=")[0].replace(
        "ExecStartPre=+mkdir", "")
    assert "DeviceAllow" not in r0 and "User=rocmseat\n" in r0


def test_install_under_root(rocmseat_cli, tmp_path):
    result = rocmseat_cli("systemd", "install", R9700, "--root", str(tmp_path), "--sysfs-root",
                          X99, "--rocmseat-bin", BIN)
    assert result.exit_code == 0, result.stderr
    unit_dir = tmp_path / "etc" / "systemd" / "system"
    assert len(list(unit_dir.glob("rocmseat-r9700-mxfp4-dflash-*.service"))) == 4
    assert ("start with: systemctl enable --now rocmseat-r9700-mxfp4-dflash-r0.service "
            "rocmseat-r9700-mxfp4-dflash-r1.service") in result.stdout


def test_relative_bin_is_refused(rocmseat_cli, tmp_path):
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(tmp_path), "--sysfs-root",
                          X99, "--rocmseat-bin", "bin/rocmseat")
    assert result.exit_code == 2
    assert "must be an absolute path" in result.stderr


def installed_rocmseat() -> Path:
    beside = Path(sys.executable).parent / "rocmseat"
    if beside.is_file():
        return beside
    found = shutil.which("rocmseat")
    if found is None:
        pytest.skip("the rocmseat console script is not installed (pip install -e .)")
    return Path(found)


@pytest.mark.tools
@pytest.mark.parametrize("seat", [R9700, DEMO], ids=["r9700", "demo-cpu"])
def test_systemd_analyze_verify(rocmseat_cli, tmp_path, seat):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    units = render(rocmseat_cli, seat, tmp_path, "--rocmseat-bin", str(installed_rocmseat()))
    proc = subprocess.run([analyze, "verify", *(str(tmp_path / n) for n in units)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    # verify prints a warning for every unknown key, bad value or missing executable
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr
