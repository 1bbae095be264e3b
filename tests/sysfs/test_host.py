"""This boot's identity under a proc root (rocmseat/sysfs/host.py): the kernel's boot id and host
name, read like any sysfs attribute (regular files only, never a hang, never a guess)."""

from __future__ import annotations

import os

import pytest

from rocmseat.errors import ParseError
from rocmseat.sysfs.host import NO_PROC, parse_boot_id, parse_hostname, read_boot_identity

BOOT = "2b3c0b52-9a8e-4c1e-9f57-6d2f3a1b0c4d"


def _proc(tmp_path, boot=BOOT + "\n", host="gpu07\n"):
    kernel = tmp_path / "proc" / "sys" / "kernel"
    (kernel / "random").mkdir(parents=True)
    if boot is not None:
        (kernel / "random" / "boot_id").write_text(boot)
    if host is not None:
        (kernel / "hostname").write_text(host)
    return tmp_path / "proc"


def test_a_proc_root_as_the_kernel_lays_it_out(tmp_path):
    identity = read_boot_identity(_proc(tmp_path))
    assert (identity.boot_id, identity.host, identity.error) == (BOOT, "gpu07", None)


def test_no_proc_root_is_no_identity_not_an_error():
    assert read_boot_identity(None) == NO_PROC
    assert (NO_PROC.boot_id, NO_PROC.host, NO_PROC.error) == (None, None, None)


@pytest.mark.parametrize(
    ("boot", "host", "needle"),
    [
        (None, "gpu07\n", "boot_id: missing"),
        (BOOT + "\n", None, "hostname: missing"),
        ("", "gpu07\n", "not a boot id"),
        ("not-a-uuid\n", "gpu07\n", "not a boot id"),
        (BOOT.upper() + "\n", "gpu07\n", "not a boot id"),
        (BOOT + "\n" + BOOT + "\n", "gpu07\n", "not a boot id"),
        (BOOT + "\x00\n", "gpu07\n", "not a boot id"),
        (BOOT + "\n", "gpu 07\n", "not a host name"),
        (BOOT + "\n", "\x1b[31mgpu07\n", "not a host name"),
        (BOOT + "\n", "g" * 65 + "\n", "not a host name"),
        (BOOT + "\n", "\n", "not a host name"),
    ],
)
def test_malformed_files_are_an_error_naming_the_file(tmp_path, boot, host, needle):
    identity = read_boot_identity(_proc(tmp_path, boot, host))
    assert identity.error is not None and needle in identity.error
    assert "\n" not in identity.error and str(tmp_path) in identity.error


@pytest.mark.parametrize("kind", ["fifo", "symlink", "directory", "huge"])
def test_a_boot_id_that_is_not_a_regular_file_never_blocks(tmp_path, kind):
    proc = _proc(tmp_path, boot=None)
    path = proc / "sys" / "kernel" / "random" / "boot_id"
    if kind == "fifo":
        os.mkfifo(path)  # read_attr opens non-blocking and checks the type: no hang
    elif kind == "symlink":
        path.symlink_to(tmp_path / "elsewhere")
    elif kind == "directory":
        path.mkdir()
    else:
        path.write_text(BOOT + "\n" + " " * (1 << 17))
    identity = read_boot_identity(proc)
    assert identity.boot_id is None and identity.error is not None


def test_parsers():
    assert parse_boot_id(f"  {BOOT}\n") == BOOT
    assert parse_hostname("gpu07.cluster.example\n") == "gpu07.cluster.example"
    with pytest.raises(ParseError):
        parse_boot_id("0" * 36)
    with pytest.raises(ParseError):
        parse_hostname("-")
