"""Tier 3: the binding against the fake library in this process: the CLR rules the fake copies."""

from __future__ import annotations

import ctypes
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocmseat.hip import api, library
from tests.hip.conftest import A, B

pytestmark = pytest.mark.hip


@pytest.fixture
def hip(
    fake_hip: Path, monkeypatch: pytest.MonkeyPatch, shm_prefix: str, tmp_path: Path
) -> Iterator[api.Hip]:
    # The fake reads its configuration once per process at the first call; a private copy of the
    # file gives each test a fresh instance (dlopen keys on the path).
    private = tmp_path / "libamdhip64.so"
    shutil.copyfile(fake_hip, private)
    monkeypatch.setenv("FAKEHIP_DEVICES", f"{A},{B}")
    monkeypatch.setenv("FAKEHIP_SHM_PREFIX", shm_prefix)
    yield api.Hip(library.load({}, private).lib)


def test_error_names_are_hips_enum_names(hip: api.Hip) -> None:
    assert hip.error_name(17) == "hipErrorInvalidDevicePointer"
    assert hip.error_name(201) == "hipErrorInvalidContext"
    assert hip.error_name(100) == "hipErrorNoDevice"
    assert hip.error_name(12345) == "hipErrorUnknown"


def test_opening_a_handle_in_the_exporting_process_is_invalid_context(hip: api.Hip) -> None:
    hip.set_device(0)
    ptr = hip.malloc(4096)
    handle = hip.ipc_get_handle(ptr)
    assert len(handle) == api.HIP_IPC_HANDLE_SIZE
    with pytest.raises(api.HipCallError) as err:
        hip.ipc_open(handle)
    assert (err.value.call, err.value.code, err.value.name) == (
        "hipIpcOpenMemHandle", 201, "hipErrorInvalidContext")
    assert str(err.value) == "hipIpcOpenMemHandle: hipErrorInvalidContext (201)"
    hip.free(ptr)


def test_open_requires_the_lazy_peer_flag(hip: api.Hip, tmp_path: Path) -> None:
    hip.set_device(0)
    ptr = hip.malloc(4096)
    handle = api.IpcMemHandle()
    lib = ctypes.CDLL(str(tmp_path / "libamdhip64.so"))  # the same instance as the fixture's
    assert lib.hipIpcGetMemHandle(ctypes.byref(handle), ctypes.c_void_p(ptr)) == 0
    out = ctypes.c_void_p()
    lib.hipIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), api.IpcMemHandle,
                                        ctypes.c_uint]
    assert lib.hipIpcOpenMemHandle(ctypes.byref(out), handle, 0) == 1  # hipErrorInvalidValue
    hip.free(ptr)


def test_handle_of_a_non_base_pointer_is_invalid_value(hip: api.Hip) -> None:
    hip.set_device(0)
    ptr = hip.malloc(4096)
    with pytest.raises(api.HipCallError) as err:
        hip.ipc_get_handle(ptr + 64)
    assert err.value.code == 1
    hip.free(ptr)


def test_peer_rules_follow_clr(hip: api.Hip) -> None:
    assert hip.can_access_peer(0, 1) is True
    assert hip.can_access_peer(0, 0) is False  # "Peer cannot be self": 0 with hipSuccess
    with pytest.raises(api.HipCallError) as err:
        hip.can_access_peer(0, 7)
    assert err.value.name == "hipErrorInvalidDevice"
    hip.set_device(0)
    hip.enable_peer_access(1)
    hip.enable_peer_access(1)  # hipErrorPeerAccessAlreadyEnabled is accepted


def test_pci_bus_ids_and_device_count(hip: api.Hip) -> None:
    assert hip.device_count() == 2
    assert [hip.pci_bus_id(i) for i in range(2)] == [A, B]
    with pytest.raises(api.HipCallError) as err:
        hip.set_device(2)
    assert err.value.code == 101


def test_memcpy_round_trip_and_event_timing(hip: api.Hip) -> None:
    hip.set_device(1)
    n = 1 << 16
    dev, src, dst = hip.malloc(n), hip.host_malloc(n), hip.host_malloc(n)
    ctypes.memset(src, 0xA5, n)
    hip.memset(dev, 0, n)
    seconds = hip.timed_memcpy_s(dev, src, n, api.MEMCPY_HOST_TO_DEVICE)
    assert seconds >= 0
    hip.memcpy(dst, dev, n, api.MEMCPY_DEVICE_TO_HOST)
    hip.synchronize()
    assert ctypes.string_at(dst, n) == b"\xa5" * n
    with pytest.raises(api.HipCallError):  # a host pointer is not device memory
        hip.memcpy(dst, src, n, api.MEMCPY_DEVICE_TO_HOST)
    for p in (src, dst):
        hip.host_free(p)
    hip.free(dev)
