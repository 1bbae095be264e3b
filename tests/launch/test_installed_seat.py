"""A seat that starts as installed (issue 35, item 5): `[preflight] profile` is checked by the
dry run, the render and the install, and the flagship's relative profile works in the layout
docs/install.md gives /etc/rocmseat/. A scratch dir stands in for /etc/rocmseat."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import REPO
from tests.sysfs.conftest import SYSFS_FIXTURES

FLAGSHIP = REPO / "launchers" / "r9700-mxfp4-dflash.toml"
X99 = SYSFS_FIXTURES / "x99-r9700"


@pytest.fixture
def etc(tmp_path):
    root = tmp_path / "etc" / "rocmseat"
    root.mkdir(parents=True)
    return root


def _dry_run(rocmseat_cli, seat, tmp_path):
    return rocmseat_cli("launch", str(seat), "--dry-run", "--sysfs-root", str(X99),
                        "--state-dir", str(tmp_path / "state"))


def test_seat_copied_alone_is_refused_naming_the_profile(rocmseat_cli, etc, tmp_path):
    seat = etc / "seat.toml"
    shutil.copy(FLAGSHIP, seat)
    missing = etc.parent / "checks" / "x99-r9700.toml"  # "../checks/..." from /etc/rocmseat
    said = f"preflight.profile: {missing}: cannot read the profile: No such file or directory"
    dry = _dry_run(rocmseat_cli, seat, tmp_path)
    assert dry.exit_code == 2
    assert f"rocmseat: launch would refuse to start (exit 2): {said}" in dry.stderr.splitlines()
    render = rocmseat_cli("systemd", "render", str(seat), "--sysfs-root", str(X99),
                          "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "u"),
                          "--rocmseat-bin", "/usr/local/bin/rocmseat")
    assert render.exit_code == 2 and said in render.stderr
    assert not (tmp_path / "u").exists() or not any((tmp_path / "u").iterdir())
    install = rocmseat_cli("systemd", "install", str(seat), "--root", str(tmp_path / "root"),
                           "--sysfs-root", str(X99), "--state-dir", str(tmp_path / "state"),
                           "--rocmseat-bin", "/usr/local/bin/rocmseat")
    assert install.exit_code == 2 and said in install.stderr


def test_flagship_in_the_installed_layout_finds_its_profile(rocmseat_cli, etc, tmp_path):
    # docs/install.md: launchers/ and checks/ side by side under /etc/rocmseat
    shutil.copytree(REPO / "launchers", etc / "launchers")
    shutil.copytree(REPO / "checks", etc / "checks")
    seat = etc / "launchers" / FLAGSHIP.name
    dry = _dry_run(rocmseat_cli, seat, tmp_path)
    assert "preflight.profile" not in dry.stderr and "profile" not in dry.stderr
    render = rocmseat_cli("systemd", "render", str(seat), "--sysfs-root", str(X99),
                          "--state-dir", str(tmp_path / "state"), "--out", str(tmp_path / "u"),
                          "--rocmseat-bin", "/usr/local/bin/rocmseat")
    assert render.exit_code == 0, render.stderr
    unit = (tmp_path / "u" / "rocmseat-r9700-mxfp4-dflash-r0.service").read_text()
    assert f"launch {seat} --replica r0" in unit
    # and the profile the unit's preflight reads is the one beside it
    pre = rocmseat_cli("launch", str(seat), "--replica", "r0", "--preflight-only",
                       "--sysfs-root", str(X99), "--state-dir", str(tmp_path / "state"))
    assert "cannot read the profile" not in pre.stderr, pre.stderr


@pytest.mark.parametrize("text", ["not toml [", 'name = 3\n'])
def test_a_profile_that_does_not_load_is_refused_with_its_line(rocmseat_cli, etc, tmp_path, text):
    (etc / "checks").mkdir()
    (etc / "checks" / "x99-r9700.toml").write_text(text)
    (etc / "launchers").mkdir()
    shutil.copy(FLAGSHIP, etc / "launchers" / FLAGSHIP.name)
    dry = _dry_run(rocmseat_cli, etc / "launchers" / FLAGSHIP.name, tmp_path)
    assert dry.exit_code == 2
    (line,) = [x for x in dry.stderr.splitlines() if "preflight.profile:" in x]
    assert str(etc / "checks" / "x99-r9700.toml") in line
