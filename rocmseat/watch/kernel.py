"""The kernel log, live: amdgpu and AER lines on a replica's GPUs -> alerts for that replica.

`KernelFollower` follows the node's kernel log from its end (rocmseat.sysfs.kmsg.KernelLogTail:
/dev/kmsg, or `$ROCMSEAT_KMSG`, a file or FIFO, through rocmseat.sysfs.fs.default_kmsg_path);
the watcher polls it once per evaluation (rocmseat.watch.loop), so a line reaches its alert
within one interval. `kernel_node_events` is the pure part: one parsed event (rocmseat.sysfs.
kernlog) and the replicas' PCI addresses (their placement records: rocmseat.placement) -> the
alert changes, as rocmseat.watch.uevents does for uevents:

- `gpu_reset` (a reset began), `gpu_ring_timeout`, `gpu_page_fault`: one-shot, held HOLD_S then
  resolved by themselves (the line says it happened, nothing says it is over);
- `gpu_lost` (a reset that failed, "device lost from bus!", a GPU that failed init): held until
  a later "GPU reset succeeded" line on that GPU; remediation refuses to restart the replica
  (a node problem, not a drafter problem: rocmseat.watch.remediate.service).

Each replica keeps its last kernel cause, so a stalled or down replica's alert says what the
kernel said ("ring gfx_0.0.0 timeout on 0000:86:00.0 at 12:03:11").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmseat.sysfs.kernel_events import BY_NAME
from rocmseat.sysfs.kernlog import KernelEvent, KernelLogParser
from rocmseat.sysfs.kmsg import KernelLogTail
from rocmseat.watch.alerts import GPU_LOST
from rocmseat.watch.uevents import RESET_HOLD_S, NodeEvent

HOLD_S = RESET_HOLD_S  # a one-shot kernel alert stays this long after its last line


@dataclass(frozen=True, slots=True)
class KernelCause:
    """What the kernel last said about one of a replica's GPUs."""

    text: str  # "ring gfx_0.0.0 timeout on 0000:86:00.0 at 12:03:11"
    at_s: float  # the watcher's clock when it was read


def describe(event: KernelEvent, when_s: float) -> str:
    """One line for an alert: what, which ring/process, which GPU, when (local wall time)."""
    title = BY_NAME[event.event_class].title
    if event.event_class == "ring_timeout" and event.ring:
        title = f"ring {event.ring} timeout"
    elif event.event_class == "page_fault" and event.process:
        title = f"page fault by {event.process}"
    stamp = dt.datetime.fromtimestamp(when_s).strftime("%H:%M:%S")
    return f"{title} on {event.device or 'an unnamed GPU'} at {stamp}"


def kernel_node_events(event: KernelEvent, replica_gpus: Mapping[str, Iterable[str]],
                       when_s: float) -> list[NodeEvent]:
    """The alert changes one kernel event means for the replicas whose GPUs it names. Pure."""
    if event.device is None:
        return []
    replicas = sorted(r for r, gpus in replica_gpus.items() if event.device in set(gpus))
    changes: list[tuple[str, bool, float | None]] = []
    alert = BY_NAME[event.event_class].alert  # the catalogue entry's (kernel_events.py)
    if alert is not None:
        changes.append((alert, True, None if alert == GPU_LOST else HOLD_S))
    elif event.event_class == "gpu_reset_ok":
        changes.append((GPU_LOST, False, None))
    detail = describe(event, when_s)
    return [NodeEvent(replica, alert, on, event.device, detail, hold)
            for replica in replicas for alert, on, hold in changes]


class KernelFollower:
    """The live part: a tail of the kernel log and the parser, polled by the watcher."""

    def __init__(self, path: Path | str) -> None:
        self.tail = KernelLogTail(path)
        self.parser = KernelLogParser()
        self.problem: str | None = None

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
