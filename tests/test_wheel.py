"""The files every node needs ship in the wheel under share/rocmseat/ (issue 35, item 6):
deploy/, checks/, launchers/, grafana/ and prometheus/, beside the unit templates."""

from __future__ import annotations

import glob
import importlib.util
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest

from tests.conftest import REPO

SHIPPED = ("deploy", "checks", "launchers", "grafana", "prometheus", "systemd")


def _data_files() -> dict[str, list[str]]:
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    return dict(doc["tool"]["setuptools"]["data-files"])


def _wanted() -> set[str]:
    out = set()
    for top in SHIPPED:
        for path in (REPO / top).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                out.add(path.relative_to(REPO).as_posix())
    return out


def test_every_file_of_the_shipped_directories_is_a_data_file():
    covered = {}
    for dest, patterns in _data_files().items():
        for pattern in patterns:
            matches = glob.glob(pattern, root_dir=REPO)
            assert matches, (dest, pattern)  # a pattern that names nothing is a typo
            for match in matches:
                # each lands under share/rocmseat/ at its own path in the repository
                assert dest == f"share/rocmseat/{match.rsplit('/', 1)[0]}", (dest, match)
                covered[match] = dest
    assert set(covered) == _wanted(), _wanted() ^ set(covered)


@pytest.mark.tools
def test_the_built_wheel_holds_them(tmp_path):
    if importlib.util.find_spec("wheel") is None:
        pytest.skip("the 'wheel' package is not installed (pip install wheel) for a build "
                    "without network")
    import setuptools

    if int(setuptools.__version__.split(".")[0]) < 68:
        pytest.skip(f"setuptools {setuptools.__version__} < 68 (pyproject's build-system)")
    src = tmp_path / "src"
    shutil.copytree(REPO, src, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", "tests", "bench", "build", "*.egg-info"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", str(src), "-w", str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "w").glob("rocmseat-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        prefix = next(n.split("/share/rocmseat/")[0] for n in names if "/share/rocmseat/" in n)
        shipped = {n.split("/share/rocmseat/", 1)[1] for n in names if "/share/rocmseat/" in n}
        hc = z.getinfo(f"{prefix}/share/rocmseat/deploy/slurm/rocmseat-health-check")
        assert hc.external_attr >> 16 & 0o111  # slurmd execs it: the mode survives
    assert shipped == _wanted()


def test_install_md_is_true_as_written():
    import re

    text = (REPO / "docs" / "install.md").read_text()
    assert "<you>" not in text and "github.com/" not in text  # no placeholder clone URL
    # no tag exists yet: the doc builds from HEAD and checks out a tag only once there is one
    tags = subprocess.run(["git", "-C", str(REPO), "tag", "--list", "v*"], capture_output=True,
                          text=True, timeout=30).stdout.split()
    if tags:  # after the first release the doc names one
        assert any(t in text for t in tags), tags
    else:
        assert "git checkout v0" not in text and "git rev-parse HEAD" in text
    # every shipped file the node's copy step installs exists under share/rocmseat/
    wanted = _wanted()
    for line in text.splitlines():
        for rel in re.findall(r"\$share/(\S+)", line):
            assert glob.glob(rel, root_dir=REPO) or rel in wanted, rel
            assert all(m in wanted for m in glob.glob(rel, root_dir=REPO)), rel
    for top in ("deploy/", "checks/", "launchers/", "grafana/", "prometheus/"):
        assert f"`{top}" in text, top
