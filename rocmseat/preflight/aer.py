"""Judge AER counters by deltas (family `aer`).

Counters are cumulative since the device was enumerated (aer.c only increments), so a count
means nothing without a window: two readings of `--sample`, the last preflight's reading
(aer_state), or, on a first run, everything since boot. Errors often count at the link partner
(the root port) rather than at the GPU (sysfs-bus-pci-devices-aer_stats), so every function on
the path is read. Any fatal/nonfatal growth fails; correctable growth is judged by thresholds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rocmseat.findings import Finding, Severity
from rocmseat.node.inventory import Gpu, Hop
from rocmseat.preflight.link import hop_words
from rocmseat.sysfs.attrs import errors_of

REPLAY_KEY = "amdgpu.pcie_replay_count"


@dataclass(frozen=True, slots=True)
class AerThresholds:
    """Correctable errors and replays in one window: warn at >= *_warn, fail at >= *_fail."""

    correctable_warn: int = 1
    correctable_fail: int = 100
    replay_warn: int = 1
    replay_fail: int = 100


def snapshot(gpus: Iterable[Gpu]) -> dict[str, dict[str, int]]:
    """Flat counters of every function on the GPUs' paths (and each GPU's replay count)."""
    out: dict[str, dict[str, int]] = {}
    for gpu in gpus:
        for hop in gpu.path:
            out.setdefault(hop.address, {}).update(hop.aer.flat())
        if gpu.amdgpu.pcie_replay_count is not None:
            out.setdefault(gpu.pci_address, {})[REPLAY_KEY] = gpu.amdgpu.pcie_replay_count
    return out


def _deltas(
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


def _error_name(key: str) -> str:
    return key.split(".", 1)[1]


def _check_id(kind: str, name: str) -> str:
    if kind != "correctable" or "_bit[" in name:
        return f"aer.{kind}"
    return "aer." + name.lower()


def judge_aer(
    gpu: Gpu,
    current: Mapping[str, Mapping[str, int]],
    baseline: Mapping[str, Mapping[str, int]] | None,
    window: str,
    thresholds: AerThresholds = AerThresholds(),
) -> list[Finding]:
    """`aer.*` findings for the functions on one GPU's path.

    `window` is a phrase such as "since boot" or "during the 30 s sample"; `baseline` None means
    the counts are taken as they stand (since boot).
    """
    findings: list[Finding] = []
    read_errors = [e for hop in gpu.path for e in hop.aer.errors]
    read_errors += errors_of(gpu.amdgpu.errors, "pcie_replay_count")
    if read_errors:
        findings.append(
            Finding(
                "aer.unknown",
                Severity.UNKNOWN,
                gpu.pci_address,
                f"cannot read AER counters: {read_errors[0]}"
                + (f" (and {len(read_errors) - 1} more)" if len(read_errors) > 1 else ""),
                "run as root or check the sysfs tree",
                {"errors": read_errors},
            )
        )
    with_aer = [hop for hop in gpu.path if hop.aer.present]
    if not with_aer and not read_errors:
        return [
            Finding(
                "aer.unavailable",
                Severity.UNKNOWN,
                gpu.pci_address,
                "no AER statistics on any function of the path (kernel without CONFIG_PCIEAER, "
                "or firmware-first error handling)",
                "read the BMC/firmware error log instead",
            )
        ]
    for hop in gpu.path:
        findings.extend(
            _judge_hop(
                gpu, hop, current=current, baseline=baseline, window=window, thresholds=thresholds
            )
        )
    problems = [f for f in findings if f.severity != Severity.OK]
    if not problems:
        root = gpu.root_port
        end = f" to {hop_words(root)}" if root is not None else ""
        findings.append(
            Finding(
                "aer.clean",
                Severity.OK,
                gpu.pci_address,
                f"no AER errors {window} on {len(with_aer)} functions from {gpu.pci_address}{end}",
                "",
                {"window": window},
            )
        )
    return findings


def _judge_hop(
    gpu: Gpu,
    hop: Hop,
    *,
    current: Mapping[str, Mapping[str, int]],
    baseline: Mapping[str, Mapping[str, int]] | None,
    window: str,
    thresholds: AerThresholds,
) -> list[Finding]:
    now = current.get(hop.address)
    if not now:
        return []
    base = None if baseline is None else baseline.get(hop.address)
    deltas, reset = _deltas(now, base)
    where = f"{hop_words(hop)} (path of GPU {gpu.pci_address})"
    if hop.address == gpu.pci_address:
        where = f"GPU {gpu.pci_address}"
    span = "since the counters reset (device re-enumerated)" if reset else window
    findings: list[Finding] = []
    device_cor = 0
    for key, delta in sorted(deltas.items()):
        if delta <= 0 or key.endswith(".TOTAL") or key.startswith("rootport."):
            continue
        kind = key.split(".", 1)[0]
        name = _error_name(key)
        data = {
            "function": hop.address,
            "error": name,
            "kind": kind,
            "delta": delta,
            "count": now[key],
            "window": span,
        }
        if kind in ("fatal", "nonfatal"):
            findings.append(
                Finding(
                    f"aer.{kind}",
                    Severity.FAIL,
                    hop.address,
                    f"{where}: {delta} uncorrectable ({kind}) {name} {span}",
                    "uncorrectable PCIe errors: take the GPU out of service, reseat it, check "
                    "dmesg for 'PCIe Bus Error'",
                    data,
                )
            )
        elif kind == "correctable":
            device_cor += delta
            severity = _severity(delta, thresholds.correctable_warn, thresholds.correctable_fail)
            findings.append(
                Finding(
                    _check_id(kind, name),
                    severity,
                    hop.address,
                    f"{where}: {delta} {name} {span}",
                    "correctable errors at this link (often counted at the link partner): reseat "
                    "the GPU/riser, check the slot; measure a window with --sample 60 under load",
                    data,
                )
            )
        elif key == REPLAY_KEY:
            severity = _severity(delta, thresholds.replay_warn, thresholds.replay_fail)
            findings.append(
                Finding(
                    "aer.replay",
                    severity,
                    hop.address,
                    f"{where}: {delta} PCIe replays (pcie_replay_count) {span}",
                    "replays (NAKs) mean a noisy link: reseat, check the riser",
                    data,
                )
            )
    findings.extend(
        _rootport(hop, deltas, device_cor=device_cor, where=where, span=span, thresholds=thresholds)
    )
    return [f for f in findings if f.severity != Severity.OK]


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
            Finding(
                "aer.rootport_total",
                _severity(cor, thresholds.correctable_warn, thresholds.correctable_fail),
                hop.address,
                f"{where}: {cor} ERR_COR messages reported to the root port {span}",
                "errors somewhere below this root port",
                {"delta": cor, "window": span},
            )
        )
    for kind in ("fatal", "nonfatal"):
        grew = deltas.get(f"rootport.{kind}", 0)
        if grew > 0 and deltas.get(f"{kind}.TOTAL", 0) == 0:
            findings.append(
                Finding(
                    f"aer.rootport_{kind}",
                    Severity.FAIL,
                    hop.address,
                    f"{where}: {grew} ERR_{kind.upper()} messages reported to the root port {span}",
                    "uncorrectable errors below this root port: check dmesg",
                    {"delta": grew},
                )
            )
    return findings


def _severity(delta: int, warn: int, fail: int) -> Severity:
    if delta >= fail:
        return Severity.FAIL
    if delta >= warn:
        return Severity.WARN
    return Severity.OK
