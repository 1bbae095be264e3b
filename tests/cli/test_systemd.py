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
    # the pair's sysfs preflight, judged by launch's rule; launch then runs the HIP probe once
    assert ("ExecStartPre=/usr/local/bin/rocmseat launch <repo>/launchers/"
            "r9700-mxfp4-dflash.toml --replica r0 --state-dir /var/lib/rocmseat "
            "--preflight-only\n") in normalise(r0)
    assert "ExecStartPre=-" not in r0 and "SupplementaryGroups" not in r0  # root: no groups
    assert "TimeoutStartSec=1080\n" in r0  # 900 s readiness + 180 s margin
    assert "KillMode=mixed\nKillSignal=SIGTERM\n" in r0
    assert "DevicePolicy=closed\nDeviceAllow=/dev/kfd rw\nDeviceAllow=char-drm rw\n" in r0
    assert "ReadWritePaths=/var/cache/rocmseat/r9700-mxfp4-dflash /var/lib/rocmseat\n" in r0
    assert "\nRestartSteps=" not in r0  # systemd 252 does not know it
    r1 = units["rocmseat-r9700-mxfp4-dflash-r1.service"]
    assert "--replica r1 --state-dir /var/lib/rocmseat --preflight-only" in r1
    assert "NUMA node 1, port 8001" in r1
    node = units["rocmseat-r9700-mxfp4-dflash-preflight.service"]
    assert ("--pair 0000:05:00.0,0000:09:00.0 --pair 0000:86:00.0,0000:89:00.0 --profile "
            in node)
    assert node.count("--no-hip") == 1 and "DeviceAllow" not in node


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


def test_user_adds_device_groups_and_warns_when_missing(rocmseat_cli, tmp_path, monkeypatch):
    import rocmseat.cli.systemd as cli_systemd

    monkeypatch.setattr(cli_systemd, "_missing_groups", lambda groups: [g for g in groups
                                                                        if g == "render"])
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(tmp_path), "--sysfs-root",
                          X99, "--rocmseat-bin", BIN, "--user", "vllm")
    assert result.exit_code == 0, result.stderr
    r0 = (tmp_path / "rocmseat-r9700-mxfp4-dflash-r0.service").read_text()
    assert "User=vllm\n" in r0 and "SupplementaryGroups=render video\n" in r0
    assert result.stderr.startswith("rocmseat: warning: group 'render' does not exist on this "
                                    "host: systemd would refuse to start the units "
                                    "(status=216/GROUP")


def test_install_refuses_missing_group(rocmseat_cli, tmp_path, monkeypatch):
    """Without --root the units are for this host: a missing group is an error, nothing is
    written (and daemon-reload is never reached)."""
    import rocmseat.cli.systemd as cli_systemd

    monkeypatch.setattr(cli_systemd, "_missing_groups", lambda groups: list(groups))
    monkeypatch.setattr(cli_systemd, "UNIT_DIR", tmp_path / "never")  # absolute: / ignored
    result = rocmseat_cli("systemd", "install", R9700, "--sysfs-root", X99, "--rocmseat-bin",
                          BIN, "--user", "vllm")
    assert result.exit_code == 2
    assert "group 'render', 'video' does not exist on this host" in result.stderr
    assert not (tmp_path / "never").exists()


def test_missing_groups_reads_the_group_database():
    import grp

    import rocmseat.cli.systemd as cli_systemd

    present = grp.getgrgid(0).gr_name
    assert cli_systemd._missing_groups((present, "no-such-group-rocmseat")) == [
        "no-such-group-rocmseat"]


def test_install_keeps_a_foreign_unit(rocmseat_cli, tmp_path):
    unit_dir = tmp_path / "etc" / "systemd" / "system"
    unit_dir.mkdir(parents=True)
    foreign = unit_dir / "rocmseat-r9700-mxfp4-dflash-r0.service"
    foreign.write_text("[Service]\nExecStart=/usr/bin/true\n")
    args = ("systemd", "install", R9700, "--root", str(tmp_path), "--sysfs-root", X99,
            "--rocmseat-bin", BIN)
    result = rocmseat_cli(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"rocmseat: error: {foreign}: exists, differs and was not "
                                    "rendered by rocmseat; not overwritten")
    assert foreign.read_text() == "[Service]\nExecStart=/usr/bin/true\n"
    assert sorted(p.name for p in unit_dir.iterdir()) == [foreign.name]  # nothing half-done
    result = rocmseat_cli(*args, "--force")
    assert result.exit_code == 0, result.stderr
    assert f"replaced {foreign}" in result.stdout
    again = rocmseat_cli(*args)  # a re-install of our own units: unchanged, no refusal
    assert again.exit_code == 0 and again.stdout.count("unchanged ") == 4


def test_render_to_unwritable_out_is_one_line(rocmseat_cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(blocker / "units"),
                          "--sysfs-root", X99, "--rocmseat-bin", BIN)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"rocmseat: error: {blocker / 'units'}/rocmseat-")
    assert "cannot write (--out): Not a directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_templates_fall_back_to_the_installed_data_files(tmp_path, monkeypatch):
    """A non-editable install has no checkout: the templates come from
    <sys.prefix>/share/rocmseat/systemd (pyproject data-files)."""
    import rocmseat.launch.units as units

    shared = tmp_path / "prefix" / "share" / "rocmseat" / "systemd"
    shared.mkdir(parents=True)
    for kind in ("replica", "preflight", "watch"):
        (shared / f"{kind}.service.in").write_text(f"# {kind} from share\n")
    monkeypatch.setattr(units, "__file__", str(tmp_path / "site" / "rocmseat" / "launch" /
                                                "units.py"))
    monkeypatch.setattr(units.sys, "prefix", str(tmp_path / "prefix"))
    assert units.template_dirs()[1] == shared
    assert units.load_templates()["watch"] == "# watch from share\n"
    monkeypatch.setattr(units.sys, "prefix", str(tmp_path / "empty"))
    from rocmseat.errors import ReadError

    with pytest.raises(ReadError, match=r"unit templates looked for in .*site/systemd or "
                                        r".*empty/share/rocmseat/systemd"):
        units.load_templates()


@pytest.mark.tools
def test_verify_does_not_catch_a_missing_group_so_render_warns(rocmseat_cli, tmp_path):
    """systemd-analyze verify accepts SupplementaryGroups= naming a group the host lacks
    (systemd itself would refuse the start: 216/GROUP), so rocmseat checks it itself."""
    import grp

    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    try:
        grp.getgrnam("render")
        pytest.skip("this host has a render group; the gap cannot be shown here")
    except KeyError:
        pass
    result = rocmseat_cli("systemd", "render", R9700, "--out", str(tmp_path), "--sysfs-root",
                          X99, "--rocmseat-bin", str(installed_rocmseat()), "--user", "root")
    assert result.exit_code == 0, result.stderr
    assert "group 'render' does not exist on this host" in result.stderr
    units = sorted(tmp_path.iterdir())
    assert "SupplementaryGroups=render video\n" in units[1].read_text()
    proc = subprocess.run([analyze, "verify", *map(str, units)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert (proc.returncode, proc.stderr.strip()) == (0, "")
