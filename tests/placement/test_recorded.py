"""The placement launch recorded, read back as a state file that decides which GPUs a replica
gets (rocmseat.placement.recorded over rocmseat.safeio.read_trusted_state): a record anyone but
its owner could have written is not used, and says why in one line."""

from __future__ import annotations

import os

import pytest

from rocmseat.placement.place import place
from rocmseat.placement.recorded import read_recorded, write_recorded
from rocmseat.seat.load import load_seat
from tests.conftest import FIXTURES, REPO

SEAT = REPO / "launchers" / "r9700-mxfp4-dflash.toml"
X99 = FIXTURES / "sysfs" / "x99-r9700"
NO_GPU = FIXTURES / "sysfs" / "no-amdgpu"


def recorded_r1(tmp_path):
    seat = load_seat(SEAT)
    state = tmp_path / "state"
    path = write_recorded(place(seat, sysfs_root=X99, state_root=state, require_node=True)
                          .pick("r1"))
    return seat, state, path


def test_a_record_of_its_owner_is_used(tmp_path):
    seat, state, _ = recorded_r1(tmp_path)
    recorded = read_recorded(seat, state)
    assert [r.replica for r in recorded.records] == ["r1"] and recorded.problems == {}
    blind = place(seat, sysfs_root=NO_GPU, state_root=state)
    assert [(r.replica, r.pci_pair) for r in blind.records] == [
        ("r1", ("0000:86:00.0", "0000:89:00.0"))]


@pytest.mark.parametrize(("where", "mode"), [("file", 0o666), ("file", 0o620),
                                             ("replica dir", 0o777), ("state dir", 0o757)])
def test_a_record_others_could_have_written_is_not_used(tmp_path, where, mode):
    """Before issue 16 a placement.json writable by anyone was trusted: another user could
    move a replica onto other GPUs, or a monitoring host's cache-audit onto another arch."""
    seat, state, path = recorded_r1(tmp_path)
    target = {"file": path, "replica dir": path.parent, "state dir": state}[where]
    os.chmod(target, mode)
    recorded = read_recorded(seat, state)
    assert recorded.records == ()
    [line] = recorded.problems.values()
    assert "writable by group or others" in line and "\n" not in line
    blind = place(seat, sysfs_root=NO_GPU, state_root=state)
    [r1] = blind.records  # still known by the seat's rule: watched on its port, never launched
    assert (r1.replica, r1.port, r1.pci_pair) == ("r1", 8001, ()) and r1.lost
