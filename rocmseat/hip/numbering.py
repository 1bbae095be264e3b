"""How the ROCm runtime numbers GPUs, as pure functions (docs/hip.md, "Numbering").

Two layers select and order the GPUs a process sees:

1. ROCr, from `ROCR_VISIBLE_DEVICES`: a comma-separated list of indices into the KFD topology's
   GPU nodes (or `GPU-<uuid>` prefixes). The listed GPUs are surfaced in the order listed; a token
   that is not an index or a known UUID, is out of range, or repeats an earlier one ends the list;
   set but empty surfaces no GPU (ROCm/ROCR-Runtime runtime/hsa-runtime/core/runtime/
   amd_filter_device.cpp, `RvdFilter::BuildUsrDeviceList`, `RvdFilter::SelectZeroDevices`).
2. HIP (CLR), from `HIP_VISIBLE_DEVICES`, else `CUDA_VISIBLE_DEVICES`: indices into ROCr's list,
   in the order listed; the first invalid index ends the list, a repeated one is skipped
   (ROCm/clr rocclr/device/rocm/rocdevice.cpp, `Device::init`; `GPU_DEVICE_ORDINAL` is read there
   for OpenCL only).

So under a HIP mask HIP numbers the *visible* GPUs from 0: `HIP_VISIBLE_DEVICES=2,3` makes the
node's GPUs 2 and 3 HIP's devices 0 and 1. An index read by a probe that ran under the mask is
local to that mask, never a node-wide number.

Only ROCr's layer is modelled here: launch assumes the node's numbering (no HIP-level mask)
when HIP is not asked, and asks HIP itself otherwise (docs/hip.md, "Numbering"). HIP's own layer
is never predicted: launch removes inherited HIP masks and sets its own, and checks what HIP
shows under it with the probe (`launch.hip.visible`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

ROCR_MASK = "ROCR_VISIBLE_DEVICES"
# HIP reads the first when it is non-empty, else the second (rocdevice.cpp, Device::init).
HIP_MASKS = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")

# strtol(token, &end, 0) accepting the whole token: decimal, 0x hex or 0 octal, optional sign.
_STRTOL_0 = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)")


def rocr_selection(value: str | None, count: int) -> tuple[int, ...] | None:
    """The KFD GPU indices ROCr surfaces, in its order, for `ROCR_VISIBLE_DEVICES=value` on a node
    with `count` GPUs. None when a token is a UUID: only the runtime can resolve those."""
    if value is None:
        return tuple(range(count))
    if value == "":
        return ()
    chosen: list[int] = []
    parts = value.split(",")
    if parts[-1] == "":
        parts.pop()  # std::getline yields no token after a last ','
    tokens = [token.strip().upper() for token in parts]
    for token in tokens[:count]:  # ROCr evaluates at most as many tokens as there are GPUs
        if token.startswith("G"):
            return None
        if token == "":
            index = 0  # strtol("") is 0 with the end at the terminator: ROCr reads index 0
        elif not _STRTOL_0.fullmatch(token):
            break
        else:
            index = _strtol(token)
        if index < 0 or index >= count or index in chosen:
            break
        chosen.append(index)
    return tuple(chosen)


def _strtol(token: str) -> int:
    body = token.lstrip("+-")
    sign = -1 if token.startswith("-") else 1
    if body[:2] in ("0x", "0X"):
        return sign * int(body[2:], 16)
    return sign * int(body, 8 if len(body) > 1 and body.startswith("0") else 10)


def without_hip_masks(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with the HIP-level masks removed (ROCr's selection stays): the environment in which
    HIP's device numbers are the node's own numbering."""
    return {name: value for name, value in env.items() if name not in HIP_MASKS}
