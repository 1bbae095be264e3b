"""Judge AER counters by deltas (family `aer`).

Counters are cumulative since the device was enumerated (aer.c only increments), so a count
means nothing without a window: two readings of `--sample`, or the fixed window of the error
readings (rocmseat.preflight.windows: the last 24 h, whoever looked). Errors often count at the
link partner (the root port) rather than at the GPU (sysfs-bus-pci-devices-aer_stats), so every
function on the path is read. Any fatal/nonfatal growth fails; correctable growth is judged by
thresholds. The GPU firmware's own PCIe counters (gpu_metrics v1.4+, Instinct MI300: replays,
replay rollovers, L0-to-recovery transitions, NAKs sent and received) join the family with the
replay thresholds: MI200/MI300 have no pp_dpm_pcie, and these are their link's health.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rocmseat.findings import Finding, Severity, Subject
from rocmseat.node.inventory import Gpu, Hop
from rocmseat.preflight.link import hop_words
from rocmseat.preflight.windows import DEFAULT_WINDOW_S, Window
from rocmseat.sysfs.attrs import errors_of, first_of

REPLAY_KEY = "amdgpu.pcie_replay_count"
FIRMWARE_PREFIX = "gpu_metrics."  # gpu_metrics' PCIe counters, under the GPU's address
RAS_PREFIX = "ras."  # amdgpu's RAS counts (judged by rocmseat.preflight.ras)
# gpu_metrics counter -> (check id, words)
FIRMWARE_COUNTERS = {
    "replay": ("aer.fw_replay", "PCIe replays"),
    "replay_rollover": ("aer.fw_replay_rollover", "PCIe replay-number rollovers"),
    "l0_to_recovery": ("aer.fw_l0_recovery", "PCIe L0-to-recovery transitions"),
    "nak_sent": ("aer.fw_nak_sent", "PCIe NAKs sent"),
    "nak_received": ("aer.fw_nak_received", "PCIe NAKs received"),
    "other_end_recovery": ("aer.fw_other_end_recovery", "link recoveries the other end began"),
}
SINCE_BOOT = Window(None, "since boot")
# CDNA parts with multi-AID SMUs (gfx 9.4.x: MI300 gfx942; 9.5.x: MI350 gfx950): their
# gpu_metrics (v1.4 and later, or format 1.9) carry the firmware's PCIe counters, and RAS is
# always supported (amdgpu_ras.c amdgpu_ras_asic_supported())
INSTINCT_GFX_PREFIXES = ("gfx94", "gfx95")


def is_instinct(gpu: Gpu) -> bool:
    return gpu.gfx_target is not None and gpu.gfx_target.startswith(INSTINCT_GFX_PREFIXES)


@dataclass(frozen=True, slots=True)
class AerThresholds:
    """Correctable errors and replays in one window: warn at >= *_warn, fail at >= *_fail
    (docs/preflight.md, "Thresholds as rates"). RAS: correctable counts likewise; retired VRAM
    pages above `ras_bad_pages_fail` fail (None: the driver's own, rocmseat.preflight.badpages).
    `window_s`: the error window (rocmseat.preflight.windows)."""

    correctable_warn: int = 1
    correctable_fail: int = 100
    replay_warn: int = 1
    replay_fail: int = 100
    ras_ce_warn: int = 1
    ras_ce_fail: int = 100
    ras_bad_pages_fail: int | None = None
    window_s: int = DEFAULT_WINDOW_S


def snapshot(gpus: Iterable[Gpu]) -> dict[str, dict[str, int]]:
    """Flat counters of every function on the GPUs' paths, and each GPU's own: its replay count,
    gpu_metrics' PCIe counters, its RAS counts. The one reading the error windows keep."""
    out: dict[str, dict[str, int]] = {}
    for gpu in gpus:
        for hop in gpu.path:
            out.setdefault(hop.address, {}).update(hop.aer.flat())
        own = out.setdefault(gpu.pci_address, {})
        if gpu.amdgpu.pcie_replay_count is not None:
            own[REPLAY_KEY] = gpu.amdgpu.pcie_replay_count
        metrics = gpu.amdgpu.gpu_metrics
        if metrics is not None:
            own.update({FIRMWARE_PREFIX + name: n for name, n in metrics.pcie_counters})
        if gpu.amdgpu.ras is not None:
            own.update(gpu.amdgpu.ras.counters())
    return out


def unknown_sources(gpus: Iterable[Gpu]) -> dict[str, tuple[str, ...]]:
    """Per function, the counter sources this reading could not read (rocmseat.preflight.windows
    records them: such a reading is never a window's base, its missing counts are not zeros).
    Absent or unsupported sources are not unknown; an Instinct's gpu_metrics asleep is."""
    out: dict[str, set[str]] = {}
    for gpu in gpus:
        for hop in gpu.path:
            if hop.aer.errors:
                out.setdefault(hop.address, set()).add("aer")
        own = out.setdefault(gpu.pci_address, set())
        if errors_of(gpu.amdgpu.errors, "pcie_replay_count"):
            own.add("amdgpu.pcie_replay_count")
        if is_instinct(gpu) and (gpu.amdgpu.asleep or [
            e for e in errors_of(gpu.amdgpu.errors, "gpu_metrics")
            if ": not supported by the kernel (" not in e
        ]):
            own.add("gpu_metrics")
        ras = gpu.amdgpu.ras
        if ras is not None and (ras.errors or ras.inaccessible):
            own.add("ras")
    return {address: tuple(sorted(found)) for address, found in out.items() if found}


def counter_deltas(
    current: Mapping[str, int], base: Mapping[str, int] | None
) -> tuple[dict[str, int], bool]:
    """(growth per key, reset?). A counter below its baseline means its file was reset (the
    device was re-enumerated): that file's group counts anew from zero."""
    if base is None:
        return dict(current), False
    reset_groups = {k.split(".", 1)[0] for k, v in base.items() if k in current and current[k] < v}
    deltas = {
        k: v if k.split(".", 1)[0] in reset_groups else v - base.get(k, 0)
        for k, v in current.items()
    }
    return deltas, bool(reset_groups)


def vanished_counts(
    current: Mapping[str, int], base: Mapping[str, int] | None
) -> list[tuple[str, int]]:
    """Counters the window's base holds above zero that the current reading lacks: the file or
    field that counted them is gone (a RAS block's count file, a gpu_metrics counter the table no
    longer provides). Its growth can no longer be told: unknown, never 0."""
    if not base:
        return []
    return sorted((k, v) for k, v in base.items() if v > 0 and k not in current)


def _error_name(key: str) -> str:
    return key.split(".", 1)[1]


def _check_id(kind: str, name: str) -> str:
    if kind != "correctable" or "_bit[" in name:
        return f"aer.{kind}"
    return "aer." + name.lower()


def _read_errors(
    gpu: Gpu, current: Mapping[str, Mapping[str, int]], windows: Mapping[str, Window]
) -> list[str]:
    """Why this GPU's error counters cannot all be judged (`aer.unknown`): unreadable AER files
    on its path, an unreadable replay count, an Instinct's undecodable gpu_metrics, a firmware
    counter that grew and is gone."""
    read_errors = [e for hop in gpu.path for e in hop.aer.errors]
    read_errors += errors_of(gpu.amdgpu.errors, "pcie_replay_count")
    # gpu_metrics holds the firmware's PCIe counters on Instinct parts (v1.4+, format 1.9): a
    # table that exists and cannot be decoded (truncated, an unknown revision) hides them;
    # "not supported" is absent. A Radeon's table (format 1.3 class: width and speed only,
    # smu_v13_0_0/smu_v14_0_2_ppt.c) carries no AER data, so its absence hides nothing here.
    if is_instinct(gpu):
        read_errors += [e for e in errors_of(gpu.amdgpu.errors, "gpu_metrics")
                        if ": not supported by the kernel (" not in e]
    window_base = windows.get(gpu.pci_address, SINCE_BOOT).base
    own = {k: v for k, v in current.get(gpu.pci_address, {}).items()
           if k.startswith(FIRMWARE_PREFIX)}
    base_own = {k: v for k, v in (window_base or {}).items() if k.startswith(FIRMWARE_PREFIX)}
    if not gpu.amdgpu.asleep:
        # asleep, the table was not read (rocmseat.sysfs.amdgpu): nothing vanished
        read_errors += [f"{key} counted {count:,} and is not in this reading (the firmware no "
                        "longer provides it)" for key, count in vanished_counts(own, base_own)]
    return read_errors


def judge_aer(
    gpu: Gpu,
    current: Mapping[str, Mapping[str, int]],
    windows: Mapping[str, Window],
    thresholds: AerThresholds = AerThresholds(),
) -> list[Finding]:
    """`aer.*` findings for the functions on one GPU's path.

    `windows` holds each function's window (its base counters and the phrase: "in the last
    24 h (since ...)", "during the 30 s sample"); a function without one counts since boot.
    """
    window = windows.get(gpu.pci_address, SINCE_BOOT).phrase
    findings: list[Finding] = []
    read_errors = _read_errors(gpu, current, windows)
    if read_errors:
        findings.append(
            Subject(gpu.pci_address).unknown(
                "aer.unknown", f"cannot read AER counters: {first_of(read_errors)}",
                "run as root or check the sysfs tree", {"errors": read_errors},
            )
        )
    with_aer = [hop for hop in gpu.path if hop.aer.present]
    if not with_aer and not read_errors:
        return [
            Subject(gpu.pci_address).unknown(
                "aer.unavailable",
                "no AER statistics on any function of the path (kernel without CONFIG_PCIEAER, "
                "or firmware-first error handling)",
                "read the BMC/firmware error log instead",
            )
        ]
    for hop in gpu.path:
        findings.extend(
            _judge_hop(
                gpu, hop, current=current, window=windows.get(hop.address, SINCE_BOOT),
                thresholds=thresholds,
            )
        )
    problems = [f for f in findings if f.severity != Severity.OK]
    if not problems:
        root = gpu.root_port
        end = f" to {hop_words(root)}" if root is not None else ""
        findings.append(
            Subject(gpu.pci_address).ok(
                "aer.clean",
                f"no AER errors {window} on {len(with_aer)} functions from {gpu.pci_address}{end}",
                "", {"window": window},
            )
        )
    return findings


def _judge_hop(
    gpu: Gpu,
    hop: Hop,
    *,
    current: Mapping[str, Mapping[str, int]],
    window: Window,
    thresholds: AerThresholds,
) -> list[Finding]:
    now = {k: v for k, v in current.get(hop.address, {}).items() if not k.startswith(RAS_PREFIX)}
    if not now:
        return []
    deltas, reset = counter_deltas(now, window.base)
    where = f"{hop_words(hop)} (path of GPU {gpu.pci_address})"
    if hop.address == gpu.pci_address:
        where = f"GPU {gpu.pci_address}"
    span = "since the counters reset (device re-enumerated)" if reset else window.phrase
    counted = [(key, delta) for key, delta in sorted(deltas.items())
               if delta > 0 and not key.endswith(".TOTAL") and not key.startswith("rootport.")]
    device_cor = sum(delta for key, delta in counted if key.split(".", 1)[0] == "correctable")
    findings = [
        finding for key, delta in counted
        for finding in [_counter_finding(hop, key, delta, now[key], where=where, span=span,
                                         thresholds=thresholds)]
        if finding is not None
    ]
    findings.extend(
        _rootport(hop, deltas, device_cor=device_cor, where=where, span=span, thresholds=thresholds)
    )
    return [f for f in findings if f.severity != Severity.OK]


def _counter_finding(
    hop: Hop, key: str, delta: int, count: int, *, where: str, span: str,
    thresholds: AerThresholds,
) -> Finding | None:
    """One function's counter that grew by `delta` over `span` (None: not a counter judged)."""
    it = Subject(hop.address)
    kind = key.split(".", 1)[0]
    name = _error_name(key)
    data = {
        "function": hop.address,
        "error": name,
        "kind": kind,
        "delta": delta,
        "count": count,
        "window": span,
    }
    grew = f"+{delta:,}"
    boot = "" if span.startswith("since") else f"; {count:,} since boot"
    if kind in ("fatal", "nonfatal"):
        return it.fail(
            f"aer.{kind}",
            f"{where}: {grew} uncorrectable ({kind}) {name} {span}{boot}",
            "uncorrectable PCIe errors: take the GPU out of service, reseat it, check "
            "dmesg for 'PCIe Bus Error'",
            data,
        )
    if kind == "correctable":
        return it.finding(
            _check_id(kind, name),
            _severity(delta, thresholds.correctable_warn, thresholds.correctable_fail),
            f"{where}: {grew} {name} {span}{boot}",
            "correctable errors at this link (often counted at the link partner): reseat "
            "the GPU/riser, check the slot; measure a window with --sample 60 under load",
            data,
        )
    if key == REPLAY_KEY:
        return it.finding(
            "aer.replay",
            _severity(delta, thresholds.replay_warn, thresholds.replay_fail),
            f"{where}: {grew} PCIe replays (pcie_replay_count) {span}{boot}",
            "replays (NAKs) mean a noisy link: reseat, check the riser",
            data,
        )
    if kind + "." == FIRMWARE_PREFIX and name in FIRMWARE_COUNTERS:
        check_id, words = FIRMWARE_COUNTERS[name]
        return it.finding(
            check_id,
            _severity(delta, thresholds.replay_warn, thresholds.replay_fail),
            f"{where}: {grew} {words} (gpu_metrics) {span}{boot}",
            "the GPU firmware counts link-level retries: reseat the GPU/OAM module, "
            "check the board's PCIe retimers; measure under load with --sample 60",
            data,
        )
    return None


def _rootport(
    hop: Hop,
    deltas: Mapping[str, int],
    *,
    device_cor: int,
    where: str,
    span: str,
    thresholds: AerThresholds,
) -> list[Finding]:
    """Root-port totals count ERR_* messages of the whole hierarchy; report them only when the
    functions' own counters did not already say so (firmware-first kernels leave device counters
    at zero)."""
    findings = []
    cor = deltas.get("rootport.cor", 0)
    if cor > device_cor:
        findings.append(
            Subject(hop.address).finding(
                "aer.rootport_total",
                _severity(cor, thresholds.correctable_warn, thresholds.correctable_fail),
                f"{where}: +{cor:,} ERR_COR messages reported to the root port {span}",
                "errors somewhere below this root port", {"delta": cor, "window": span},
            )
        )
    for kind in ("fatal", "nonfatal"):
        grew = deltas.get(f"rootport.{kind}", 0)
        if grew > 0 and deltas.get(f"{kind}.TOTAL", 0) == 0:
            findings.append(
                Subject(hop.address).fail(
                    f"aer.rootport_{kind}",
                    f"{where}: +{grew:,} ERR_{kind.upper()} messages reported to the root port "
                    f"{span}",
                    "uncorrectable errors below this root port: check dmesg", {"delta": grew},
                )
            )
    return findings


def _severity(delta: int, warn: int, fail: int) -> Severity:
    if delta >= fail:
        return Severity.FAIL
    if delta >= warn:
        return Severity.WARN
    return Severity.OK
