"""Tier 3: HIP's device numbering as the runtime does it, through the fake libamdhip64 and the
probe's `order` child (rocmseat.hip.probe.probe_order): the mask layers of ROCr and HIP, an
enumeration order that is not PCI bus order, and the pure model of ROCr's layer
(rocmseat.hip.numbering.rocr_selection) that launch's assumption uses, checked against the fake
for the same inputs. HIP's own layer (CLR) is modelled here only, as the oracle the fake is
held to: rocmseat never predicts it (launch asks HIP)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rocmseat.hip.numbering import rocr_selection, without_hip_masks
from rocmseat.hip.probe import probe_order
from tests.hip.conftest import A, B, C, D, x99_bench_env

pytestmark = pytest.mark.hip

BUS = (A, B, C, D)


def clr_selection(ordinals: str, count: int) -> tuple[int, ...] | None:
    """CLR's rule (ROCm/clr rocclr/device/rocm/rocdevice.cpp, `Device::init`): indices into
    ROCr's list of `count` GPUs, in the order listed; the first token that is not a canonical
    index below `count` ends the list, a repeat is skipped; None for a `GPU-` UUID token."""
    if not ordinals:
        return tuple(range(count))
    chosen: list[int] = []
    for token in ordinals.split(","):
        if "GPU-" in token:
            return None
        if not re.fullmatch(r"0|[1-9][0-9]*", token) or int(token) >= count:
            break
        if int(token) not in chosen:
            chosen.append(int(token))
    return tuple(chosen)


@pytest.mark.parametrize(("ordinals", "expected"), [
    ("", (0, 1, 2, 3)), ("2,3", (2, 3)), ("3,1", (3, 1)), ("1,1,2", (1, 2)),
    ("1,4,2", (1,)), ("01,2", ()), (" 1", ()), ("GPU-1234", None),
])
def test_clr_selection(ordinals, expected):
    assert clr_selection(ordinals, 4) == expected


def order(fake_hip: Path, shm_prefix: str, kfd: tuple[str, ...],
          **masks: str) -> tuple[str, ...]:
    env = x99_bench_env(shm_prefix) | {"FAKEHIP_DEVICES": ",".join(kfd), **masks}
    got = probe_order(env, stage_timeout_s=10.0, library=fake_hip)
    assert got.failure is None, got.failure
    return got.devices


@pytest.mark.parametrize(
    ("masks", "expected"),
    [
        ({}, (A, B, C, D)),
        # under a HIP mask the visible devices are numbered from 0: r1's 2,3 are its 0,1
        ({"HIP_VISIBLE_DEVICES": "2,3"}, (C, D)),
        ({"HIP_VISIBLE_DEVICES": "3,2"}, (D, C)),
        ({"CUDA_VISIBLE_DEVICES": "1"}, (B,)),  # read when HIP_VISIBLE_DEVICES is unset
        ({"HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "3"}, (A,)),  # HIP's wins
        ({"ROCR_VISIBLE_DEVICES": "2,3"}, (C, D)),
        # HIP's mask indexes ROCr's selection, not the node
        ({"ROCR_VISIBLE_DEVICES": "2,3", "HIP_VISIBLE_DEVICES": "1"}, (D,)),
        ({"ROCR_VISIBLE_DEVICES": "3,2,1,0", "HIP_VISIBLE_DEVICES": "0,1"}, (D, C)),
        ({"HIP_VISIBLE_DEVICES": "1,7,2"}, (B,)),  # the first invalid index ends the list
        ({"HIP_VISIBLE_DEVICES": "1,1,2"}, (B, C)),  # a repeat is skipped
        ({"ROCR_VISIBLE_DEVICES": "1,1,2"}, (B,)),  # ROCr: a repeat ends the list
    ],
)
def test_the_fake_numbers_devices_as_the_runtime_does(fake_hip, shm_prefix, masks, expected):
    assert order(fake_hip, shm_prefix, BUS, **masks) == expected


def test_an_enumeration_order_that_is_not_bus_order(fake_hip, shm_prefix):
    kfd = (C, D, A, B)
    assert order(fake_hip, shm_prefix, kfd) == kfd
    assert order(fake_hip, shm_prefix, kfd, HIP_VISIBLE_DEVICES="2,3") == (A, B)
    assert order(fake_hip, shm_prefix, kfd, ROCR_VISIBLE_DEVICES="1,0,3,2") == (D, C, B, A)


@pytest.mark.parametrize("rocr", [None, "", "3,2", "0x2,3", "1,9,2", "1,1,2", ",1", "2,",
                                  "0,1,2,3,0", " 1 , 2 "])
@pytest.mark.parametrize("hip", ["", "0", "1,0", "2,9,0", "1,1", "01", "3"])
def test_the_pure_model_agrees_with_the_fake(fake_hip, shm_prefix, rocr, hip):
    """launch's assumption (no probe) applies rocmseat.hip.numbering to PCI bus order: the
    same inputs through the fake give the same devices."""
    masks = {"HIP_VISIBLE_DEVICES": hip} if hip else {}
    if rocr is not None:
        masks["ROCR_VISIBLE_DEVICES"] = rocr
    rocr_list = rocr_selection(rocr, len(BUS))
    assert rocr_list is not None
    selected = clr_selection(hip, len(rocr_list))
    assert selected is not None
    expected = tuple(BUS[rocr_list[i]] for i in selected)
    env = x99_bench_env(shm_prefix) | {"FAKEHIP_DEVICES": ",".join(BUS), **masks}
    got = probe_order(env, stage_timeout_s=10.0, library=fake_hip)
    if not expected:  # the runtime then has no device at all
        assert got.failure == "hipGetDeviceCount: hipErrorNoDevice (100)"
    else:
        assert got.devices == expected


def test_launch_reads_the_order_without_hip_masks():
    env = {"HIP_VISIBLE_DEVICES": "2,3", "CUDA_VISIBLE_DEVICES": "2,3",
           "ROCR_VISIBLE_DEVICES": "3,2,1,0", "PATH": "/bin"}
    assert without_hip_masks(env) == {"ROCR_VISIBLE_DEVICES": "3,2,1,0", "PATH": "/bin"}


def test_no_runtime_is_a_reason_not_an_order(tmp_path):
    got = probe_order({"ROCM_PATH": str(tmp_path)}, stage_timeout_s=10.0,
                      library=tmp_path / "libamdhip64.so")
    assert got.devices == () and got.failure is not None and "libamdhip64" in got.failure
