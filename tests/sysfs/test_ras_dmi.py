"""amdgpu's ras/ formats (amdgpu_ras.c) and the DMI hypervisor names: tables of real and
malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocmseat.errors import ParseError
from rocmseat.sysfs.dmi import DmiIdentity
from rocmseat.sysfs.ras import (
    BadPage,
    parse_bad_pages,
    parse_err_count,
    parse_features,
    read_ras,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("ue: 0\nce: 0\n", (0, 0, None)),
        ("ue: 3\nce: 17\nde: 2\n", (3, 17, 2)),  # the UMC block of newer kernels
        ("Query currently inaccessible\n", None),  # RAS recovery
    ],
)
def test_err_count(text, value):
    assert parse_err_count(text) == value


@pytest.mark.parametrize(
    "text",
    ["", "ue: 1\n", "ce: 1\n", "ue: -1\nce: 0\n", "ue: 1\nue: 2\nce: 0\n", "ue: 1 ce: 0\n",
     "ue: 1\nce: 0\nxx: 3\n", "ue: 123456789012345678901\nce: 0\n"],
)
def test_err_count_malformed(text):
    with pytest.raises(ParseError):
        parse_err_count(text, "ras/umc_err_count")


def test_features_and_bad_pages():
    assert parse_features("feature mask: 0x3fff\n") == 0x3FFF
    with pytest.raises(ParseError):
        parse_features("feature mask: 3fff\n")
    assert parse_bad_pages("") == ()
    assert parse_bad_pages("0x0007f000 : 0x00001000 : R\n0x0007f001 : 0x00001000 : F\n") == (
        BadPage(0x7F000, 0x1000, "R"), BadPage(0x7F001, 0x1000, "F"),
    )
    with pytest.raises(ParseError):
        parse_bad_pages("0x1 : 0x1000 : X\n")


@given(st.text(max_size=200))
def test_parsers_raise_parse_error_or_return(text):
    for parser in (parse_err_count, parse_features, parse_bad_pages):
        try:
            parser(text)
        except ParseError:
            pass


def test_read_ras_absent_and_symlinked(tmp_path):
    assert read_ras(tmp_path) is None
    real = tmp_path / "elsewhere"
    real.mkdir()
    (tmp_path / "ras").symlink_to(real)
    reading = read_ras(tmp_path)
    assert reading is not None and reading.errors and "symbolic link" in reading.errors[0]


@pytest.mark.parametrize(
    ("vendor", "product", "hypervisor"),
    [
        ("QEMU", "Standard PC (Q35 + ICH9, 2009)", "QEMU"),
        ("VMware, Inc.", "VMware Virtual Platform", "VMware"),
        ("Microsoft Corporation", "Virtual Machine", "Microsoft Hyper-V"),
        ("Microsoft Corporation", "Surface Laptop 5", None),
        ("Xen", "HVM domU", "Xen"),
        ("innotek GmbH", "VirtualBox", "VirtualBox"),
        ("Supermicro", "SYS-4029GP-TRT", None),
        (None, None, None),
    ],
)
def test_dmi_hypervisor(vendor, product, hypervisor):
    assert DmiIdentity(vendor, product).hypervisor == hypervisor
