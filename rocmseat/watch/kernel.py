"""The kernel log, live: amdgpu and AER lines on a replica's GPUs -> alerts for that replica.

`KernelFollower` follows the node's kernel log from its end (rocmseat.sysfs.kmsg.KernelLogTail:
/dev/kmsg, or `$ROCMSEAT_KMSG`, a file or FIFO, through rocmseat.sysfs.fs.default_kmsg_path);
the watcher polls it once per evaluation (rocmseat.watch.loop), so a line reaches its alert
within one interval. `KernelAlerts` is the pure part: one parsed event (rocmseat.sysfs.kernlog),
the replicas' PCI addresses (their placement records: rocmseat.placement) and each GPU's PCI
bridges up to its root port (`upstream_paths`, from the node's sysfs tree) -> the alert changes,
as rocmseat.watch.uevents does for uevents. Alert state is kept per GPU:

- a line names a GPU by its own address (amdgpu's dev_err/drm_err prefix), or a bridge on its
  path (the AER driver names the port that reported or the source device: aer.c
  aer_print_error(); pciehp and DPC name the root port): the GPUs below that bridge;
- a line that names no device (older kernels' DRM_ERROR, `[drm:amdgpu_job_timedout [amdgpu]]
  *ERROR* ...`) is the node's: every replica's GPUs, `device=node` in its alert;
- a class whose alert is one-shot (`gpu_reset` a reset began, `gpu_ring_timeout`,
  `gpu_page_fault`) is held HOLD_S then resolved by itself (the line says it happened, nothing
  says it is over);
- every fatal class (`_blocks`) raises its alert at once and holds it *per GPU*: `gpu_lost` (a
  reset that failed, "device lost from bus!", a GPU that failed init), `gpu_aer_fatal` (an AER
  fatal error, a PCIe recovery that failed), `gpu_ras_uncorrectable` (uncorrectable RAS errors,
  poison consumed), `gpu_bad_page_threshold`, `gpu_fatal` (any other fatal class). A later
  "GPU reset succeeded" line on *that* GPU resolves them (never one on the replica's other GPU),
  except the bad-page threshold: the retired pages stay in the GPU's EEPROM table
  (amdgpu_ras_eeprom.c), no reset brings them back. A node-level fatal line is resolved for a
  replica once each of its GPUs has reset successfully since.
- while a fatal alert holds one of its GPUs, `blocking(gpus)` says why, and remediation holds
  (rocmseat.watch.remediate.service: a node problem, not a drafter problem).

Which class raises which alert, and whether it blocks, is decided in `_alert_for` and `_blocks`
only, from the catalogue entry's `alert` and `blocks_remediation` (rocmseat.sysfs.kernel_events).

Each replica keeps its last kernel cause, so a stalled or down replica's alert says what the
kernel said ("ring gfx_0.0.0 timeout on 0000:86:00.0 at 12:03:11").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rocmseat.sysfs.kernel_events import BY_NAME
from rocmseat.sysfs.kernlog import KernelEvent, KernelLogParser
from rocmseat.sysfs.kmsg import KernelLogTail
from rocmseat.sysfs.pci import parent_chain
from rocmseat.watch import alerts as A
from rocmseat.watch.uevents import RESET_HOLD_S, NodeEvent

HOLD_S = RESET_HOLD_S  # a one-shot kernel alert stays this long after its last line
NODE = "node"  # the scope (and `device`) of a line that names no device

# what a successful reset on a GPU resolves there (amdgpu_do_asic_reset(): "GPU reset
# succeeded, trying to resume"); the bad-page threshold is the EEPROM's, no reset clears it
_RESET_OK = "gpu_reset_ok"
_KEPT_BY_RESET = frozenset({A.GPU_BAD_PAGE_THRESHOLD})


def _alert_for(event_class: str) -> str | None:
    """The alert a kernel event class raises (None: none): the catalogue entry's `alert`
    (rocmseat.sysfs.kernel_events); a fatal class the entry gives none still raises gpu_fatal."""
    known = BY_NAME.get(event_class)
    alert = known.alert if known is not None else None
    if alert is None and _blocks(event_class):
        return A.GPU_FATAL
    return alert


def _blocks(event_class: str) -> bool:
    """The class is fatal for its GPU: its alert holds per GPU and holds remediation back (the
    catalogue entry's `blocks_remediation`)."""
    known = BY_NAME.get(event_class)
    return known is not None and known.blocks_remediation


def _resolves(event_class: str) -> bool:
    """The class says its GPU is back: the GPU's held alerts resolve (but _KEPT_BY_RESET)."""
    return event_class == _RESET_OK


def describe(event: KernelEvent, when_s: float) -> str:
    """One line for an alert: what, which ring/process, which GPU, when (local wall time)."""
    known = BY_NAME.get(event.event_class)
    title = known.title if known is not None else event.event_class
    if event.event_class == "ring_timeout" and event.ring:
        title = f"ring {event.ring} timeout"
    elif event.event_class == "page_fault" and event.process:
        title = f"page fault by {event.process}"
    where = event.device or "an unnamed GPU of the node"
    stamp = dt.datetime.fromtimestamp(when_s).strftime("%H:%M:%S")
    return f"{title} on {where} at {stamp}"


def upstream_paths(sysfs_root: Path, gpus: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Each GPU's PCI bridges up to its root port, nearest first, from `sysfs_root`'s
    `bus/pci/devices/<address>` link (PCI directories nest under their bridges:
    rocmseat.sysfs.pci.parent_chain). A GPU the tree does not show has none listed: its own
    lines still name it."""
    out: dict[str, tuple[str, ...]] = {}
    for address in gpus:
        try:
            device = (sysfs_root / "bus" / "pci" / "devices" / address).resolve(strict=True)
        except (OSError, RuntimeError):  # absent, unreadable, a link loop (RuntimeError <3.13)
            continue
        out[address] = tuple(p.name for p in parent_chain(device))
    return out


@dataclass(slots=True)
class _Held:
    """A fatal alert held on one scope (a GPU, or NODE) and why."""

    detail: str
    pending: set[str] = field(default_factory=set)  # NODE: the GPUs not yet reset since


@dataclass(slots=True)
class KernelAlerts:
    """The fatal alerts held per GPU (and for the node), and the alert changes each event
    means for the replicas. Pure: no I/O, no clock (the caller's time is passed in)."""

    upstream: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    held: dict[str, dict[str, _Held]] = field(default_factory=dict)  # scope -> alert -> cause

    def gpus_named(self, device: str, gpus: Iterable[str]) -> list[str]:
        """The GPUs a line naming `device` is about: the GPU itself, or those below a bridge."""
        return [g for g in gpus if g == device or device in self.upstream.get(g, ())]

    def apply(self, event: KernelEvent, replica_gpus: Mapping[str, Iterable[str]],
              when_s: float) -> list[NodeEvent]:
        gpus_of = {r: tuple(g) for r, g in replica_gpus.items()}
        every = sorted({g for gpus in gpus_of.values() for g in gpus})
        hit = every if event.device is None else self.gpus_named(event.device, every)
        if not hit:
            return []
        device = event.device or NODE
        detail = describe(event, when_s)
        if event.device is not None and event.device not in hit:  # a bridge above them
            detail += f" (upstream of {', '.join(hit)})"
        replicas = sorted(r for r, gpus in gpus_of.items() if set(gpus) & set(hit))
        alert = _alert_for(event.event_class)
        if alert is not None and not _blocks(event.event_class):
            return [NodeEvent(r, alert, True, device, detail, HOLD_S) for r in replicas]
        if alert is not None:
            for scope in [NODE] if event.device is None else hit:
                pending = set(every) if scope == NODE else set()
                self.held.setdefault(scope, {})[alert] = _Held(detail, pending)
            return [NodeEvent(r, alert, True, device, detail) for r in replicas]
        if not _resolves(event.event_class):
            return []
        before = {r: self._held_alerts(gpus_of[r]) for r in replicas}
        self._reset_ok(hit if event.device is not None else [], node_wide=event.device is None)
        return [NodeEvent(r, gone, False, device, detail)
                for r in replicas
                for gone in sorted(before[r] - self._held_alerts(gpus_of[r]))]

    def _reset_ok(self, gpus: list[str], *, node_wide: bool) -> None:
        for gpu in gpus:
            kept = {a: h for a, h in self.held.get(gpu, {}).items() if a in _KEPT_BY_RESET}
            if kept:
                self.held[gpu] = kept
            else:
                self.held.pop(gpu, None)
        node = self.held.get(NODE, {})
        for alert, held in list(node.items()):
            if alert in _KEPT_BY_RESET:
                continue
            held.pending -= set(gpus)
            if node_wide or not held.pending:
                del node[alert]
        if not node:
            self.held.pop(NODE, None)

    def _causes(self, gpus: Iterable[str]) -> list[tuple[str, str]]:
        """(alert, cause) held on any of `gpus`, or on the node for one of them; in order."""
        out = []
        for gpu in gpus:
            out += sorted((a, h.detail) for a, h in self.held.get(gpu, {}).items())
        mine = set(gpus)
        out += sorted((a, h.detail) for a, h in self.held.get(NODE, {}).items()
                      if h.pending & mine)
        return out

    def _held_alerts(self, gpus: Iterable[str]) -> set[str]:
        return {alert for alert, _ in self._causes(gpus)}

    def blocking(self, gpus: Iterable[str]) -> str | None:
        """Why remediation must hold for a replica on `gpus` (a fatal alert held on one of
        them, or on the node), or None."""
        causes = self._causes(gpus)
        if not causes:
            return None
        return "; ".join(f"{alert}: {cause}" for alert, cause in causes)


@dataclass(frozen=True, slots=True)
class KernelCause:
    """What the kernel last said about one of a replica's GPUs."""

    text: str  # "ring gfx_0.0.0 timeout on 0000:86:00.0 at 12:03:11"
    at_s: float  # the watcher's clock when it was read


class KernelFollower:
    """The live part: a tail of the kernel log and the parser, polled by the watcher."""

    def __init__(self, path: Path | str,
                 upstream: Mapping[str, tuple[str, ...]] | None = None) -> None:
        self.tail = KernelLogTail(path)
        self.parser = KernelLogParser()
        self.problem: str | None = None
        self.alerts = KernelAlerts(upstream=dict(upstream or {}))  # held per GPU

    def start(self) -> str | None:
        """Open the log at its end; a one-line reason when it cannot be followed."""
        self.problem = self.tail.open()
        return self.problem

    def poll(self) -> list[KernelEvent]:
        events = []
        for line in self.tail.poll():
            events += [e for e in self.parser.feed(line) if isinstance(e, KernelEvent)]
        events += [e for e in self.parser.flush() if isinstance(e, KernelEvent)]
        return events

    def close(self) -> None:
        self.tail.close()
