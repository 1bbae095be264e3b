"""A ctypes binding to the subset of libamdhip64 the IPC/P2P probe needs.

Signatures: ROCm/HIP include/hip/hip_runtime_api.h; behaviour: ROCm/clr hipamd/src
(hip_memory.cpp). Only the probe child (rocmseat.hip.child) calls this: the
preflight process itself never initialises HIP.
"""

from __future__ import annotations

import ctypes

HIP_IPC_HANDLE_SIZE = 64
IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x01  # the only flag hipIpcOpenMemHandle accepts
PCI_BUS_ID_LEN = 64

MEMCPY_HOST_TO_DEVICE = 1
MEMCPY_DEVICE_TO_HOST = 2
MEMCPY_DEVICE_TO_DEVICE = 3

HIP_SUCCESS = 0
HIP_ERROR_NO_DEVICE = 100
HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704


class IpcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HIP_IPC_HANDLE_SIZE)]


class HipCallError(Exception):
    """A HIP call returned an error: its function, enum name and number."""

    def __init__(self, call: str, code: int, name: str) -> None:
        super().__init__(call, code, name)
        self.call = call
        self.code = code
        self.name = name

    def __str__(self) -> str:
        return f"{self.call}: {self.name} ({self.code})"


_P = ctypes.c_void_p
_SIGNATURES: dict[str, list[type]] = {
    "hipRuntimeGetVersion": [ctypes.POINTER(ctypes.c_int)],
    "hipGetDeviceCount": [ctypes.POINTER(ctypes.c_int)],
    "hipSetDevice": [ctypes.c_int],
    "hipDeviceGetPCIBusId": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "hipDeviceCanAccessPeer": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
    "hipDeviceEnablePeerAccess": [ctypes.c_int, ctypes.c_uint],
    "hipMalloc": [ctypes.POINTER(_P), ctypes.c_size_t],
    "hipFree": [_P],
    "hipHostMalloc": [ctypes.POINTER(_P), ctypes.c_size_t, ctypes.c_uint],
    "hipHostFree": [_P],
    "hipMemcpy": [_P, _P, ctypes.c_size_t, ctypes.c_int],
    "hipMemset": [_P, ctypes.c_int, ctypes.c_size_t],
    "hipDeviceSynchronize": [],
    "hipIpcGetMemHandle": [ctypes.POINTER(IpcMemHandle), _P],
    "hipIpcOpenMemHandle": [ctypes.POINTER(_P), IpcMemHandle, ctypes.c_uint],  # handle by value
    "hipIpcCloseMemHandle": [_P],
    # Events time copies on the device's own timeline (what rocm_bandwidth_test reports too).
    "hipEventCreate": [ctypes.POINTER(_P)],
    "hipEventRecord": [_P, _P],
    "hipEventSynchronize": [_P],
    "hipEventElapsedTime": [ctypes.POINTER(ctypes.c_float), _P, _P],
    "hipEventDestroy": [_P],
}


class MissingSymbolError(Exception):
    """The library lacks a function of the subset (not a HIP runtime, or too old)."""


class Hip:
    """Typed calls into one loaded libamdhip64; every error raises HipCallError."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        for name, argtypes in _SIGNATURES.items():
            try:
                func = getattr(lib, name)
            except AttributeError as exc:
                raise MissingSymbolError(f"{lib._name} has no {name}") from exc
            func.argtypes = argtypes
            func.restype = ctypes.c_int
        try:
            self._lib.hipGetErrorName.argtypes = [ctypes.c_int]
            self._lib.hipGetErrorName.restype = ctypes.c_char_p
        except AttributeError as exc:
            raise MissingSymbolError(f"{lib._name} has no hipGetErrorName") from exc

    def error_name(self, code: int) -> str:
        raw = self._lib.hipGetErrorName(code)
        return raw.decode(errors="replace") if isinstance(raw, bytes) else f"hipError{code}"

    def _call(self, name: str, *args: object) -> int:
        code = int(getattr(self._lib, name)(*args))
        if code != HIP_SUCCESS:
            raise HipCallError(name, code, self.error_name(code))
        return code

    def runtime_version(self) -> int:
        value = ctypes.c_int(0)
        self._call("hipRuntimeGetVersion", ctypes.byref(value))
        return value.value

    def device_count(self) -> int:
        value = ctypes.c_int(0)
        self._call("hipGetDeviceCount", ctypes.byref(value))
        return value.value

    def set_device(self, device: int) -> None:
        self._call("hipSetDevice", device)

    def pci_bus_id(self, device: int) -> str:
        buf = ctypes.create_string_buffer(PCI_BUS_ID_LEN)
        self._call("hipDeviceGetPCIBusId", buf, PCI_BUS_ID_LEN, device)
        return buf.value.decode(errors="replace").strip().lower()

    def can_access_peer(self, device: int, peer: int) -> bool:
        value = ctypes.c_int(0)
        self._call("hipDeviceCanAccessPeer", ctypes.byref(value), device, peer)
        return value.value != 0

    def enable_peer_access(self, peer: int) -> None:
        """Enable access from the current device to peer; already enabled is fine.

        (TransferBench EnablePeerAccess accepts hipErrorPeerAccessAlreadyEnabled too.)
        """
        code = int(self._lib.hipDeviceEnablePeerAccess(peer, 0))
        if code not in (HIP_SUCCESS, HIP_ERROR_PEER_ACCESS_ALREADY_ENABLED):
            raise HipCallError("hipDeviceEnablePeerAccess", code, self.error_name(code))

    def malloc(self, size_bytes: int) -> int:
        ptr = _P()
        self._call("hipMalloc", ctypes.byref(ptr), size_bytes)
        return int(ptr.value or 0)

    def free(self, ptr: int) -> None:
        self._call("hipFree", ptr)

    def host_malloc(self, size_bytes: int) -> int:
        ptr = _P()
        self._call("hipHostMalloc", ctypes.byref(ptr), size_bytes, 0)
        return int(ptr.value or 0)

    def host_free(self, ptr: int) -> None:
        self._call("hipHostFree", ptr)

    def memcpy(self, dst: int, src: int, size_bytes: int, kind: int) -> None:
        self._call("hipMemcpy", dst, src, size_bytes, kind)

    def memset(self, dst: int, value: int, size_bytes: int) -> None:
        self._call("hipMemset", dst, value, size_bytes)

    def synchronize(self) -> None:
        self._call("hipDeviceSynchronize")

    def ipc_get_handle(self, ptr: int) -> bytes:
        handle = IpcMemHandle()
        self._call("hipIpcGetMemHandle", ctypes.byref(handle), ptr)
        # Not handle.reserved: a c_char array attribute stops at the first NUL byte.
        return ctypes.string_at(ctypes.addressof(handle), HIP_IPC_HANDLE_SIZE)

    def ipc_open(self, handle: bytes) -> int:
        if len(handle) != HIP_IPC_HANDLE_SIZE:
            raise ValueError(f"an IPC handle is {HIP_IPC_HANDLE_SIZE} bytes, not {len(handle)}")
        value = IpcMemHandle()
        ctypes.memmove(ctypes.addressof(value), handle, HIP_IPC_HANDLE_SIZE)
        ptr = _P()
        self._call("hipIpcOpenMemHandle", ctypes.byref(ptr), value, IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        return int(ptr.value or 0)

    def ipc_close(self, ptr: int) -> None:
        self._call("hipIpcCloseMemHandle", ptr)

    def timed_memcpy_s(self, dst: int, src: int, size_bytes: int, kind: int) -> float:
        """One hipMemcpy bracketed by events on the null stream; seconds on the device clock."""
        start, stop = _P(), _P()
        self._call("hipEventCreate", ctypes.byref(start))
        self._call("hipEventCreate", ctypes.byref(stop))
        try:
            self._call("hipEventRecord", start, None)
            self.memcpy(dst, src, size_bytes, kind)
            self._call("hipEventRecord", stop, None)
            self._call("hipEventSynchronize", stop)
            elapsed = ctypes.c_float(0.0)
            self._call("hipEventElapsedTime", ctypes.byref(elapsed), start, stop)
            return float(elapsed.value) / 1000.0
        finally:
            self._lib.hipEventDestroy(start)
            self._lib.hipEventDestroy(stop)
