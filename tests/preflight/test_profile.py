"""Expectation profiles: the shipped one, and malformed ones with file:line:key errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocmseat.errors import ConfigError
from rocmseat.findings import Severity
from rocmseat.node.inventory import read_inventory
from rocmseat.preflight.profile import judge_profile, load_profile
from rocmseat.preflight.run import PreflightOptions, preflight_report
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
        ('name = "x"\n\xff = 1\n', "x.toml:2: not UTF-8 text (byte 11)"),
        (
            "[thresholds]\naer_correctable_warn = 50\naer_correctable_fail = 10\n",
            "x.toml:2: key 'thresholds.aer_correctable_warn': aer_correctable_warn 50 is above "
            "aer_correctable_fail 10",
        ),
        (
            "[thresholds]\nreplay_fail = 0\n",
            "x.toml:2: key 'thresholds.replay_fail': replay_warn 1 is above replay_fail 0",
        ),
        (
            "[thresholds]\nwindow_h = 0\n",
            "x.toml:2: key 'thresholds.window_h': must be a window of 1..168 hours",
        ),
        (
            "[thresholds]\nwindow_h = 169\n",
            "x.toml:2: key 'thresholds.window_h': must be a window of 1..168 hours",
        ),
        (
            "[thresholds]\nwindow_h = 1.5\n",
            "x.toml:2: key 'thresholds.window_h': must be an integer 0..4294967295",
        ),
        (
            "[thresholds]\nras_ce_warn = 9\nras_ce_fail = 3\n",
            "x.toml:2: key 'thresholds.ras_ce_warn': ras_ce_warn 9 is above ras_ce_fail 3",
        ),
    ],
)
def test_malformed_profiles_name_file_line_key(tmp_path, text, message):
    path = tmp_path / "x.toml"
    path.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode("utf-8"))
    with pytest.raises(ConfigError) as info:
        load_profile(path)
    assert str(info.value).startswith(str(tmp_path) + "/" + message), str(info.value)
    assert "\n" not in str(info.value)


def test_missing_profile(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_profile(tmp_path / "nope.toml")
    assert str(info.value) == (
        f"{tmp_path}/nope.toml: cannot read the profile: No such file or directory"
    )


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=300),
        st.binary(max_size=100),
        st.lists(
            st.sampled_from(
                [
                    'name = "x"',
                    "name = 1",
                    "[thresholds]",
                    "aer_correctable_warn = 3",
                    "aer_correctable_fail = -1",
                    "replay_fail = 0",
                    "[[gpu]]",
                    'pci_address = "05:00.0"',
                    'pci_address = "zz"',
                    "speed_gts = 8.0",
                    "speed_gts = 7",
                    "width = 8",
                    "width = true",
                    "socket = 1",
                    'socket = "a"',
                    "[[pair]]",
                    'gpus = ["05:00.0", "09:00.0"]',
                    "gpus = 3",
                    "gpu = 1",
                    "pair = []",
                    "[gpu]",
                    "x = 1",
                    "[[thresholds]]",
                    "note = 1",
                ]
            ),
            max_size=12,
        ).map("\n".join),
    )
)
def test_hypothesis_any_profile_text_loads_or_fails_in_one_line(tmp_path_factory, text):
    path = tmp_path_factory.mktemp("p") / "p.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    try:
        profile = load_profile(path)
    except ConfigError as exc:
        assert str(exc).startswith(f"{path}:")
        assert "\n" not in str(exc)
        return
    assert all(g.pci_address.startswith("0000:") for g in profile.gpus)
    assert all(a < b for a, b in profile.pairs)


def _profile(tmp_path, text):
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


def test_profile_pairs_and_thresholds_drive_the_run(tmp_path):
    # the profile's pairs replace the proposed ones and are verified: a cross-socket pair fails
    path = _profile(
        tmp_path,
        '[[pair]]\ngpus = ["05:00.0", "86:00.0"]\n[thresholds]\naer_correctable_fail = 10000\n',
    )
    report = preflight_report(SYSFS_FIXTURES / "x99-r9700-degraded", tmp_path / "s",
                              PreflightOptions(profile=path))
    assert report.requested == (("0000:05:00.0", "0000:86:00.0"),)
    pairs = [
        (f.check_id, f.severity) for f in report.findings if f.check_id.startswith("numa.pair")
    ]
    assert pairs == [("numa.pair.cross_socket", Severity.FAIL)]
    # 6655 BadTLP is below the profile's fail threshold of 10000: a warning, not a failure
    (badtlp,) = [f for f in report.findings if f.check_id == "aer.badtlp"]
    assert badtlp.severity == Severity.WARN


def test_profile_naming_an_absent_gpu_fails(tmp_path):
    path = _profile(tmp_path, '[[gpu]]\npci_address = "0000:42:00.0"\n')
    report = preflight_report(SYSFS_FIXTURES / "x99-r9700", tmp_path / "s",
                              PreflightOptions(profile=path))
    missing = [f for f in report.findings if f.check_id == "profile.gpu.missing"]
    assert [(f.subject, f.severity) for f in missing] == [("0000:42:00.0", Severity.FAIL)]
    unexpected = {f.subject for f in report.findings if f.check_id == "profile.gpu.unexpected"}
    assert len(unexpected) == 4


def test_only_profile_without_a_profile_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"needs an expectations profile \(--profile FILE\)"):
        preflight_report(SYSFS_FIXTURES / "x99-r9700", tmp_path,
                         PreflightOptions(families={"profile"}))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # issue 11: numbers finite and in range, no control characters, no deep nesting
        (
            '[[gpu]]\npci_address = "05:00.0"\nsocket = -1\n',
            "x.toml:3: key 'gpu[0].socket': must be a socket number 0..4095",
        ),
        (
            '[[gpu]]\npci_address = "05:00.0"\nsocket = 99999999999\n',
            "x.toml:3: key 'gpu[0].socket': must be a socket number 0..4095",
        ),
        (
            "[thresholds]\naer_correctable_fail = 9223372036854775807\n",
            "x.toml:2: key 'thresholds.aer_correctable_fail': must be an integer 0..4294967295",
        ),
        (
            "[thresholds]\naer_correctable_fail = inf\n",
            "x.toml:2: key 'thresholds.aer_correctable_fail': must be an integer 0..4294967295",
        ),
        (
            '[[gpu]]\npci_address = "05:00.0"\nspeed_gts = nan\nwidth = 8\n',
            "x.toml:3: key 'gpu[0].speed_gts': must be one of",
        ),
        (
            'name = "x\\u001b[31mred"\n',
            "x.toml:1: key 'name': control character U+001B in the value",
        ),
        (
            'description = "two\\nlines"\n',
            "x.toml:1: key 'description': control character U+000A in the value",
        ),
        ("name = " + "[" * 5000 + "]" * 5000 + "\n", "x.toml:1: not valid TOML: nested too deeply"),
    ],
)
def test_profile_numbers_and_strings_are_checked(tmp_path, text, message):
    path = tmp_path / "x.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_profile(path)
    assert str(info.value).startswith(str(tmp_path) + "/" + message), str(info.value)
    assert "\n" not in str(info.value)


def test_a_5000_digit_integer_exits_2_naming_the_file_and_key(tmp_path, rocmseat_cli):
    """Issue 16: tomllib turns an integer of more than 4,300 digits into ValueError, not
    TOMLDecodeError, and the profile loader let it through: `preflight --profile` died with an
    internal error (exit 3). The one TOML loader (rocmseat.tomlio) names the file, line and key."""
    path = tmp_path / "x.toml"
    path.write_text('name = "x"\n[thresholds]\nreplay_fail = ' + "9" * 5000 + "\n")
    with pytest.raises(ConfigError) as info:
        load_profile(path)
    assert str(info.value) == (f"{path}:3: not valid TOML: key 'thresholds.replay_fail': a number "
                               "with thousands of digits (TOML integers are 64-bit)")
    result = rocmseat_cli("preflight", "--profile", str(path), "--sysfs-root",
                          str(SYSFS_FIXTURES / "x99-r9700"), "--state-dir",
                          str(tmp_path / "state"))
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith(f"rocmseat: error: {path}:3: not valid TOML: key "
                                    "'thresholds.replay_fail': ")
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
