"""AER statistics of one PCI function (Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats).

`aer_dev_correctable|nonfatal|fatal` exist on every AER-capable function;
`aer_rootport_total_err_cor|fatal|nonfatal` only on root ports and RCECs. Counters are
cumulative since the device was enumerated (boot, hot-add, rescan) and never reset by reading:
judge deltas. A function without AER has none of the files (all None).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocmseat.sysfs.attrs import Collector
from rocmseat.sysfs.parse import AerCounters, parse_aer_counters, parse_int

DEV_FILES = {
    "correctable": "aer_dev_correctable",
    "nonfatal": "aer_dev_nonfatal",
    "fatal": "aer_dev_fatal",
}
ROOTPORT_FILES = {
    "cor": "aer_rootport_total_err_cor",
    "nonfatal": "aer_rootport_total_err_nonfatal",
    "fatal": "aer_rootport_total_err_fatal",
}


@dataclass(frozen=True, slots=True)
class AerReading:
    """One PCI function's AER counters (aer_dev_correctable, _nonfatal, _fatal) and, on a root
    port, its aer_rootport_total_err_* totals."""

    address: str
    correctable: AerCounters | None
    nonfatal: AerCounters | None
    fatal: AerCounters | None
    rootport_totals: tuple[tuple[str, int], ...]  # ("cor", n) ...; empty unless a root port
    errors: tuple[str, ...] = ()

    @property
    def present(self) -> bool:
        return any((self.correctable, self.nonfatal, self.fatal, self.rootport_totals))

    def flat(self) -> dict[str, int]:
        """`correctable.BadTLP` -> count; the form the baseline state file stores."""
        out: dict[str, int] = {}
        for kind, counters in (
            ("correctable", self.correctable),
            ("nonfatal", self.nonfatal),
            ("fatal", self.fatal),
        ):
            if counters is None:
                continue
            for name, count in counters.counts:
                out[f"{kind}.{name}"] = count
            if counters.total is not None:
                out[f"{kind}.TOTAL"] = counters.total
        for name, count in self.rootport_totals:
            out[f"rootport.{name}"] = count
        return out


def read_aer(device_dir: Path) -> AerReading:
    attrs = Collector(device_dir)
    dev = {kind: attrs.get(name, parse_aer_counters) for kind, name in DEV_FILES.items()}
    totals = []
    for kind, name in ROOTPORT_FILES.items():
        value = attrs.get(name, parse_int)
        if value is not None:
            totals.append((kind, value))
    return AerReading(
        address=device_dir.name,
        correctable=dev["correctable"],
        nonfatal=dev["nonfatal"],
        fatal=dev["fatal"],
        rootport_totals=tuple(totals),
        errors=tuple(attrs.errors),
    )
