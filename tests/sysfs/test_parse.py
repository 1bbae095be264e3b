"""Parsers: real kernel formats, malformed input, and hypothesis (only ParseError escapes)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmseat.errors import ParseError
from rocmseat.sysfs import parse as p


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8.0 GT/s PCIe\n", 8.0),
        ("8 GT/s\n", 8.0),  # kernel <= 5.6
        ("2.5 GT/s PCIe\n", 2.5),
        ("2.5 GT/s\n", 2.5),
        ("5 GT/s\n", 5.0),
        ("16.0 GT/s PCIe", 16.0),
        ("32 GT/s\n", 32.0),
        ("64.0 GT/s PCIe\n", 64.0),
        ("Unknown\n", None),
        ("Unknown speed\n", None),
    ],
)
def test_link_speed_both_spellings(text, expected):
    assert p.parse_link_speed(text) == expected


@pytest.mark.parametrize(
    "text", ["", "\n", "8.0 Gb/s", "fast", "7 GT/s", "8.0 GT/s PCIe x16", "-8 GT/s"]
)
def test_link_speed_malformed(text):
    with pytest.raises(ParseError):
        p.parse_link_speed(text, "current_link_speed")


@pytest.mark.parametrize(("text", "expected"), [("16\n", 16), ("0\n", 0), ("8", 8)])
def test_width(text, expected):
    assert p.parse_link_width(text) == expected


@pytest.mark.parametrize("text", ["", "x16", "64", "-1", "1.5", "16 16"])
def test_width_malformed(text):
    with pytest.raises(ParseError):
        p.parse_link_width(text)


def test_numa_node():
    assert p.parse_numa_node("-1\n") is None
    assert p.parse_numa_node("1\n") == 1
    with pytest.raises(ParseError):
        p.parse_numa_node("-2\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0-3,8\n", (0, 1, 2, 3, 8)), ("\n", ()), ("5\n", (5,)), ("0-1,1-2", (0, 1, 2))],
)
def test_cpulist(text, expected):
    assert p.parse_cpulist(text) == expected


@pytest.mark.parametrize("text", ["a-b", "3-1", "0-", ",", "0x3", "0-999999"])
def test_cpulist_malformed(text):
    with pytest.raises(ParseError):
        p.parse_cpulist(text)


def test_hex_ids():
    assert p.parse_hex_id("0x1002\n") == 0x1002
    assert p.parse_hex_id("0x030000\n") == 0x030000
    with pytest.raises(ParseError):
        p.parse_hex_id("1002")


SHORT_COR = (
    "RxErr 0\nBadTLP 6655\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\n"
    "CorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 6655\n"
)
LONG_COR = (
    "Receiver Error 2\nBad TLP 3\nBad DLLP 0\nRELAY_NUM Rollover 0\nReplay Timer Timeout 1\n"
    "Advisory Non-Fatal 0\nCorrected Internal Error 0\nHeader Log Overflow 0\nTOTAL_ERR_COR 6\n"
)


def test_aer_short_names():
    counters = p.parse_aer_counters(SHORT_COR)
    assert counters.as_dict()["BadTLP"] == 6655
    assert counters.total == 6655


def test_aer_long_names_map_to_short():
    counters = p.parse_aer_counters(LONG_COR)
    assert counters.as_dict() == {
        "RxErr": 2,
        "BadTLP": 3,
        "BadDLLP": 0,
        "Rollover": 0,
        "Timeout": 1,
        "NonFatalErr": 0,
        "CorrIntErr": 0,
        "HeaderOF": 0,
    }
    assert counters.total == 6


def test_aer_bit_lines_and_total():
    counters = p.parse_aer_counters("RxErr 0\ndev_cor_errs_bit[9] 2\nTOTAL_ERR_COR 2\n")
    assert counters.as_dict() == {"RxErr": 0, "dev_cor_errs_bit[9]": 2}
    assert counters.total == 2
    fatal = p.parse_aer_counters("Undefined 0\ndev_fatal_errs_bit[2] 1\nTOTAL_ERR_FATAL 1\n")
    assert fatal.as_dict()["dev_fatal_errs_bit[2]"] == 1


@pytest.mark.parametrize(
    "text", ["", "\n", "BadTLP\n", "BadTLP x\n", "BadTLP -1\n", "Bad:TLP 1\n", "12 3\n"]
)
def test_aer_malformed(text):
    with pytest.raises(ParseError):
        p.parse_aer_counters(text, "aer_dev_correctable")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # smu_cmn_print_pcie_levels: space before the star, trailing space when not starred
        (
            "0: 2.5GT/s, x1 97Mhz \n1: 8.0GT/s, x16 619Mhz *\n",
            [(2.5, 1, 97, False), (8.0, 16, 619, True)],
        ),
        # no star at all (nvtop#242)
        (
            "0: 2.5GT/s, x1 78Mhz\n1: 5.0GT/s, x4 156Mhz\n2: 16.0GT/s, x16 623Mhz\n",
            [(2.5, 1, 78, False), (5.0, 4, 156, False), (16.0, 16, 623, False)],
        ),
        # several stars (identical rows both match the current link)
        (
            "0: 16.0GT/s, x16 *\n1: 16.0GT/s, x16 *\n",
            [(16.0, 16, None, True), (16.0, 16, None, True)],
        ),
        # Vega10 format without Mhz, trailing space
        ("0: 8.0GT/s, x16 \n1: 8.0GT/s, x16 *\n", [(8.0, 16, None, False), (8.0, 16, None, True)]),
        # Arcturus: single boot level, always starred
        ("0: 16.0GT/s, x16 1000Mhz *\n", [(16.0, 16, 1000, True)]),
        ("\n", []),  # the ASIC prints nothing: amdgpu emits a lone newline
        ("", []),
    ],
)
def test_pp_dpm_pcie_variants(text, expected):
    levels = p.parse_pp_dpm_pcie(text)
    assert [(lv.speed_gts, lv.width, lv.lclk_mhz, lv.active) for lv in levels] == expected


@pytest.mark.parametrize(
    "text", ["0: fast\n", "x: 8.0GT/s, x16\n", "0: 7.0GT/s, x16 *\n", "0: 8.0GT/s, x16 619Mhz **\n"]
)
def test_pp_dpm_pcie_malformed(text):
    with pytest.raises(ParseError):
        p.parse_pp_dpm_pcie(text, "pp_dpm_pcie")


def test_kfd_properties_and_gfx_target():
    props = p.parse_kfd_properties("simd_count 128\ngfx_target_version 120001\nlocation_id 1280\n")
    assert props["gfx_target_version"] == 120001
    assert p.gfx_target(120001) == "gfx1201"
    assert p.gfx_target(90402) == "gfx942"
    assert p.gfx_target(110502) == "gfx1152"
    assert p.gfx_target(0) is None
    with pytest.raises(ParseError):
        p.parse_kfd_properties("simd_count\n")


def test_addresses():
    assert p.normalize_pci_address("05:00.0") == "0000:05:00.0"
    assert p.normalize_pci_address("0000:86:00.0") == "0000:86:00.0"
    assert p.normalize_pci_address("0000:8A:00.0") == "0000:8a:00.0"
    assert p.normalize_pci_address("5:0.0") is None
    assert p.short_address("0000:05:00.0") == "05:00.0"


PARSERS = [
    p.parse_link_speed,
    p.parse_link_width,
    p.parse_numa_node,
    p.parse_hex_id,
    p.parse_cpulist,
    p.parse_distance,
    p.parse_aer_counters,
    p.parse_pp_dpm_pcie,
    p.parse_kfd_properties,
    p.parse_int,
]
TEXT = st.one_of(
    st.text(max_size=200),
    st.text(alphabet="0123456789.,-: x*GT/sPCIeMhzUnknownTOTAL_ERR_COR[]bit\n ", max_size=120),
)


@pytest.mark.parametrize("parser", PARSERS, ids=lambda f: f.__name__)
@given(text=TEXT)
def test_parsers_raise_only_parse_error(parser, text):
    try:
        parser(text, "f")
    except ParseError as exc:
        assert "\n" not in exc.message  # one line, whatever the file held
        assert exc.message.startswith("f")  # names the file


@given(st.text(max_size=40))
def test_normalize_pci_address_any_text(text):
    address = p.normalize_pci_address(text)
    if address is not None:
        assert p.is_pci_address(address)
        assert p.normalize_pci_address(address) == address
        assert p.normalize_pci_address(address.upper()) == address


@given(st.integers(0, 0xFFFF), st.integers(0, 0xFF), st.integers(0, 0x1F), st.integers(0, 7))
def test_normalize_pci_address_roundtrip(domain, bus, dev, fn):
    full = f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
    assert p.normalize_pci_address(full.upper()) == full
    if domain == 0:
        assert p.normalize_pci_address(p.short_address(full)) == full


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("BadTLP 3 \r\nRxErr 1\r\nTOTAL_ERR_COR 4\r\n", {"BadTLP": 3, "RxErr": 1}),
        (
            "Poisoned TLP Egress Blocked 1\nPoisoned TLP 2\nTOTAL_ERR_NONFATAL 3\n",
            {"PoisonTLPBlocked": 1, "TLP": 2},
        ),
        ("TOTAL_ERR_FATAL 0\n", {}),  # a file with only its TOTAL line
    ],
)
def test_aer_line_endings_long_uncorrectable_and_total_only(text, expected):
    counters = p.parse_aer_counters(text)
    assert counters.as_dict() == expected
    assert counters.total == sum(expected.values())


@given(
    st.lists(
        st.tuples(
            st.sampled_from(p.KNOWN_SPEEDS_GTS),
            st.sampled_from([1, 2, 4, 8, 16]),
            st.one_of(st.none(), st.integers(0, 3000)),
            st.booleans(),
        ),
        max_size=8,
    )
)
def test_pp_dpm_pcie_roundtrip(rows):
    text = "".join(
        f"{i}: {s:.1f}GT/s, x{w}{'' if m is None else f' {m}Mhz'} {'*' if a else ''}\n"
        for i, (s, w, m, a) in enumerate(rows)
    )
    levels = p.parse_pp_dpm_pcie(text)
    assert [(lv.speed_gts, lv.width, lv.lclk_mhz, lv.active) for lv in levels] == rows


@given(
    st.dictionaries(st.sampled_from(list(p.LONG_AER_NAMES)), st.integers(0, 2**64 - 1), min_size=1)
)
def test_aer_long_roundtrip(counts):
    text = "".join(f"{k} {v}\n" for k, v in counts.items()) + "TOTAL_ERR_COR 0\n"
    parsed = p.parse_aer_counters(text).as_dict()
    assert parsed == {p.LONG_AER_NAMES[k]: v for k, v in counts.items()}


@given(st.sets(st.integers(0, 4095), max_size=64))
def test_cpulist_text_roundtrip(cpus):
    from rocmseat.sysfs.pci import _cpulist_text

    ordered = tuple(sorted(cpus))
    text = _cpulist_text(ordered)
    assert p.parse_cpulist(text) == ordered
    assert _cpulist_text(None) is None


@given(st.integers(0, 2**31))
def test_gfx_target_any_version(version):
    target = p.gfx_target(version)
    assert target is None if version == 0 else target.startswith("gfx")


@pytest.mark.parametrize("line", ["TOTAL_ERR_\x00COR 0", "TOTAL_ERR_CORX 0", "TOTAL_ERR_ 3"])
def test_aer_total_names_are_the_kernels_only(line):
    # a NUL inside TOTAL_ERR_COR read as a total: the file counted as readable (hostile battery)
    with pytest.raises(ParseError):
        p.parse_aer_counters(f"RxErr 0\nBadTLP 0\n{line}\n", "aer_dev_correctable")
