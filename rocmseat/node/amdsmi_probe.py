"""Child program: ask amdsmi about the GPUs and print one JSON object on stdout.

Run as `python -m rocmseat.node.amdsmi_probe` by rocmseat.node.amdsmi_check through the
runner. The PyPI amdsmi wheel ships no libamd_smi.so, prints to stdout and raises KeyError on
import without ROCm (ROCm/amdsmi py-interface/amdsmi_wrapper.py prints its library search), so
fd 1 points at stderr while
amdsmi runs and only the final JSON reaches the real stdout.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _try(func: Any, *args: Any) -> Any:
    try:
        return func(*args)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def collect() -> dict[str, Any]:
    import amdsmi

    amdsmi.amdsmi_init()
    try:
        gpus = []
        for handle in amdsmi.amdsmi_get_processor_handles():
            gpus.append(
                {
                    "bdf": _try(amdsmi.amdsmi_get_gpu_device_bdf, handle),
                    "numa_affinity": _try(amdsmi.amdsmi_get_gpu_topo_numa_affinity, handle),
                    "pcie": _try(amdsmi.amdsmi_get_pcie_info, handle),
                    "replay": _try(amdsmi.amdsmi_get_gpu_pci_replay_counter, handle),
                }
            )
        return {"gpus": gpus}
    finally:
        _try(amdsmi.amdsmi_shut_down)


def main() -> int:
    real_stdout = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    try:
        result = collect()
    except BaseException as exc:  # KeyError on import, AmdSmiLibraryException on init ...
        result = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.flush()
    os.write(real_stdout, (json.dumps(result, default=str) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
