"""`--write-profile` (rocmseat.preflight.genprofile): the profile of a healthy node, loaded back
by the one loader, judges the degraded node as the fixtures say; a faulty node writes none."""

from __future__ import annotations

import pytest

from rocmseat.errors import ConfigError
from rocmseat.findings import Severity, exit_code_for
from rocmseat.preflight.genprofile import profile_text
from rocmseat.preflight.profile import load_profile
from rocmseat.preflight.run import PreflightOptions, preflight_report
from tests.conftest import REPO
from tests.sysfs.conftest import SYSFS_FIXTURES


def _written(tmp_path, tree="mi300x-hive"):
    report = preflight_report(SYSFS_FIXTURES / tree, tmp_path / "state")
    path = tmp_path / f"{tree}.toml"
    path.write_text(profile_text(report, tree))
    return load_profile(path)


def test_the_written_profile_is_the_shipped_one(tmp_path):
    written = _written(tmp_path)
    shipped = load_profile(REPO / "checks" / "mi300x-hive.toml")
    assert (written.gpus, written.pairs, written.xgmi) == (shipped.gpus, shipped.pairs,
                                                           shipped.xgmi)
    assert written.xgmi.hive_members == 8 and written.xgmi.compute_partition == "SPX"
    assert {g.socket for g in written.gpus} == {0, 1} and len(written.gpus) == 8


def test_the_profile_judges_the_degraded_and_cpx_nodes(tmp_path):
    profile = _written(tmp_path)
    opts = PreflightOptions(profile=profile)
    degraded = preflight_report(SYSFS_FIXTURES / "mi300x-hive-degraded", tmp_path / "s1", opts)
    bad = sorted({(f.check_id, f.severity.value) for f in degraded.findings
                  if f.severity != Severity.OK})
    assert bad == [("xgmi.link", "fail"), ("xgmi.width", "warn")]
    assert exit_code_for(degraded.findings) == 1
    cpx = preflight_report(SYSFS_FIXTURES / "mi300x-hive-cpx", tmp_path / "s2", opts)
    assert {f.check_id for f in cpx.findings if f.severity == Severity.FAIL} == {"xgmi.partition"}


def test_a_radeon_node_writes_its_pairs(tmp_path):
    written = _written(tmp_path, "x99-r9700")
    assert written.pairs == (("0000:05:00.0", "0000:09:00.0"), ("0000:86:00.0", "0000:89:00.0"))
    assert written.xgmi.hive_members is None
    assert [g.link for g in written.gpus][1] == (8.0, 8)


@pytest.mark.parametrize("tree", ["mi300x-hive-degraded", "x99-r9700-degraded"])
def test_a_faulty_node_writes_no_profile(tmp_path, tree):
    report = preflight_report(SYSFS_FIXTURES / tree, tmp_path)
    with pytest.raises(ConfigError, match="writes from a healthy node; this one has fail"):
        profile_text(report, tree)
