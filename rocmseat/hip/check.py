"""The HIP IPC/P2P check: probe each pair in child processes, judge the results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rocmseat.findings import Finding, Severity
from rocmseat.hip.judge import judge_pair
from rocmseat.hip.probe import PROBE_BYTES, probe_pair
from rocmseat.sysfs.parse import normalize_pci_address


def hip_findings(
    pairs: Sequence[tuple[str, str]],
    *,
    env: Mapping[str, str] | None = None,
    stage_timeout_s: float = 30.0,
    library: Path | None = None,
    size_bytes: int = PROBE_BYTES,
) -> list[Finding]:
    """Findings hip.runtime, hip.ipc, hip.p2p, hip.bandwidth for each (A, B) PCI address pair.

    env is the replica's environment, overlaid on this process's for the children
    (HIP_VISIBLE_DEVICES, HSA_*, NCCL_*, ROCMSEAT_HIP_LIBRARY ...). Every stage of every child
    has a hard timeout of stage_timeout_s; a hung stage is a failure naming the stage. This process
    never loads HIP. A pair whose runtime is missing or sees no device yields one hip.runtime
    `unknown` with HIP's own reason, and no other finding for that pair. size_bytes is what each
    direction moves and verifies (PROBE_BYTES in every production caller; tests of the probe's
    logic pass less, since the fake library copies real bytes).
    """
    if not stage_timeout_s > 0:
        raise ValueError(f"stage_timeout_s must be positive, not {stage_timeout_s!r}")
    if not size_bytes > 0:
        raise ValueError(f"size_bytes must be positive, not {size_bytes!r}")
    findings: list[Finding] = []
    for a, b in pairs:
        # HIP reports 0000:05:00.0; accept the short form too, as the CLI's --pair does.
        pa, pb = normalize_pci_address(a), normalize_pci_address(b)
        if pa is None or pb is None:
            findings.append(Finding(
                "hip.runtime", Severity.UNKNOWN, f"{a}+{b}",
                f"not a PCI address: {a if pa is None else b!r} (expected 0000:05:00.0 or "
                "05:00.0); pair not probed",
                "name the GPUs by PCI address"))
            continue
        probe = probe_pair(pa, pb, env=env, stage_timeout_s=stage_timeout_s, library=library,
                           size_bytes=size_bytes)
        findings.extend(judge_pair(probe))
    return findings
