"""The library entry (`preflight_report`: the CLI, launch's gate and the recorded run) and the
renderers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmseat.errors import ConfigError, NoDeviceError
from rocmseat.findings import Finding, Severity
from rocmseat.node.inventory import read_inventory
from rocmseat.placement.rules import parse_pair
from rocmseat.preflight import render, textfile
from rocmseat.preflight.pairs import propose_pairs
from rocmseat.preflight.run import PreflightOptions, preflight_report
from tests.sysfs.conftest import SYSFS_FIXTURES

X99 = SYSFS_FIXTURES / "x99-r9700"


def test_preflight_report_returns_findings(tmp_path):
    findings = preflight_report(X99, tmp_path,
                                PreflightOptions(pairs=[("0000:86:00.0", "0000:89:00.0")])).findings
    assert findings and all(isinstance(f, Finding) for f in findings)
    assert {f.severity for f in findings} == {Severity.OK}
    assert "0000:05:00.0" not in {f.subject for f in findings}


def test_preflight_report_with_profile_path(tmp_path):
    from tests.conftest import REPO

    findings = preflight_report(
        SYSFS_FIXTURES / "x99-r9700-degraded", tmp_path,
        PreflightOptions(profile=REPO / "checks/x99-r9700.toml"),
    ).findings
    assert ("pcie.link.expected", "0000:89:00.0") in {(f.check_id, f.subject) for f in findings}


def test_interfaces_for_launch():
    inv = read_inventory(X99)
    gpu = inv.gpus[0]
    for name in (
        "pci_address",
        "card",
        "gfx_target",
        "numa_node",
        "socket",
        "local_cpulist",
        "product_name",
    ):
        assert hasattr(gpu, name)
    pair = propose_pairs(inv)[0]
    assert (pair.a, pair.b, pair.socket, pair.numa_node) == ("0000:05:00.0", "0000:09:00.0", 0, 0)


def test_no_device_and_unknown_family(tmp_path):
    with pytest.raises(NoDeviceError, match="no amdgpu device"):
        preflight_report(SYSFS_FIXTURES / "no-amdgpu", tmp_path).findings
    with pytest.raises(ConfigError, match="unknown check family 'bogus'"):
        preflight_report(X99, tmp_path, PreflightOptions(families={"bogus"})).findings


def test_parse_pair():
    assert parse_pair("09:00.0, 05:00.0") == ("0000:05:00.0", "0000:09:00.0")
    for bad in ("05:00.0", "x,y", "05:00.0,05:00.0"):
        with pytest.raises(ConfigError):
            parse_pair(bad)


def test_amdsmi_family_on_request(tmp_path, monkeypatch):
    import rocmseat.node.amdsmi_check as check

    monkeypatch.setattr(
        check,
        "amdsmi_findings",
        lambda inventory: [Finding("amdsmi.crosscheck", Severity.UNKNOWN, "node", "not run: test")],
    )
    findings = preflight_report(X99, tmp_path, PreflightOptions(amdsmi=True)).findings
    assert [f.check_id for f in findings if f.family == "amdsmi"] == ["amdsmi.crosscheck"]
    default = preflight_report(X99, tmp_path).findings
    assert not [f for f in default if f.family == "amdsmi"]  # tree: off


def test_rich_table_on_a_terminal(tmp_path):
    from rich.console import Console

    report = preflight_report(SYSFS_FIXTURES / "single-socket-numa-unknown", tmp_path)
    console = Console(record=True, width=400, force_terminal=True, color_system="standard")
    for renderable in render.rich_renderables(report):
        console.print(renderable)
    out = console.export_text(styles=False, clear=False)
    assert "result: 0 fail, 0 unknown, 2 warn, 7 ok -> exit 0" in out
    # sysfs text is never read as rich markup: the `[9]` of an AER bit name survives
    assert "2 dev_cor_errs_bit[9] since boot" in out
    coloured = console.export_text(styles=True)
    assert "\x1b[33mWARN" in coloured  # yellow on a terminal


def test_textfile_escapes_labels(tmp_path):
    # a subject with a quote, a backslash and a newline survives the exposition format
    from dataclasses import replace

    from prometheus_client.parser import text_string_to_metric_families

    report = preflight_report(X99, tmp_path)
    odd = 'a"b\\c\nd'
    report = replace(report, findings=(Finding("x.y", Severity.WARN, odd, "m"),))
    text = textfile.render(textfile.report_registry(report))
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (sample,) = families["rocmseat_preflight_check_severity"].samples
    assert sample.labels == {"check_id": "x.y", "subject": odd} and sample.value == 1


def test_json_counts_match_findings(tmp_path):
    report = preflight_report(X99, tmp_path)
    doc = json.loads(render.render_json(report))
    assert sum(doc["counts"].values()) == len(doc["findings"]) == len(report.findings)


PATH_FILES = (
    "current_link_speed",
    "current_link_width",
    "max_link_speed",
    "max_link_width",
    "vendor",
    "class",
    "numa_node",
    "local_cpulist",
    "aer_dev_correctable",
    "aer_dev_nonfatal",
    "aer_rootport_total_err_cor",
    "pp_dpm_pcie",
    "pcie_replay_count",
    "product_name",
)


def test_hypothesis_any_content_in_any_file_gives_findings(tmp_path_factory):
    """Whatever a file holds, the whole pipeline returns findings (or a one-line error)."""
    import shutil

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    root = tmp_path_factory.mktemp("hyp") / "tree"
    shutil.copytree(SYSFS_FIXTURES / "x99-r9700-degraded", root, symlinks=True)
    gpu = (root / "class/drm/card4/device").resolve()
    functions = [gpu, *list(gpu.parents)[:3]]

    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        name=st.sampled_from(PATH_FILES),
        where=st.integers(0, 3),
        content=st.binary(max_size=200) | st.text(max_size=80).map(str.encode),
    )
    def check(name, where, content):
        path = functions[where] / name
        original = path.read_bytes() if path.exists() else None
        path.write_bytes(content)
        try:
            report = preflight_report(
                root, tmp_path_factory.mktemp("s"),
                PreflightOptions(families={"pcie", "aer", "numa"}),
            )
            assert report.findings
            render.render_json(report)
            textfile.render(textfile.report_registry(report))
            render.render_table(report)
        finally:
            if original is None:
                path.unlink()
            else:
                path.write_bytes(original)

    check()


def test_live_root_adds_udev_and_amdsmi(tmp_path, monkeypatch):
    import rocmseat.node.amdsmi_check as amdsmi_check
    import rocmseat.node.udev as udev
    import rocmseat.preflight.run as run_mod

    monkeypatch.setattr(run_mod, "is_live_root", lambda root: True)
    inv = read_inventory(X99)
    monkeypatch.setattr(
        udev, "udev_card_addresses", lambda: {g.card: g.pci_address for g in inv.gpus}
    )
    monkeypatch.setattr(
        amdsmi_check,
        "amdsmi_findings",
        lambda inventory: [Finding("amdsmi.crosscheck", Severity.UNKNOWN, "node", "not run: x")],
    )
    findings = preflight_report(X99, tmp_path, PreflightOptions(amdsmi=True)).findings
    ids = {(f.check_id, f.severity) for f in findings}
    assert ("inventory.udev", Severity.OK) in ids
    assert ("amdsmi.crosscheck", Severity.UNKNOWN) in ids
    # amdsmi is optional: not asked, not run (so a node without it still exits 0)
    assert not [f for f in preflight_report(X99, tmp_path).findings if f.family == "amdsmi"]


@given(st.text(max_size=40))
def test_parse_pair_any_text(text):
    try:
        a, b = parse_pair(text)
    except ConfigError as exc:
        assert exc.message.startswith("--pair ") and "\n" not in exc.message
        return
    assert a < b and a.startswith("0000:") and b.startswith("0000:")
