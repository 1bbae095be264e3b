"""TP groups of 1, 2, 4 and 8 (rocmseat.placement.groups) on the hive fixtures, and the shipped
MI300X seats placed through the one resolver: replicas = GPUs / tp, every pair of a group one
XGMI hop apart with every link up, a refusal that names the missing link."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from rocmseat.errors import NoDeviceError, RocmseatError
from rocmseat.node.inventory import read_inventory
from rocmseat.placement.groups import group_pairs, plan_groups
from rocmseat.placement.record import parse_placement, placement_json
from rocmseat.placement.resolve import resolve
from rocmseat.preflight.xgmi import link_problem
from rocmseat.seat.load import load_seat
from tests.conftest import FIXTURES, REPO
from tests.sysfs.conftest import fixture_builder

SYSFS = FIXTURES / "sysfs"
STATE = Path("/srv/state")


def _inv(name):
    return read_inventory(SYSFS / name)


def _bdfs():
    return [g.pci_address for g in _inv("mi300x-hive").gpus]


def _seat(name):
    return load_seat(REPO / "launchers" / f"{name}.toml")


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_a_full_hive_places_gpus_over_tp_groups(tp):
    inventory = _inv("mi300x-hive")
    plan = plan_groups(inventory, tp)
    assert len(plan.groups) == 8 // tp
    assert sorted(a for g in plan.groups for a in g) == _bdfs()
    for group in plan.groups:
        assert len(group) == tp
        assert all(link_problem(inventory, a, b) is None for a, b in group_pairs(group))
    if tp in (2, 4):  # NUMA-local first: each group on one node
        nodes = {g.pci_address: g.numa_node for g in inventory.gpus}
        assert all(len({nodes[a] for a in group}) == 1 for group in plan.groups)


def test_group_pairs_of_tp8_are_28():
    assert len(group_pairs(_bdfs())) == 28 == len(set(group_pairs(_bdfs())))


def test_the_degraded_hive_refuses_tp8_naming_both_links():
    builder = fixture_builder()
    bdfs = _bdfs()
    plan = plan_groups(_inv("mi300x-hive-degraded"), 8)
    assert plan.groups == ()
    for a, b in ((1, 2), (1, 3)):
        port = builder.xgmi_port(a, b)
        assert (f"the xGMI link {bdfs[a]} -> {bdfs[b]} is inactive "
                f"(xgmi_link_status[{port}] = 0 on {bdfs[a]})") in plan.why


def test_the_degraded_hive_places_tp4x2_around_the_bad_links():
    bdfs = _bdfs()
    plan = plan_groups(_inv("mi300x-hive-degraded"), 4)
    assert len(plan.groups) == 2 and plan.why == ""
    bad = {frozenset((bdfs[1], bdfs[2])), frozenset((bdfs[1], bdfs[3]))}
    for group in plan.groups:
        assert not any(frozenset(p) in bad for p in itertools.combinations(group, 2))


def test_a_split_hive_or_cpx_places_no_group_above_tp2():
    split = plan_groups(_inv("mi300x-hive-split"), 4)
    assert split.groups == () and "0000:df:00.0 is in no XGMI hive" in split.why
    cpx = plan_groups(_inv("mi300x-hive-cpx"), 8)
    assert cpx.groups == () and "compute partition CPX" in cpx.why
    assert len(plan_groups(_inv("mi300x-hive-cpx"), 1).groups) == 8


def test_radeon_boards_keep_socket_local_pairs():
    x99 = _inv("x99-r9700")
    assert plan_groups(x99, 2).groups == (("0000:05:00.0", "0000:09:00.0"),
                                          ("0000:86:00.0", "0000:89:00.0"))
    assert plan_groups(x99, 4).groups == () and "no single XGMI hive" in plan_groups(x99, 4).why
    assert plan_groups(x99, 3).why.startswith("tp = 3")


@pytest.mark.parametrize("seat,replicas", [("mi300x-tp8", 1), ("mi300x-tp4x2", 2),
                                           ("mi300x-dp8", 8)])
def test_the_shipped_mi300x_seats_place_gpus_over_tp_replicas(seat, replicas):
    loaded = _seat(seat)
    records = resolve(loaded, _inv("mi300x-hive"), state_root=STATE)
    assert len(records) == replicas == 8 // loaded.tp
    assert all(len(r.pci_pair) == loaded.tp and r.gfx_targets == ("gfx942",) * loaded.tp
               for r in records)
    assert sorted(a for r in records for a in r.pci_pair) == _bdfs()
    # one record for any group size: placement.json round-trips
    for record in records:
        assert parse_placement(placement_json(record)) == record


def test_tp8_on_the_degraded_tree_is_a_refused_start_naming_the_link():
    with pytest.raises(RocmseatError) as refused:
        resolve(_seat("mi300x-tp8"), _inv("mi300x-hive-degraded"), state_root=STATE)
    assert not isinstance(refused.value, NoDeviceError)
    assert refused.value.exit_code == 1
    assert "0000:22:00.0 -> 0000:38:00.0 is inactive" in refused.value.message


def test_a_group_identity_across_a_dead_link_is_lost():
    bdfs = _bdfs()
    seat = _seat("mi300x-tp4x2")
    held = {"r0": tuple(bdfs[:4]), "r1": tuple(bdfs[4:])}
    r0, r1 = resolve(seat, _inv("mi300x-hive-degraded"), state_root=STATE, identities=held)
    assert "no longer all one XGMI hop apart" in r0.lost and "inactive" in r0.lost
    assert r1.lost == ""
    r0, r1 = resolve(seat, _inv("mi300x-hive"), state_root=STATE, identities=held)
    assert (r0.lost, r1.lost) == ("", "")
