"""Large BAR, the precondition ROCm peer-to-peer needs (family `pcie`, check `pcie.bar.*`).

KFD calls a GPU large-BAR when the CPU sees all of its VRAM through the BAR
(drivers/gpu/drm/amd/amdkfd/kfd_chardev.c kfd_dev_is_large_bar(): no private, CPU-invisible
VRAM). Without it KFD refuses host-visible VRAM allocations ("Alloc host visible vram on small
bar is not allowed", kfd_ioctl_alloc_memory_of_gpu), gives the GPU no bidirectional PCIe io link
in its CRAT (kfd_crat.c), and ROCm disables or stages peer access and HIP IPC over PCIe (an AMD
engineer on ROCm/amdgpu#78; ROCm/hip#3352). The BAR's size is the VRAM aperture in the function's
`resource` file (rocmseat.sysfs.pci.vram_bar: the largest 64-bit prefetchable memory BAR),
compared with `mem_info_vram_total`. A 256 MiB BAR is what firmware assigns without Above 4G
decoding and Resizable BAR. No `resource` file (a tree without one): no finding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rocmseat.findings import Finding, Severity, Subject
from rocmseat.node.inventory import Gpu
from rocmseat.sysfs.attrs import errors_of
from rocmseat.sysfs.pci import vram_bar

BIOS_WORDS = "enable Above 4G decoding and Resizable BAR (Re-Size BAR Support) in the BIOS"


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift:,} {unit}"
    return f"{n:,} bytes"


def judge_bar(gpu: Gpu) -> list[Finding]:
    subject = gpu.pci_address
    errors = errors_of(gpu.amdgpu.errors, "resource", "mem_info_vram_total")
    bars = gpu.amdgpu.bars
    if bars is None and not errors:
        return []
    vram = gpu.amdgpu.mem_info_vram_total_bytes
    bar = vram_bar(bars or ())
    if errors or bar is None or not vram:
        why = errors[0] if errors else (
            "no 64-bit prefetchable memory BAR in resource" if bar is None
            else "mem_info_vram_total is not known")
        return [Subject(subject).unknown(
            "pcie.bar.unknown", f"cannot tell the VRAM BAR's size against VRAM: {why}",
            "check the sysfs tree", {"errors": errors},
        )]
    data = {"bar_index": bar.index, "bar_bytes": bar.size_bytes, "vram_bytes": vram}
    if bar.size_bytes < vram:
        return [Subject(subject).warn(
            "pcie.bar.small",
            f"GPU {subject}: VRAM BAR{bar.index} is {_size(bar.size_bytes)} for "
            f"{_size(vram)} of VRAM (small BAR): peer access and HIP IPC over PCIe will be "
            "disabled or staged through host memory",
            f"{BIOS_WORDS}, then cold-boot", data,
        )]
    return [Subject(subject).ok(
        "pcie.bar.ok",
        f"VRAM BAR{bar.index} {_size(bar.size_bytes)} covers {_size(vram)} of VRAM "
        "(large BAR)",
        "", data,
    )]


def small_bar_gpus(gpus: Sequence[Gpu]) -> list[str]:
    """The GPUs whose VRAM BAR is smaller than their VRAM (judge_bar's `pcie.bar.small`)."""
    return sorted(g.pci_address for g in gpus
                  if any(f.check_id == "pcie.bar.small" for f in judge_bar(g)))


def cite_small_bar(findings: Sequence[Finding], small: Sequence[str]) -> list[Finding]:
    """The `hip` family's failures, citing the small-BAR GPUs (`small`, small_bar_gpus) of the
    pair they name: a failed peer or IPC probe has its likely cause named beside it, whether or
    not the pcie family ran."""
    out = []
    for finding in findings:
        named = [a for a in small if a in finding.subject.split("+")]
        if finding.family != "hip" or finding.severity != Severity.FAIL or not named:
            out.append(finding)
            continue
        note = (f"; GPU {', '.join(named)} {'has' if len(named) == 1 else 'have'} a small VRAM "
                "BAR (pcie.bar.small): ROCm disables peer access over PCIe without large BAR")
        out.append(dataclasses.replace(
            finding, message=finding.message + note,
            hint=f"{BIOS_WORDS}; {finding.hint}".rstrip("; ")))
    return out
