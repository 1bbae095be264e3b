"""Expectation profiles: the shipped one, and malformed ones with file:line:key errors."""

from __future__ import annotations

import pytest

from rocmseat.errors import ConfigError
from rocmseat.findings import Severity
from rocmseat.node.inventory import read_inventory
from rocmseat.preflight.profile import judge_profile, load_profile
from tests.conftest import REPO
from tests.sysfs.conftest import SYSFS_FIXTURES

SHIPPED = REPO / "checks" / "x99-r9700.toml"


def test_shipped_profile():
    profile = load_profile(SHIPPED)
    assert profile.name == "x99-r9700"
    assert profile.expected_link("0000:09:00.0") == (8.0, 8)
    assert profile.expected_link("0000:05:00.0") == (8.0, 16)
    assert profile.pairs == (("0000:05:00.0", "0000:09:00.0"), ("0000:86:00.0", "0000:89:00.0"))
    assert profile.thresholds.correctable_fail == 100
    findings = judge_profile(read_inventory(SYSFS_FIXTURES / "x99-r9700"), profile, set())
    assert {f.severity for f in findings} == {Severity.OK}


def test_profile_against_another_host():
    profile = load_profile(SHIPPED)
    findings = judge_profile(read_inventory(SYSFS_FIXTURES / "mi300x-8gpu"), profile, set())
    kinds = {(f.check_id, f.severity) for f in findings}
    assert ("profile.gpu.missing", Severity.FAIL) in kinds
    assert ("profile.gpu.unexpected", Severity.WARN) in kinds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'name = "x"\n[[gpu]]\npci_address = "zz"\n',
            "x.toml:3: key 'gpu[0].pci_address': not a PCI address: 'zz'",
        ),
        (
            '[[gpu]]\npci_address = "05:00.0"\nwidth = 99\nspeed_gts = 8.0\n',
            "x.toml:3: key 'gpu[0].width': must be a lane count 1..32",
        ),
        (
            '[[gpu]]\npci_address = "05:00.0"\nspeed_gts = 7.0\nwidth = 8\n',
            "x.toml:3: key 'gpu[0].speed_gts': must be one of",
        ),
        (
            '[[gpu]]\npci_address = "05:00.0"\nwidth = 8\n',
            "x.toml:2: key 'gpu[0].pci_address': give speed_gts and width together",
        ),
        (
            '[[gpu]]\npci_address = "05:00.0"\nslot = 3\n',
            "x.toml:3: key 'gpu[0].slot': unknown key",
        ),
        (
            '[[pair]]\ngpus = ["05:00.0"]\n',
            "x.toml:2: key 'pair[0].gpus': must list two PCI addresses",
        ),
        (
            '[[pair]]\ngpus = ["05:00.0", "0000:05:00.0"]\n',
            "x.toml:2: key 'pair[0].gpus': a pair needs two different GPUs",
        ),
        (
            "[thresholds]\naer_correctable_warn = -1\n",
            "x.toml:2: key 'thresholds.aer_correctable_warn': must be a non-negative integer",
        ),
        ("[thresholds]\nbadtlp = 3\n", "x.toml:2: key 'thresholds.badtlp': unknown"),
        ("colour = 1\n", "x.toml:1: key 'colour': unknown key"),
        ("name = [\n", "x.toml:1: not valid TOML"),
        ("name = 3\n", "x.toml:1: key 'name': must be a string"),
        ("gpu = 3\n", "x.toml:1: key 'gpu': must be an array of tables"),
    ],
)
def test_malformed_profiles_name_file_line_key(tmp_path, text, message):
    path = tmp_path / "x.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_profile(path)
    assert str(info.value).startswith(str(tmp_path) + "/" + message), str(info.value)
    assert "\n" not in str(info.value)


def test_missing_profile(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the profile"):
        load_profile(tmp_path / "nope.toml")
