"""The GPU-arch factor of a rocm replica: the gfx targets of the pair its placement gives it
(rocmseat.placement), from fixture sysfs trees or the placement.json launch recorded
(never the host's /sys)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmseat.errors import ConfigError
from rocmseat.placement.place import place
from rocmseat.placement.recorded import write_recorded
from tests.cache.builders import rocm_seat
from tests.conftest import FIXTURES

SYSFS = FIXTURES / "sysfs"
EXPLICIT = ("[env_classes]",
            '[replicas]\nmode = "explicit"\npairs = [["0000:86:00.0", "0000:89:00.0"], '
            '["0000:05:00.0", "0000:0d:00.0"]]\nnames = ["s1", "s0"]\n\n[env_classes]')


def arch_of(seat, replica, sysfs, state=Path("/nonexistent/state")):
    return place(seat, sysfs_root=sysfs, state_root=state).arch(replica)


def test_auto_pairs_from_the_inventory(tmp_path: Path) -> None:
    seat = rocm_seat(tmp_path)
    assert arch_of(seat, "r0", SYSFS / "x99-r9700") == ("gfx1201", "")
    assert arch_of(seat, "r1", SYSFS / "x99-r9700") == ("gfx1201", "")


def test_explicit_pair_off_the_node_is_the_seat_error_launch_gives(tmp_path: Path) -> None:
    seat = rocm_seat(tmp_path, EXPLICIT)
    with pytest.raises(ConfigError, match=r"key 'replicas\.pairs\[1\]': GPU 0000:0d:00\.0 is "
                                          r"not in the inventory"):
        arch_of(seat, "s1", SYSFS / "x99-r9700")


def test_no_gpu_is_unknown_with_the_reason(tmp_path: Path) -> None:
    seat = rocm_seat(tmp_path)
    arch, why = arch_of(seat, "r0", SYSFS / "no-amdgpu", tmp_path / "state")
    assert arch is None
    assert why.startswith(f"seat {seat.name} places its replicas from the node's GPUs "
                          "([replicas] mode = 'auto') and this host cannot tell them: no AMD GPU "
                          f"under {SYSFS / 'no-amdgpu' / 'class' / 'drm'}")
    assert why.endswith(f"and no replica has a placement.json under "
                        f"{tmp_path / 'state' / 'seats' / seat.name} (none was launched with "
                        "this state dir)")
    arch, why = arch_of(seat, "r0", None)
    assert arch is None and "no sysfs root given" in why


def test_recorded_placement_where_sysfs_shows_no_gpu(tmp_path: Path) -> None:
    """A host without the GPUs (a monitoring host) reads the arch launch recorded."""
    seat = rocm_seat(tmp_path)
    launched = place(seat, sysfs_root=SYSFS / "mi300x-8gpu",
                               state_root=tmp_path / "state")
    write_recorded(launched.records[1])
    assert arch_of(seat, "r1", SYSFS / "no-amdgpu", tmp_path / "state") == ("gfx942", "")
    assert arch_of(seat, "r0", SYSFS / "no-amdgpu", tmp_path / "state") == (
        None, "the replica's placement is not known here")


def test_other_arch_changes_the_factor(tmp_path: Path) -> None:
    seat = rocm_seat(tmp_path)
    assert arch_of(seat, "r0", SYSFS / "mi300x-8gpu") == ("gfx942", "")
