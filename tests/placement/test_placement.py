"""The placement resolver (rocmseat.placement.resolve): one record per replica, from the shipped
seats and the fixture trees; the HIP numbering rules; placement.json both ways."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rocmseat.errors import ConfigError, NoDeviceError
from rocmseat.hip.numbering import rocr_selection
from rocmseat.node.inventory import read_inventory
from rocmseat.placement.record import (
    HIP_ORDER_ASSUMED,
    HIP_ORDER_PROBED,
    PlacementFileError,
    parse_placement,
    placement_json,
)
from rocmseat.placement.resolve import assumed_numbering, pick, probed_numbering, resolve
from rocmseat.placement.rules import http_base
from rocmseat.seat.load import load_seat
from tests.conftest import FIXTURES, REPO

SYSFS = FIXTURES / "sysfs"
R9700 = (REPO / "launchers" / "r9700-mxfp4-dflash.toml").read_text()
DEMO = (REPO / "launchers" / "demo-cpu.toml").read_text()
STATE = Path("/srv/state")
A, B, C, D = "0000:05:00.0", "0000:09:00.0", "0000:86:00.0", "0000:89:00.0"


def seat_from(tmp_path, text, name="seat.toml"):
    (tmp_path / "checks").mkdir(exist_ok=True)
    path = tmp_path / "launchers" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return load_seat(path)


def x99(host="x99-r9700"):
    return read_inventory(SYSFS / host)


def test_shipped_r9700_seat_on_the_x99_tree():
    seat = load_seat(REPO / "launchers" / "r9700-mxfp4-dflash.toml")
    r0, r1 = resolve(seat, x99(), state_root=STATE)
    assert (r0.replica, r0.index, r0.port, r0.pci_pair) == ("r0", 0, 8000, (A, B))
    assert (r1.replica, r1.index, r1.port, r1.pci_pair) == ("r1", 1, 8001, (C, D))
    assert (r0.hip_indices, r1.hip_indices) == ((0, 1), (2, 3))
    assert r0.hip_index_source == HIP_ORDER_ASSUMED
    assert r0.hip_note == "indices by PCI bus order, assumed"
    assert (r0.numa.node, r1.numa.node) == (0, 1)
    assert r0.numa.cpulist == "0-13,28-41" and r1.numa.cpus[:2] == (14, 15)
    assert r0.gfx_targets == ("gfx1201", "gfx1201")
    assert r1.cache_dir == Path("/var/cache/rocmseat/r9700-mxfp4-dflash/r1")
    assert r1.state_dir == STATE / "seats" / "r9700-mxfp4-dflash" / "r1"
    assert r1.base_url == "http://127.0.0.1:8001"


def test_cpu_seat_is_one_replica_without_gpus():
    seat = load_seat(REPO / "launchers" / "demo-cpu.toml")
    [r0] = resolve(seat, None, state_root=STATE)
    assert (r0.replica, r0.port, r0.pci_pair, r0.hip_indices, r0.gfx_targets) == (
        "r0", 8100, (), (), ())
    assert r0.numa.node is None and "backend cpu" in r0.numa.note


def test_auto_seat_needs_the_node(tmp_path):
    seat = seat_from(tmp_path, R9700)
    with pytest.raises(NoDeviceError, match="an auto seat's pairs come from the node"):
        resolve(seat, None, state_root=STATE)
    with pytest.raises(NoDeviceError):
        resolve(seat, x99("no-amdgpu"), state_root=STATE)


def test_explicit_seat_places_without_the_node(tmp_path):
    text = R9700.replace('mode = "auto"', f'mode = "explicit"\npairs = [["{C}", "{D}"], '
                         f'["{A}", "{B}"]]')
    seat = seat_from(tmp_path, text)
    s0, s1 = resolve(seat, None, state_root=STATE)
    assert (s0.pci_pair, s0.port, s1.pci_pair, s1.port) == ((C, D), 8000, (A, B), 8001)
    # nothing about the GPUs is known without the inventory, and it says so
    assert s0.hip_indices is None and "not read here" in s0.hip_note
    assert s0.gfx_targets is None and s0.numa.node is None
    # with it, the explicit order is kept and the numbering is the node's
    n0, _ = resolve(seat, x99(), state_root=STATE)
    assert n0.hip_indices == (2, 3) and n0.numa.node == 1


def test_explicit_pair_not_on_the_node(tmp_path):
    text = R9700.replace('mode = "auto"', f'mode = "explicit"\npairs = [["{A}", "{B}"], '
                         f'["{C}", "0000:aa:00.0"]]')
    seat = seat_from(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        resolve(seat, x99(), state_root=STATE)
    assert re.search(r"seat.toml:\d+: key 'replicas.pairs\[1\]': GPU 0000:aa:00.0 is not in the "
                     r"inventory", info.value.message)


def test_more_pairs_than_names_is_located(tmp_path):
    seat = seat_from(tmp_path, R9700)
    with pytest.raises(ConfigError, match=r"seat\.toml:\d+: key 'replicas\.names': .*\b2 "
                                          r"names for 4 replicas"):
        resolve(seat, x99("mi300x-8gpu"), state_root=STATE)


@pytest.mark.parametrize("name", ["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                                  "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"])
def test_seat_must_not_select_devices(tmp_path, name):
    seat = seat_from(tmp_path, R9700.replace('NCCL_PROTO = "Simple"',
                                             f'NCCL_PROTO = "Simple"\n{name} = "0,1"'))
    with pytest.raises(ConfigError, match=rf"key 'env.{name}': is set per replica"):
        resolve(seat, x99(), state_root=STATE)


def test_port_past_65535_names_port_base_and_its_line(tmp_path):
    """Issue 10: with auto pairs the seat file alone cannot tell the replica count, so the
    load-time check let port_base = 65535 through and r1 was planned on port 65536."""
    text = R9700.replace("port_base = 8000", "port_base = 65535").replace(
        'names = ["r0", "r1"]', "")
    seat = seat_from(tmp_path, text)
    line = next(i for i, x in enumerate(text.splitlines(), 1) if x.startswith("port_base"))
    with pytest.raises(ConfigError) as info:
        resolve(seat, x99(), state_root=STATE)
    assert info.value.message == (
        f"{tmp_path / 'launchers' / 'seat.toml'}:{line}: key 'serve.port_base': replica r1 "
        "(index 1) would listen on port 65536: 65535 + 1 is past 65535")
    assert "\n" not in info.value.message


def test_ports_follow_the_index_not_a_list_position(tmp_path):
    seat = seat_from(tmp_path, R9700.replace('names = ["r0", "r1"]', 'names = ["left", "right"]'))
    left, right = resolve(seat, x99(), state_root=STATE)
    assert (left.replica, left.port, right.replica, right.port) == ("left", 8000, "right", 8001)
    assert pick((left, right), "right") is right
    with pytest.raises(ConfigError, match=r"--replica 'r1': no such replica in this seat "
                                          r"\(replicas: left, right\)"):
        pick((left, right), "r1")


def test_numa_unknown_is_not_bound(tmp_path):
    seat = seat_from(tmp_path, R9700.replace('names = ["r0", "r1"]', ""))
    [r0] = resolve(seat, x99("single-socket-numa-unknown"), state_root=STATE)
    assert r0.numa.node is None and "not bound" in r0.numa.note


# ----- HIP numbering ---------------------------------------------------------------------


@pytest.mark.parametrize(("value", "expected"), [
    (None, (0, 1, 2, 3)),
    ("", ()),  # set but empty: ROCr surfaces no GPU
    ("3,2", (3, 2)),
    ("0x2, 3", (2, 3)),  # strtol base 0, tokens trimmed
    ("1,9,2", (1,)),  # out of range ends the list
    ("1,1,2", (1,)),  # a repeat ends the list
    ("1,x,2", (1,)),
    ("2,", (2,)),  # getline: no token after a last ','
    (",1", (0, 1)),  # an empty token is strtol("") = 0
    ("0,1,2,3,0", (0, 1, 2, 3)),  # at most as many tokens as GPUs
    ("GPU-abcdef0123456789", None),  # a UUID: only the runtime knows it
])
def test_rocr_selection(value, expected):
    assert rocr_selection(value, 4) == expected


def test_rocr_visible_devices_renumbers_the_node():
    numbering = assumed_numbering(x99(), "3,2,1,0")
    assert dict(numbering.by_pci) == {D: 0, C: 1, B: 2, A: 3}
    assert numbering.note == "indices by PCI bus order, assumed, after ROCR_VISIBLE_DEVICES=3,2,1,0"
    only_socket1 = assumed_numbering(x99(), "2,3")
    seat = load_seat(REPO / "launchers" / "r9700-mxfp4-dflash.toml")
    r0, r1 = resolve(seat, x99(), state_root=STATE, numbering=only_socket1)
    assert r1.hip_indices == (0, 1)
    assert r0.hip_indices is None
    assert r0.hip_note.startswith(f"HIP does not see {A}, {B} (indices by PCI bus order, "
                                  "assumed, after ROCR_VISIBLE_DEVICES=2,3; HIP sees: ")


def test_probed_numbering_wins_and_is_said():
    seat = load_seat(REPO / "launchers" / "r9700-mxfp4-dflash.toml")
    numbering = probed_numbering(["0000:86:00.0", "0000:89:00.0", "05:00.0", "0000:09:00.0"])
    r0, r1 = resolve(seat, x99(), state_root=STATE, numbering=numbering)
    assert (r0.hip_indices, r1.hip_indices) == ((2, 3), (0, 1))
    assert r0.hip_index_source == HIP_ORDER_PROBED and r0.hip_note == "indices from the HIP probe"
    uuid = assumed_numbering(x99(), "GPU-0123")
    r0, _ = resolve(seat, x99(), state_root=STATE, numbering=uuid)
    assert r0.hip_indices is None and "only the HIP probe can number them" in r0.hip_note


# ----- URLs --------------------------------------------------------------------------------


@pytest.mark.parametrize(("host", "url"), [
    ("127.0.0.1", "http://127.0.0.1:8000"), ("0.0.0.0", "http://127.0.0.1:8000"),
    ("::", "http://[::1]:8000"), ("::1", "http://[::1]:8000"),
    ("fd00::5", "http://[fd00::5]:8000"), ("serve-1.example", "http://serve-1.example:8000"),
])
def test_http_base_brackets_ipv6(host, url):
    assert http_base(host, 8000) == url


@pytest.mark.parametrize("host", ["127.0.0.1@evil.example/#", "evil.example/x", "a b",
                                  "fe80::1%eth0", "[::1]", "host:80", "1.2.3.999"])
def test_http_base_refuses_what_is_not_a_host(host):
    with pytest.raises(ValueError, match="is not a host name or an IP address"):
        http_base(host, 8000)


# ----- placement.json ----------------------------------------------------------------------


def test_placement_json_round_trip():
    seat = load_seat(REPO / "launchers" / "r9700-mxfp4-dflash.toml")
    for record in resolve(seat, x99(), state_root=STATE):
        doc = json.loads(placement_json(record))
        assert doc["schema"] == "rocmseat.placement/v1"
        assert parse_placement(placement_json(record)) == record


def _doc():
    seat = load_seat(REPO / "launchers" / "r9700-mxfp4-dflash.toml")
    return json.loads(placement_json(resolve(seat, x99(), state_root=STATE)[1]))


@pytest.mark.parametrize(("change", "why"), [
    (lambda d: d.update(schema="rocmseat.placement/v2"), "key 'schema'"),
    (lambda d: d.update(port=70000), "key 'port'"),
    (lambda d: d.update(port=True), "key 'port'"),
    (lambda d: d.update(port=8001.0), "key 'port'"),
    (lambda d: d.update(index=-1), "key 'index'"),
    (lambda d: d.update(replica="../r0"), "key 'replica'"),
    (lambda d: d.update(host="127.0.0.1@evil.example/#"), "key 'host'"),
    (lambda d: d.update(pci_pair=["0000:86:00.0", "nope"]), "key 'pci_pair'"),
    (lambda d: d.update(hip_indices=[0, "1"]), "key 'hip_indices'"),
    (lambda d: d.update(cache_dir="relative/dir"), "key 'cache_dir'"),
    (lambda d: d.update(state_dir="/srv/\nExecStartPre=/evil"), "key 'state_dir'"),
    (lambda d: d["numa"].update(node="1"), "key 'numa.node'"),
    (lambda d: d.update(extra="x"), "key 'extra'"),
    (lambda d: d.update(replica="r" * 33), "key 'replica'"),
    (lambda d: d.pop("hip_note"), "key 'hip_note'"),
])
def test_malformed_placement_json_names_the_key(change, why):
    doc = _doc()
    change(doc)
    with pytest.raises(PlacementFileError, match=re.escape(why)):
        parse_placement(json.dumps(doc))


def test_placement_json_that_is_not_an_object():
    for doc in ([], "x", None, 3):
        with pytest.raises(PlacementFileError, match="not a JSON object"):
            parse_placement(json.dumps(doc))


# ----- a replica's pair is its identity (review of issue 10, defect 1) ------------------------


def lost_tree(tmp_path: Path, address: str = B) -> Path:
    """The X99 node after one GPU fell off: its DRM cards are gone (the reviewer's
    /tmp/review-1/lost is this tree with 09:00.0 removed)."""
    import os
    import shutil

    root = tmp_path / "sys"
    shutil.copytree(SYSFS / "x99-r9700", root, symlinks=True)
    for link in (root / "class" / "drm").iterdir():
        if link.is_symlink() and f"/{address}/" in os.readlink(link):
            link.unlink()
    return root


def test_a_lost_gpu_never_shifts_a_replica_onto_anothers_pair(tmp_path):
    """Before: with 09:00.0 gone the node proposed one pair, (86, 89), and it became r0 (r0's
    name, cache and port on r1's GPUs) while r1 had no placement at all. With each replica's
    pair as its identity, r0 is placed `lost` (naming the GPU) and r1 keeps its pair, index and
    port."""
    seat = load_seat(REPO / "launchers" / "r9700-mxfp4-dflash.toml")
    lost = read_inventory(lost_tree(tmp_path))
    r0, r1 = resolve(seat, lost, state_root=STATE, identities={"r0": (A, B), "r1": (C, D)})
    assert (r0.replica, r0.index, r0.port, r0.pci_pair) == ("r0", 0, 8000, (A, B))
    assert r0.lost == (f"GPU {B} of replica r0's pair ({A}, {B}) is not on this node (no such "
                       f"card under {tmp_path / 'sys'})")
    assert (r1.replica, r1.index, r1.port, r1.pci_pair, r1.lost) == ("r1", 1, 8001, (C, D), "")
    assert r1.cache_dir == Path("/var/cache/rocmseat/r9700-mxfp4-dflash/r1")
    # the assumed numbering is the node's as it is now: 05 -> 0, 86 -> 1, 89 -> 2
    assert r1.hip_indices == (1, 2)


def test_only_the_other_replicas_identity_known(tmp_path):
    """r1 recorded (or pinned) on (86, 89), r0 unknown: the one pair the node still proposes is
    r1's, so r0 is not placed at all (launch then refuses it), never shifted onto it."""
    seat = load_seat(REPO / "launchers" / "r9700-mxfp4-dflash.toml")
    [r1] = resolve(seat, read_inventory(lost_tree(tmp_path)), state_root=STATE,
                   identities={"r1": (C, D)})
    assert (r1.replica, r1.index, r1.port, r1.pci_pair, r1.lost) == ("r1", 1, 8001, (C, D), "")


def test_identities_fill_the_lowest_free_indices_with_the_nodes_other_pairs(tmp_path):
    seat = seat_from(tmp_path, R9700.replace('names = ["r0", "r1"]', ""))
    # r1's identity is the socket-0 pair: the node's other pair goes to r0, not to r2
    r0, r1 = resolve(seat, x99(), state_root=STATE, identities={"r1": (A, B)})
    assert (r0.pci_pair, r1.pci_pair) == ((C, D), (A, B))
    # a GPU claimed by two identities is driven by neither
    s0, s1, s2 = resolve(seat, x99(), state_root=STATE,
                         identities={"r0": (A, B), "r1": (B, A)})
    assert "shares a GPU with replica r1" in s0.lost and "shares a GPU with replica r0" in s1.lost
    assert (s2.replica, s2.pci_pair, s2.lost) == ("r2", (C, D), "")
    # a pair that straddles the sockets is no longer socket-local
    # (B and D, on different sockets, are left unpaired: no replica for them)
    [t0] = resolve(seat, x99(), state_root=STATE, identities={"r0": (A, C)})
    assert t0.lost == (f"replica r0's pair ({A}, {C}) is no longer a socket-local pair of this "
                       "node (sockets 0, 1)")


def test_exporter_on_a_port_of_an_auto_replica_beyond_the_names(tmp_path):
    """Review of issue 10, defect 8: the load-time check knew one replica of an auto seat
    without names (rules.known_replica_count), so an exporter on port_base + 1 passed; the
    resolver knows the real ports."""
    text = (R9700.replace('names = ["r0", "r1"]', "")
            .replace('exporter_listen = "127.0.0.1:9464"', 'exporter_listen = "127.0.0.1:8001"'))
    seat = seat_from(tmp_path, text)  # loads: the file alone names one replica
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "exporter_listen" in x)
    with pytest.raises(ConfigError) as info:
        resolve(seat, x99(), state_root=STATE)
    assert info.value.message == (
        f"{tmp_path / 'launchers' / 'seat.toml'}:{line}: key 'watch.exporter_listen': port 8001 "
        "is replica r1's port (serve.port_base 8000 + 1); pick a port outside 8000..8001")


def _recorded(index: int = 1) -> tuple[object, object]:
    seat = load_seat(REPO / "launchers" / "r9700-mxfp4-dflash.toml")
    return seat, resolve(seat, x99(), state_root=STATE)[index]


@pytest.mark.parametrize(("field", "value", "why"), [
    ("host", "evil.example", "key 'host' is 'evil.example' but the seat gives replica r1 "
     "'127.0.0.1'"),
    ("port", 22, "key 'port' is 22 but the seat gives replica r1 8001"),
    ("index", 0, "key 'index' is 0 but the seat gives replica r1 1"),
    ("cache_dir", Path("/etc"), "key 'cache_dir' is '/etc' but the seat gives replica r1 "
     "'/var/cache/rocmseat/r9700-mxfp4-dflash/r1'"),
    ("state_dir", Path("/srv/other"), "key 'state_dir' is '/srv/other' but the seat gives "
     "replica r1 '/srv/state/seats/r9700-mxfp4-dflash/r1'"),
    ("pci_pair", (C,), "key 'pci_pair length' is 1 but the seat gives replica r1 2"),
    ("replica", "r7", "seat r9700-mxfp4-dflash has no replica 'r7' (r0, r1)"),
    ("seat", "demo-cpu", "the record of seat demo-cpu, not of r9700-mxfp4-dflash"),
])
def test_record_problem_names_what_disagrees_with_the_rule(field, value, why):
    import dataclasses

    from rocmseat.placement.record import record_problem

    seat, record = _recorded()
    assert record_problem(seat, record, STATE) is None
    assert record_problem(seat, dataclasses.replace(record, **{field: value}), STATE) == why


def test_replica_index_is_the_naming_rule(tmp_path):
    from rocmseat.placement.rules import replica_index

    named = load_seat(REPO / "launchers" / "r9700-mxfp4-dflash.toml")
    assert [replica_index(named, n) for n in ("r0", "r1", "r2", "x")] == [0, 1, None, None]
    auto = seat_from(tmp_path, R9700.replace('names = ["r0", "r1"]', ""))
    assert [replica_index(auto, n) for n in ("r0", "r7", "r07", "r", "r-1")] == [
        0, 7, None, None, None]
    assert replica_index(load_seat(REPO / "launchers" / "demo-cpu.toml"), "r1") is None


@pytest.mark.parametrize(("name", "index"), [("r0", 0), ("r1", 1), ("r07", None), ("r", None),
                                             ("r-1", None), ("x", None)])
def test_the_gate_finds_a_replica_by_the_seats_one_naming_rule(tmp_path, name, index):
    """Issue 16: the speculation gate looked a replica up by its own looser rule (`r07` was
    replica 7, `r5` of a one-replica cpu seat was 5): it asks the placement's rule now."""
    from rocmseat.placement.rules import replica_index
    from rocmseat.speculation.gate.arms import replica_slot

    auto = seat_from(tmp_path, R9700.replace('names = ["r0", "r1"]', ""))
    assert replica_index(auto, name) == index
    if index is None:
        with pytest.raises(ConfigError, match="not a replica of seat"):
            replica_slot(auto, name)
    else:
        assert replica_slot(auto, name) == index
    cpu = load_seat(REPO / "launchers" / "demo-cpu.toml")
    with pytest.raises(ConfigError, match=r"not a replica of seat demo-cpu$") as info:
        replica_slot(cpu, "r5")
    assert info.value.hint == "its replicas: r0"


def test_the_gate_takes_its_arm_replica_from_the_placement_record(tmp_path):
    """Issue 32: the gate derived the arm's port from the seat's rule by itself; it reads the
    placement record now, the one watch turns into its scrape target."""
    from rocmseat.speculation.gate.arms import ArmError, arm_placement
    from rocmseat.watch.targets import seat_targets

    state = tmp_path / "arm" / "state"
    cpu = seat_from(tmp_path, DEMO.replace("port_base = 8100", "port_base = 18500"))
    record = arm_placement(cpu, "r0", state)
    assert (record.replica, record.port, record.base_url) == ("r0", 18500,
                                                              "http://127.0.0.1:18500")
    assert record.state_dir == state / "seats" / "demo-cpu" / "r0"
    assert [t.url for t in seat_targets(cpu, state, sysfs_root=None)] == [
        f"{record.base_url}/metrics"]
    rocm = seat_from(tmp_path, R9700, "rocm.toml")
    r1 = arm_placement(rocm, "r1", state, sysfs_root=SYSFS / "x99-r9700")
    assert (r1.port, r1.pci_pair, r1.base_url) == (8001, (C, D), "http://127.0.0.1:8001")
    # an auto seat on a node that shows no GPU: no record, and the gate says why
    auto = seat_from(tmp_path, R9700.replace('names = ["r0", "r1"]', ""), "auto.toml")
    with pytest.raises(ArmError) as info:
        arm_placement(auto, "r0", state, sysfs_root=SYSFS / "no-amdgpu")
    assert info.value.message.startswith(
        "replica r0 of seat r9700-mxfp4-dflash: not placed on this node: seat "
        "r9700-mxfp4-dflash places its replicas from the node's GPUs ([replicas] mode = "
        "'auto') and this host cannot tell them: no AMD GPU under ")
