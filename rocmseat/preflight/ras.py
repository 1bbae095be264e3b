"""Judge amdgpu's RAS counts (family `ras`; rocmseat.sysfs.ras reads them).

Over the same error window as AER (rocmseat.preflight.windows): uncorrectable (`ue`) growth in
any block fails; correctable (`ce`) growth warns or fails by threshold; deferred (`de`, UMC)
growth warns (an uncorrectable error the hardware deferred until the data is used). Retired VRAM
pages (`gpu_vram_bad_pages`) above a threshold fail: the profile's `ras_bad_pages_fail`, else
the driver's own, VRAM size / 100 MiB (amdgpu_ras.c, amdgpu_ras_validate_threshold() with
RAS_BAD_PAGE_COVER), past which amdgpu stops retiring pages and marks the GPU bad. No `ras/`
(Radeon parts) is not applicable (no finding); unreadable, or "Query currently inaccessible"
(RAS recovery), is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping

from rocmseat.findings import Finding, Severity
from rocmseat.node.inventory import Gpu
from rocmseat.preflight.aer import RAS_PREFIX, SINCE_BOOT, AerThresholds, counter_deltas
from rocmseat.preflight.windows import Window
from rocmseat.sysfs.attrs import first_of

BAD_PAGE_COVER_BYTES = 100 * 1024 * 1024  # amdgpu_ras.c RAS_BAD_PAGE_COVER
DEFAULT_THRESHOLDS = AerThresholds()


def bad_page_threshold(gpu: Gpu, thresholds: AerThresholds) -> int | None:
    if thresholds.ras_bad_pages_fail is not None:
        return thresholds.ras_bad_pages_fail
    vram = gpu.amdgpu.mem_info_vram_total_bytes
    return None if not vram else vram // BAD_PAGE_COVER_BYTES


def judge_ras(
    gpu: Gpu,
    current: Mapping[str, Mapping[str, int]],
    windows: Mapping[str, Window],
    thresholds: AerThresholds = DEFAULT_THRESHOLDS,
) -> list[Finding]:
    subject = gpu.pci_address
    ras = gpu.amdgpu.ras
    if ras is None:
        # not applicable (Radeon parts have no ras/): no finding, as for a family that does not
        # concern the GPU (docs/preflight.md, "RAS")
        return []
    if ras.errors or ras.inaccessible:
        reasons = list(ras.errors) + [
            f"{block}_err_count: Query currently inaccessible (the GPU is in RAS recovery)"
            for block in ras.inaccessible
        ]
        return [
            Finding(
                "ras.unknown",
                Severity.UNKNOWN,
                subject,
                f"cannot read the RAS counts: {first_of(reasons)}",
                "run as root; a GPU in RAS recovery answers again once it is reset",
                {"errors": reasons},
            )
        ]
    window = windows.get(subject, SINCE_BOOT)
    now = {k: v for k, v in current.get(subject, {}).items() if k.startswith(RAS_PREFIX)}
    base = None if window.base is None else {
        k: v for k, v in window.base.items() if k.startswith(RAS_PREFIX)
    }
    deltas, reset = counter_deltas(now, base)
    span = "since the counts reset (the driver reloaded)" if reset else window.phrase
    boot = "" if span.startswith("since") else "; {:,} since the driver loaded"
    findings: list[Finding] = []
    for key, delta in sorted(deltas.items()):
        if delta <= 0:
            continue
        _prefix, block, kind = key.split(".", 2)
        data = {"block": block, "kind": kind, "delta": delta, "count": now[key], "window": span}
        grew = f"GPU {subject}: +{delta:,}"
        if kind == "ue":
            findings.append(
                Finding(
                    "ras.ue",
                    Severity.FAIL,
                    subject,
                    f"{grew} uncorrectable {block} errors {span}{boot.format(now[key])}",
                    "uncorrectable GPU errors: drain the GPU, check dmesg (amdgpu RAS) and the "
                    "vendor's RMA criteria",
                    data,
                )
            )
        elif kind == "ce":
            severity = Severity.OK
            if delta >= thresholds.ras_ce_fail:
                severity = Severity.FAIL
            elif delta >= thresholds.ras_ce_warn:
                severity = Severity.WARN
            if severity != Severity.OK:
                findings.append(
                    Finding(
                        "ras.ce",
                        severity,
                        subject,
                        f"{grew} correctable {block} errors {span}{boot.format(now[key])}",
                        "correctable errors are corrected, and a rising rate precedes "
                        "uncorrectable ones: watch the trend, plan the GPU's service",
                        data,
                    )
                )
        elif kind == "de":
            findings.append(
                Finding(
                    "ras.de",
                    Severity.WARN,
                    subject,
                    f"{grew} deferred {block} errors {span}{boot.format(now[key])}",
                    "deferred (poisoned) data: the consumer of it fails; check dmesg",
                    data,
                )
            )
    pages = ras.bad_pages or ()
    threshold = bad_page_threshold(gpu, thresholds)
    unreserved = [p for p in pages if p.flag == "F"]
    if threshold is not None and len(pages) > threshold:
        findings.append(
            Finding(
                "ras.bad_pages",
                Severity.FAIL,
                subject,
                f"GPU {subject}: {len(pages):,} retired VRAM pages (gpu_vram_bad_pages), above "
                f"the threshold of {threshold:,}",
                "past the bad-page threshold the GPU is to be replaced (RMA)",
                {"pages": len(pages), "threshold": threshold},
            )
        )
    elif unreserved:
        findings.append(
            Finding(
                "ras.bad_pages",
                Severity.WARN,
                subject,
                f"GPU {subject}: {len(unreserved):,} bad VRAM pages could not be reserved "
                "(flag F in gpu_vram_bad_pages)",
                "the pages are still in use: reset the GPU so the driver retires them",
                {"pages": len(pages), "unreserved": len(unreserved)},
            )
        )
    if findings:
        return findings
    limit = "" if threshold is None else f" (threshold {threshold:,})"
    return [
        Finding(
            "ras.clean",
            Severity.OK,
            subject,
            f"no RAS errors {span} in {len(ras.blocks)} blocks; {len(pages):,} retired VRAM "
            f"pages{limit}",
            "",
            {"window": span, "pages": len(pages)},
        )
    ]
