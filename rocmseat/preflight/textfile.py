"""The node_exporter textfile-collector file of a preflight run (Prometheus text format 0.0.4).

node_exporter reads `*.prom` files in its --collector.textfile.directory; the CLI writes this one
atomically (temp file + rename) so the collector never sees half a file.
"""

from __future__ import annotations

from collections import Counter

from rocmseat.findings import Severity, exit_code_for
from rocmseat.node.link import effective_link
from rocmseat.preflight.run import PreflightReport

TEXTFILE_NAME = "rocmseat_preflight.prom"
SEVERITY_VALUE = {Severity.OK: 0, Severity.WARN: 1, Severity.UNKNOWN: 2, Severity.FAIL: 3}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())


def render_textfile(report: PreflightReport, *, strict: bool = False) -> str:
    """Prometheus text exposition for node_exporter's textfile collector (one file, atomic)."""
    out: list[str] = []

    def family(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            out.append(f"{name}{{{labels}}} {value:g}" if labels else f"{name} {value:g}")

    family(
        "rocmseat_preflight_exit_code",
        "gauge",
        "Exit code of the last preflight: 0 ok, 1 problem, 2 could not check.",
        [("", exit_code_for(report.findings, strict=strict))],
    )
    counts = Counter(f.severity for f in report.findings)
    family(
        "rocmseat_preflight_findings",
        "gauge",
        "Findings of the last preflight by severity.",
        [(_labels(severity=s.value), counts.get(s, 0)) for s in Severity],
    )
    checks: dict[tuple[str, str], Severity] = {}
    for f in report.findings:
        key = (f.check_id, f.subject)
        if key not in checks or SEVERITY_VALUE[f.severity] > SEVERITY_VALUE[checks[key]]:
            checks[key] = f.severity
    family(
        "rocmseat_preflight_check_severity",
        "gauge",
        "Worst severity per check and subject: 0 ok, 1 warn, 2 unknown, 3 fail.",
        [(_labels(check_id=c, subject=s), SEVERITY_VALUE[v]) for (c, s), v in checks.items()],
    )
    speed: list[tuple[str, float]] = []
    width: list[tuple[str, float]] = []
    for gpu in report.checked:
        eff = effective_link(gpu)
        own = gpu.endpoint.link
        for kind, s, w in (
            ("effective", eff.speed_gts, eff.width),
            ("capable", eff.capable_speed_gts, eff.capable_width),
            ("endpoint_claimed", own.current_speed_gts, own.current_width),
        ):
            labels = _labels(pci_address=gpu.pci_address, kind=kind)
            if s is not None:
                speed.append((labels, s))
            if w is not None:
                width.append((labels, w))
    family(
        "rocmseat_gpu_pcie_link_speed_gts",
        "gauge",
        "PCIe link speed in GT/s: effective (slowest real hop), capable, endpoint_claimed.",
        speed,
    )
    family("rocmseat_gpu_pcie_link_width", "gauge", "PCIe link width in lanes (same kinds).", width)
    sockets = [
        (_labels(pci_address=g.pci_address), g.socket)
        for g in report.checked
        if g.socket is not None
    ]
    family(
        "rocmseat_gpu_socket",
        "gauge",
        "CPU socket (physical package) of the GPU.",
        [(labels, float(value)) for labels, value in sockets],
    )
    aer: list[tuple[str, float]] = []
    seen: set[str] = set()
    for gpu in report.checked:
        for hop in gpu.path:
            if hop.address in seen:
                continue
            seen.add(hop.address)
            for kind, counters in (
                ("correctable", hop.aer.correctable),
                ("nonfatal", hop.aer.nonfatal),
                ("fatal", hop.aer.fatal),
            ):
                if counters is not None and counters.total is not None:
                    aer.append(
                        (
                            _labels(function=hop.address, gpu=gpu.pci_address, kind=kind),
                            counters.total,
                        )
                    )
    family(
        "rocmseat_pcie_aer_errors",
        "gauge",
        "AER TOTAL_ERR_* of each function on a GPU's path, cumulative since boot.",
        aer,
    )
    return "\n".join(out) + "\n"


def render_textfile_error(exit_code: int) -> str:
    """The textfile when no report could be made (no device, bad profile): the exit code only,
    so a stale file does not keep saying the node is fine."""
    return (
        "# HELP rocmseat_preflight_exit_code Exit code of the last preflight: 0 ok, 1 problem, "
        "2 could not check.\n"
        "# TYPE rocmseat_preflight_exit_code gauge\n"
        f"rocmseat_preflight_exit_code {exit_code}\n"
    )
