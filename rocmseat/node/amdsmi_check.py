"""Cross-check the sysfs inventory against amdsmi (family `amdsmi`), on a live host only.

amdsmi runs in a child process (amdsmi_probe) so its import-time prints and crashes cannot
reach our stdout. Its static PCIe figures (`pcie_static.max_pcie_speed/width`) come from the
endpoint's sysfs and inherit the internal-switch over-report (amd_smi.cc reads
card/device/max_link_*): they are shown, not trusted. Its `pcie_metric` figures come from the
firmware's gpu_metrics and see the physical link.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from rocmseat.findings import NODE, Finding, Subject
from rocmseat.node.inventory import Gpu, Inventory
from rocmseat.node.link import effective_link
from rocmseat.runner import Runner, run
from rocmseat.sysfs.parse import normalize_pci_address

PROBE_TIMEOUT_S = 30.0


def amdsmi_findings(
    inventory: Inventory,
    *,
    runner: Runner = run,
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
) -> list[Finding]:
    done = runner([python, "-m", "rocmseat.node.amdsmi_probe"], timeout_s=PROBE_TIMEOUT_S, env=env)
    if done.timed_out:
        return [_unknown(f"the amdsmi probe did not answer within {PROBE_TIMEOUT_S:g} s")]
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else None
    except json.JSONDecodeError:
        report = None
    if not isinstance(report, dict):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return [_unknown(f"the amdsmi probe exited {done.returncode}: {tail}")]
    return compare_amdsmi(inventory, report)


def _unknown(why: str) -> Finding:
    return NODE.unknown(
        "amdsmi.crosscheck",
        f"amdsmi cross-check not run: {why}",
        "install amdsmi from the ROCm instance (/opt/rocm/share/amd_smi) or pass --no-amdsmi",
    )


def _mts_to_gts(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value) / 1000.0
    return None


def _lanes(value: Any) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "?"


def _table(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def compare_amdsmi(inventory: Inventory, report: Mapping[str, Any]) -> list[Finding]:
    """Pure: findings from an amdsmi_probe report and the sysfs inventory."""
    if "error" in report:
        return [_unknown(" ".join(str(report["error"]).split()))]  # one line
    entries = report.get("gpus")
    if not isinstance(entries, list):
        return [_unknown("the probe's report has no GPU list")]
    seen: dict[str, dict[str, Any]] = {}
    for entry in entries:
        bdf = entry.get("bdf") if isinstance(entry, dict) else None
        address = normalize_pci_address(bdf) if isinstance(bdf, str) else None
        if address is not None and isinstance(entry, dict):
            seen[address] = entry
    ours = {g.pci_address for g in inventory.gpus}
    findings = [Subject(address).warn("amdsmi.disagree", "sysfs lists this GPU; amdsmi does not")
                for address in sorted(ours - set(seen))]
    findings += [Subject(address).warn("amdsmi.disagree",
                                       "amdsmi lists this GPU; sysfs (class/drm) does not")
                 for address in sorted(set(seen) - ours)]
    for gpu in inventory.gpus:
        entry = seen.get(gpu.pci_address)
        if entry is not None:
            findings += _compare_gpu(gpu, entry)
    return findings


def _compare_gpu(gpu: Gpu, entry: Mapping[str, Any]) -> list[Finding]:
    """One GPU both sides list: NUMA affinity and the firmware's link against sysfs."""
    it = Subject(gpu.pci_address)
    findings: list[Finding] = []
    notes = []
    numa = entry.get("numa_affinity")
    if isinstance(numa, int) and numa != gpu.numa_node_raw:
        findings.append(it.warn(
            "amdsmi.disagree", f"amdsmi NUMA affinity {numa}, sysfs numa_node {gpu.numa_node_raw}"
        ))
    # amdsmi answers "N/A" or an error object where a field is unsupported: take dicts only
    pcie = _table(entry.get("pcie"))
    static = _table(pcie.get("pcie_static"))
    metric = _table(pcie.get("pcie_metric"))
    eff = effective_link(gpu)
    static_speed = _mts_to_gts(static.get("max_pcie_speed"))
    if static_speed is not None:
        notes.append(
            f"static max {static_speed:g} GT/s x{_lanes(static.get('max_pcie_width'))} "
            "(from the endpoint: inherits the internal-switch over-report)"
        )
    speed = _mts_to_gts(metric.get("pcie_speed"))
    width = metric.get("pcie_width")
    if speed is not None and isinstance(width, int):
        if (speed, width) != (eff.speed_gts, eff.width):
            findings.append(it.warn(
                "amdsmi.disagree",
                f"amdsmi gpu_metrics link {speed:g} GT/s x{width}, sysfs effective link "
                f"{eff.speed_gts} GT/s x{eff.width} (an idle link may have dropped)",
            ))
        else:
            notes.append(f"gpu_metrics link {speed:g} GT/s x{width} agrees")
    replay = entry.get("replay")
    if isinstance(replay, int):
        notes.append(f"replays {replay} (sysfs {gpu.amdgpu.pcie_replay_count})")
    findings.append(it.ok(
        "amdsmi.crosscheck",
        "amdsmi sees this GPU" + (": " + "; ".join(notes) if notes else ""),
    ))
    return findings
