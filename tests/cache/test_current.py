"""The GPU-arch factor of a rocm replica, read from fixture sysfs trees (never the host's /sys)."""

from __future__ import annotations

from pathlib import Path

from rocmseat.cache.current import replica_arch
from tests.cache.builders import rocm_seat
from tests.conftest import FIXTURES

SYSFS = FIXTURES / "sysfs"
EXPLICIT = ("[env_classes]",
            '[replicas]\nmode = "explicit"\npairs = [["0000:86:00.0", "0000:89:00.0"], '
            '["0000:05:00.0", "0000:0d:00.0"]]\nnames = ["s1", "s0"]\n\n[env_classes]')


def test_auto_pairs_from_the_inventory(tmp_path: Path) -> None:
    seat = rocm_seat(tmp_path)
    assert replica_arch(seat, "r0", SYSFS / "x99-r9700") == ("gfx1201", "")
    assert replica_arch(seat, "r1", SYSFS / "x99-r9700") == ("gfx1201", "")


def test_explicit_pairs_and_names(tmp_path: Path) -> None:
    seat = rocm_seat(tmp_path, EXPLICIT)
    assert replica_arch(seat, "s1", SYSFS / "x99-r9700") == ("gfx1201", "")
    arch, why = replica_arch(seat, "s0", SYSFS / "x99-r9700")
    assert arch is None
    assert why == (f"GPU(s) of replica s0 (0000:05:00.0, 0000:0d:00.0) not found under "
                   f"{SYSFS / 'x99-r9700'}")


def test_no_gpu_is_unknown_with_the_reason(tmp_path: Path) -> None:
    seat = rocm_seat(tmp_path)
    assert replica_arch(seat, "r0", SYSFS / "no-amdgpu") == (
        None, f"no AMD GPU under {SYSFS / 'no-amdgpu'}")
    assert replica_arch(seat, "r0", None) == (None, "no sysfs root to read the GPUs from")


def test_other_arch_changes_the_factor(tmp_path: Path) -> None:
    seat = rocm_seat(tmp_path)
    assert replica_arch(seat, "r0", SYSFS / "mi300x-8gpu") == ("gfx942", "")
