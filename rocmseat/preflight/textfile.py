"""The node_exporter textfile-collector file of a preflight run, written through prometheus_client.

node_exporter reads `*.prom` files in its --collector.textfile.directory. The families are built
as a custom collector over the report (client_python's "custom collectors": the values exist
elsewhere, here in sysfs, and are exported as they are) and written with `write_to_textfile`,
which writes a temp file beside the target and renames it, so the collector never sees half a
file. Cumulative AER totals are counters with exact integer values (`1234567`, never
`1.23457e+06`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from rocmseat import exitcodes
from rocmseat.errors import ReadError
from rocmseat.findings import Severity, exit_code_for
from rocmseat.node.link import effective_link
from rocmseat.preflight.run import PreflightReport

TEXTFILE_NAME = "rocmseat_preflight.prom"
SEVERITY_VALUE = {Severity.OK: 0, Severity.WARN: 1, Severity.UNKNOWN: 2, Severity.FAIL: 3}
_EXIT_HELP = "Exit code of the last preflight: 0 ok, 1 problem, 2 could not check."


class _ReportCollector(Collector):
    """The families of one report (collect() is called once per write)."""

    def __init__(self, report: PreflightReport, *, strict: bool) -> None:
        self.report = report
        self.strict = strict

    def collect(self) -> Iterator[Metric]:
        report = self.report
        exit_code = GaugeMetricFamily("rocmseat_preflight_exit_code", _EXIT_HELP)
        exit_code.add_metric([], exit_code_for(report.findings, strict=self.strict))
        yield exit_code
        yield from _finding_families(report)
        yield from _link_families(report)
        yield _aer_family(report)
        if "events" in report.families:
            yield _events_family(report)


def _finding_families(report: PreflightReport) -> Iterator[Metric]:
    counts = Counter(f.severity for f in report.findings)
    findings = GaugeMetricFamily(
        "rocmseat_preflight_findings",
        "Findings of the last preflight by severity.",
        labels=["severity"],
    )
    for severity in Severity:
        findings.add_metric([severity.value], counts.get(severity, 0))
    yield findings
    checks: dict[tuple[str, str], Severity] = {}
    for f in report.findings:
        key = (f.check_id, f.subject)
        if key not in checks or SEVERITY_VALUE[f.severity] > SEVERITY_VALUE[checks[key]]:
            checks[key] = f.severity
    worst = GaugeMetricFamily(
        "rocmseat_preflight_check_severity",
        "Worst severity per check and subject: 0 ok, 1 warn, 2 unknown, 3 fail.",
        labels=["check_id", "subject"],
    )
    for (check_id, subject), value in checks.items():
        worst.add_metric([check_id, subject], SEVERITY_VALUE[value])
    yield worst


def _link_families(report: PreflightReport) -> Iterator[Metric]:
    speed = GaugeMetricFamily(
        "rocmseat_gpu_pcie_link_speed_gts",
        "PCIe link speed in GT/s: effective (slowest real hop), capable, endpoint_claimed.",
        labels=["pci_address", "kind"],
    )
    width = GaugeMetricFamily(
        "rocmseat_gpu_pcie_link_width",
        "PCIe link width in lanes (same kinds).",
        labels=["pci_address", "kind"],
    )
    socket = GaugeMetricFamily(
        "rocmseat_gpu_socket", "CPU socket (physical package) of the GPU.", labels=["pci_address"]
    )
    for gpu in report.checked:
        eff = effective_link(gpu)
        own = gpu.endpoint.link
        for kind, s, w in (
            ("effective", eff.speed_gts, eff.width),
            ("capable", eff.capable_speed_gts, eff.capable_width),
            ("endpoint_claimed", own.current_speed_gts, own.current_width),
        ):
            if s is not None:
                speed.add_metric([gpu.pci_address, kind], s)
            if w is not None:
                width.add_metric([gpu.pci_address, kind], w)
        if gpu.socket is not None:
            socket.add_metric([gpu.pci_address], gpu.socket)
    yield speed
    yield width
    yield socket


def _aer_family(report: PreflightReport) -> Metric:
    aer = CounterMetricFamily(
        "rocmseat_pcie_aer_errors",
        "AER TOTAL_ERR_* of each function on a GPU's path, cumulative since the device was "
        "enumerated (boot, hot-add, rescan).",
        labels=["function", "gpu", "kind"],
    )
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
                    aer.add_metric([hop.address, gpu.pci_address, kind], counters.total)
    return aer


def _events_family(report: PreflightReport) -> Metric:
    """Kernel events of this boot per GPU (or device, or "node") and class, from the events
    family's findings (rocmseat.preflight.events): every class the log held, counted ones too."""
    family = CounterMetricFamily(
        "rocmseat_kernel_events",
        "amdgpu and PCIe AER kernel-log events of this boot by subject and class "
        "(rocmseat.sysfs.kernel_events).",
        labels=["gpu", "class"],
    )
    for f in report.findings:
        count = f.data.get("count") if f.check_id.startswith("events.") else None
        if isinstance(count, int) and isinstance(f.data.get("class"), str):
            family.add_metric([f.subject, f.data["class"]], count)
    return family


class _ExitCodeOnly(Collector):
    def __init__(self, exit_code: int) -> None:
        self.exit_code = exit_code

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("rocmseat_preflight_exit_code", _EXIT_HELP)
        family.add_metric([], self.exit_code)
        yield family


def report_registry(report: PreflightReport, *, strict: bool = False) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ReportCollector(report, strict=strict))
    return registry


def error_registry(exit_code: int) -> CollectorRegistry:
    """When no report could be made (no device, bad profile): the exit code only, so a stale file
    does not keep saying the node is fine."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_ExitCodeOnly(exit_code))
    return registry


def render(registry: CollectorRegistry) -> str:
    """The exposition text of a registry (what write_textfile puts in the file)."""
    return generate_latest(registry).decode("utf-8")


def write_textfile(directory: Path, registry: CollectorRegistry) -> Path:
    """Write `directory/rocmseat_preflight.prom` (temp file + rename); OSError on failure."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / TEXTFILE_NAME
    write_to_textfile(str(target), registry)
    return target


# node_exporter reads only the directory its --collector.textfile.directory names (upstream has
# no default); Debian's and Ubuntu's prometheus-node-exporter package passes
# /var/lib/prometheus/node-exporter (docs/preflight.md, "Output")
CREATED_WARNING = (
    "{directory} did not exist and was created: node_exporter reads only its "
    "--collector.textfile.directory (Debian/Ubuntu: /var/lib/prometheus/node-exporter)"
)


@dataclass(frozen=True, slots=True)
class Published:
    """What became of one textfile write."""

    path: Path
    created_dir: bool  # the directory was not there: node_exporter may be reading another
    error: ReadError | None  # the file could not be written (one line naming it)

    @property
    def warning(self) -> str | None:
        return CREATED_WARNING.format(directory=self.path.parent) if self.created_dir else None


def publish(directory: Path, registry: CollectorRegistry) -> Published:
    """Write the textfile; never raises for an unwritable directory (the error is kept)."""
    target = directory / TEXTFILE_NAME
    created = not directory.is_dir()
    try:
        write_textfile(directory, registry)
    except OSError as exc:
        error = ReadError(target, f"cannot write the textfile: {exc.strerror or exc}")
        return Published(target, created and directory.is_dir(), error)
    return Published(target, created, None)


def exit_code_with(code: int, published: Published | None) -> int:
    """The run's exit code once the textfile is accounted for: a known problem on the node (1)
    outranks "could not check" (2), as in exit_code_for; otherwise a textfile that could not be
    written makes the run "could not check" (a stale file would go on saying "fine")."""
    if published is None or published.error is None or code == exitcodes.PROBLEM:
        return code
    return exitcodes.CANNOT_CHECK
