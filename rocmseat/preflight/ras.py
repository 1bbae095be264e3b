"""Judge amdgpu's RAS counts (family `ras`; rocmseat.sysfs.ras reads them).

Over the same error window as AER (rocmseat.preflight.windows): uncorrectable (`ue`) growth in
any block fails; correctable (`ce`) growth warns or fails by threshold; deferred (`de`, UMC)
growth warns (an uncorrectable error the hardware deferred until the data is used). Retired VRAM
pages (`gpu_vram_bad_pages`) fail above the profile's `ras_bad_pages_fail`, else at the driver's
own threshold as the loaded driver computes it (rocmseat.preflight.badpages: the module parameter
bad_page_threshold and the MP0 version, amdgpu_ras.c amdgpu_ras_validate_threshold()).

No `ras/` on a Radeon part is not applicable (no finding); on an Instinct part (CDNA, gfx 9.4.x /
9.5.x, whose amdgpu_ras_asic_supported() always holds) it means RAS is disabled (`ras_enable=0`,
`ras_mask`) or amdgpu_ras_init() failed, and nothing counts memory errors: unknown. Unreadable,
"Query currently inaccessible" (RAS recovery), a feature mask that enables blocks with no count
file at all, or a count that grew and then vanished (its file gone): unknown, never clean.
"""

from __future__ import annotations

from collections.abc import Mapping

from rocmseat.findings import Finding, Severity, Subject
from rocmseat.node.inventory import Gpu
from rocmseat.preflight.aer import (
    RAS_PREFIX,
    SINCE_BOOT,
    AerThresholds,
    counter_deltas,
    is_instinct,
    vanished_counts,
)
from rocmseat.preflight.badpages import BadPageRule, driver_bad_page_rule, rule_problem
from rocmseat.preflight.windows import Window
from rocmseat.sysfs.attrs import first_of
from rocmseat.sysfs.ras import RasReading

DEFAULT_THRESHOLDS = AerThresholds()

def bad_page_rule(gpu: Gpu, thresholds: AerThresholds) -> BadPageRule:
    if thresholds.ras_bad_pages_fail is not None:
        return BadPageRule(thresholds.ras_bad_pages_fail, "the profile's ras_bad_pages_fail")
    return driver_bad_page_rule(gpu)


def bad_page_threshold(gpu: Gpu, thresholds: AerThresholds) -> int | None:
    return bad_page_rule(gpu, thresholds).pages


def _unknown(subject: str, reasons: list[str], hint: str) -> list[Finding]:
    return [Subject(subject).unknown("ras.unknown",
                                     f"cannot read the RAS counts: {first_of(reasons)}",
                                     hint, {"errors": reasons})]


def _no_ras(gpu: Gpu) -> list[Finding]:
    """No ras/: not applicable on a Radeon part; on an Instinct part RAS is off or failed."""
    subject = gpu.pci_address
    if is_instinct(gpu):
        return _unknown(
            subject,
            [f"GPU {subject} ({gpu.gfx_target}) has no ras/ directory: RAS disabled or "
             "failed to initialise: memory errors are not counted"],
            "check the amdgpu module parameters ras_enable and ras_mask, and dmesg for "
            "amdgpu RAS init errors",
        )
    # not applicable (Radeon parts have no ras/): no finding, as for a family that does not
    # concern the GPU (docs/preflight.md, "RAS")
    return []


def _cannot_judge(
    gpu: Gpu, ras: RasReading, thresholds: AerThresholds,
    now: Mapping[str, int], base: Mapping[str, int] | None,
) -> list[Finding]:
    """The `ras.unknown` of a ras/ that cannot be judged (the module's docstring), else []."""
    subject = gpu.pci_address
    if ras.errors or ras.inaccessible:
        reasons = list(ras.errors) + [
            f"{block}_err_count: Query currently inaccessible (the GPU is in RAS recovery)"
            for block in ras.inaccessible
        ]
        return _unknown(subject, reasons,
                        "run as root; a GPU in RAS recovery answers again once it is reset")
    problem = None if thresholds.ras_bad_pages_fail is not None else rule_problem(gpu)
    if problem is not None:
        # the driver's threshold depends on it: never a guessed default over an unreadable value
        return _unknown(subject, [problem],
                        "the amdgpu module parameter bad_page_threshold and ip_discovery must "
                        "be readable")
    if ras.features_mask and not ras.blocks:
        return _unknown(
            subject,
            [f"ras/features enables blocks (feature mask 0x{ras.features_mask:x}) and no "
             "<block>_err_count file exists: the counts are not exposed"],
            "check dmesg for amdgpu RAS sysfs errors; reload amdgpu",
        )
    gone = vanished_counts(now, base)
    if gone:
        return _unknown(
            subject,
            [f"{key} counted {count:,} and is gone now (its file vanished)"
             for key, count in gone],
            "a count file that disappears hides what it counted: check dmesg, reload amdgpu",
        )
    return []


def judge_ras(
    gpu: Gpu,
    current: Mapping[str, Mapping[str, int]],
    windows: Mapping[str, Window],
    thresholds: AerThresholds = DEFAULT_THRESHOLDS,
) -> list[Finding]:
    subject = gpu.pci_address
    ras = gpu.amdgpu.ras
    if ras is None:
        return _no_ras(gpu)
    window = windows.get(subject, SINCE_BOOT)
    now = {k: v for k, v in current.get(subject, {}).items() if k.startswith(RAS_PREFIX)}
    base = None if window.base is None else {
        k: v for k, v in window.base.items() if k.startswith(RAS_PREFIX)
    }
    cannot = _cannot_judge(gpu, ras, thresholds, now, base)
    if cannot:
        return cannot
    deltas, reset = counter_deltas(now, base)
    span = "since the counts reset (the driver reloaded)" if reset else window.phrase
    findings = [
        finding for key, delta in sorted(deltas.items()) if delta > 0
        for finding in [_count_finding(subject, key, delta, now[key], span=span,
                                       thresholds=thresholds)]
        if finding is not None
    ]
    pages = ras.bad_pages or ()
    rule = bad_page_rule(gpu, thresholds)
    threshold = rule.pages
    unreserved = [p for p in pages if p.flag == "F"]
    if threshold is not None and _exceeds(len(pages), rule, thresholds):
        findings.append(_bad_pages(gpu, len(pages), rule))
    elif unreserved:
        findings.append(Subject(subject).warn(
            "ras.bad_pages",
            f"GPU {subject}: {len(unreserved):,} bad VRAM pages could not be reserved "
            "(flag F in gpu_vram_bad_pages)",
            "the pages are still in use: reset the GPU so the driver retires them",
            {"pages": len(pages), "unreserved": len(unreserved)},
        ))
    if findings:
        return findings
    limit = f" (no threshold: {rule.words})" if threshold is None else (
        f" (threshold {threshold:,}: {rule.words})"
    )
    return [Subject(subject).ok(
        "ras.clean",
        f"no RAS errors {span} in {len(ras.blocks)} blocks; {len(pages):,} retired VRAM "
        f"pages{limit}",
        "",
        {"window": span, "pages": len(pages)},
    )]


def _count_finding(subject: str, key: str, delta: int, count: int, *, span: str,
                   thresholds: AerThresholds) -> Finding | None:
    """One RAS count that grew by `delta` over `span`: ue fails, ce against its thresholds,
    de warns (None: a ce under its warning threshold)."""
    it = Subject(subject)
    boot = "" if span.startswith("since") else f"; {count:,} since the driver loaded"
    _prefix, block, kind = key.split(".", 2)
    data = {"block": block, "kind": kind, "delta": delta, "count": count, "window": span}
    grew = f"GPU {subject}: +{delta:,}"
    if kind == "ue":
        return it.fail(
            "ras.ue",
            f"{grew} uncorrectable {block} errors {span}{boot}",
            "uncorrectable GPU errors: drain the GPU, check dmesg (amdgpu RAS) and the "
            "vendor's RMA criteria",
            data,
        )
    if kind == "ce":
        severity = Severity.OK
        if delta >= thresholds.ras_ce_fail:
            severity = Severity.FAIL
        elif delta >= thresholds.ras_ce_warn:
            severity = Severity.WARN
        if severity == Severity.OK:
            return None
        return it.finding(
            "ras.ce",
            severity,
            f"{grew} correctable {block} errors {span}{boot}",
            "correctable errors are corrected, and a rising rate precedes "
            "uncorrectable ones: watch the trend, plan the GPU's service",
            data,
        )
    if kind == "de":
        return it.warn(
            "ras.de",
            f"{grew} deferred {block} errors {span}{boot}",
            "deferred (poisoned) data: the consumer of it fails; check dmesg",
            data,
        )
    return None


def _exceeds(pages: int, rule: BadPageRule, thresholds: AerThresholds) -> bool:
    """The profile's threshold fails above it; the driver's is reached at it
    (amdgpu_ras_eeprom_check(): `bad_page_cnt_threshold > ras_num_bad_pages` is the only fine
    case)."""
    if thresholds.ras_bad_pages_fail is not None:
        return pages > thresholds.ras_bad_pages_fail
    assert rule.pages is not None
    return pages >= rule.pages


def _bad_pages(gpu: Gpu, pages: int, rule: BadPageRule) -> Finding:
    assert rule.pages is not None
    subject = gpu.pci_address
    if rule.halts:
        hint = ("the driver marks the GPU for RMA and halts its runtime services past a "
                "user-defined threshold: replace the GPU")
    else:
        hint = ("the driver keeps the GPU running and asks to 'consult AMD Service Action Guide "
                "(SAG) for appropriate service procedures'; older amdgpu (before 2025) used VRAM "
                "/ 100 MiB for -1")
    return Subject(subject).fail(
        "ras.bad_pages",
        f"GPU {subject}: RAS records:{pages} exceed threshold:{rule.pages} ({pages:,} retired "
        f"VRAM pages in gpu_vram_bad_pages; {rule.words})",
        hint,
        {"pages": pages, "threshold": rule.pages, "rule": rule.words},
    )
