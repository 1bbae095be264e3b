"""The partition mode of an Instinct GPU is part of its replica's arch (rocmseat.placement.record
.key_arch): SPX -> CPX on the hive fixture changes the config key, and the store moves the
SPX cache aside as for any key change."""

from __future__ import annotations

from pathlib import Path

from rocmseat.cache.key import compute_key
from rocmseat.cache.store import prepare
from rocmseat.placement.place import place
from tests.cache.builders import rocm_seat
from tests.conftest import FIXTURES

SYSFS = FIXTURES / "sysfs"
ENGINE = {"vllm": "0.33.0", "torch": "2.13.0+rocm7.2", "hip": "7.2.1"}
MODEL = {"config_sha256": "1" * 64}


def _key(seat, tree, state):
    placed = place(seat, sysfs_root=SYSFS / tree, state_root=state)
    arch, why = placed.arch("r0")
    assert why == ""
    return arch, placed.get("r0"), compute_key(seat, engine=ENGINE, gpu_arch=arch, model=MODEL,
                                               drafter=MODEL)


def test_spx_to_cpx_changes_the_key_and_moves_the_cache_aside(tmp_path: Path) -> None:
    seat = rocm_seat(tmp_path, ("tp = 2", "tp = 1"))
    spx_arch, spx_record, spx = _key(seat, "mi300x-hive", tmp_path / "state")
    cpx_arch, cpx_record, cpx = _key(seat, "mi300x-hive-cpx", tmp_path / "state")
    assert (spx_arch, cpx_arch) == ("gfx942@SPX/NPS1", "gfx942@CPX/NPS4")
    assert spx_record.partitions == ("SPX/NPS1",) and spx_record.hip_indices == (0,)
    # HIP numbers each CPX partition as a device: no index is assumed from PCI order
    assert cpx_record.hip_indices is None and "only the HIP probe" in cpx_record.hip_note
    assert spx.digest != cpx.digest
    cache = spx_record.cache_dir
    first = prepare(cache, spx, seat_name=seat.name)
    assert first.state_before == "absent"
    again = prepare(cache, cpx, seat_name=seat.name)
    assert again.state_before == "stale" and again.moved_aside is not None
    assert again.moved_aside.exists() and again.moved_aside.name.startswith("r0.stale-")
    assert [(c.factor, c.old, c.new) for c in again.changed
            if c.factor == "gpu_arch"] == [("gpu_arch", "gfx942@SPX/NPS1", "gfx942@CPX/NPS4")]


def test_gpus_without_partition_files_keep_their_arch(tmp_path: Path) -> None:
    seat = rocm_seat(tmp_path)
    placed = place(seat, sysfs_root=SYSFS / "mi300x-8gpu", state_root=tmp_path / "state")
    assert placed.arch("r0") == ("gfx942", "") and placed.get("r0").partitions is None
