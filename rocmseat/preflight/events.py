"""The `events` family: the kernel log of this boot, judged per GPU (docs/preflight.md, "Kernel
events").

`read_kernel_events` reads a log (rocmseat.sysfs.kmsg) through the parser
(rocmseat.sysfs.kernlog) into a tally per subject and class, in bounded memory whatever the
log's length; `judge_events` turns the tally into findings, a pure function:

- fatal classes fail (a reset that failed, a device lost, uncorrectable RAS or poison, the
  bad-page threshold, an AER fatal error, failed PCIe recovery, a GPU that failed init);
- a GPU reset or a ring timeout fails at the profile's threshold (`gpu_resets_fail`,
  `ring_timeouts_fail`, 1 by default: any this boot), and warns below it;
- page faults, MES/SMU/PSP firmware complaints, KFD preemption failures, link-down and AER
  non-fatal errors warn;
- counted classes (a reset that succeeded, corrected AER/RAS errors, the PSP's command status)
  are ok findings that carry their count (the aer and ras families judge those rates from the
  counters); a counted class with `judged_with` (the PSP's command status) warns when one of
  those classes follows it on the same GPU;
- the role, the threshold's name, the title and the hint are the catalogue entry's
  (rocmseat.sysfs.kernel_events.CATALOGUE): nothing here is special to one class;
- lines of no class are never findings.

Each finding names the class, the count, the first and last time since boot and one sample
line (control characters replaced, cut to 200 characters: kernel lines carry process names and
paths, never the environment). The subject is the GPU the line names, or the GPU behind the
PCIe port it names, else the device itself, else "node".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmseat.findings import NODE, Finding, Severity, Subject
from rocmseat.node.inventory import Gpu
from rocmseat.redact import redact_text
from rocmseat.sysfs.fs import Unreadable
from rocmseat.sysfs.kernel_events import BY_NAME
from rocmseat.sysfs.kernlog import KernelEvent, KernelLogParser, LostRecords, Parsed
from rocmseat.sysfs.kmsg import open_kernel_log

SAMPLE_CHARS = 200
MAX_SUBJECTS = 256  # distinct (subject, class) tallies kept; more are counted as "other"
_KEEP = 8  # rings and processes named per tally


@dataclass(frozen=True, slots=True)
class EventThresholds:
    """Per GPU and boot: fail at >= these counts, warn below (profile `[thresholds]`)."""

    gpu_resets_fail: int = 1
    ring_timeouts_fail: int = 1


@dataclass(slots=True)
class Tally:
    count: int = 0
    first_s: float | None = None
    last_s: float | None = None
    sample: str = ""
    rings: list[str] = field(default_factory=list)
    processes: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)

    def add(self, event: KernelEvent) -> None:
        self.count += 1
        when = event.since_boot_s
        if when is not None:
            self.first_s = when if self.first_s is None else min(self.first_s, when)
            self.last_s = when if self.last_s is None else max(self.last_s, when)
        if not self.sample:
            self.sample = sample_line(event.message)
        for bucket, value in ((self.rings, event.ring), (self.processes, event.process),
                              (self.details, event.detail)):
            if value and value not in bucket and len(bucket) < _KEEP:
                bucket.append(value[:80])


@dataclass(frozen=True, slots=True)
class KernelEvents:
    """One log, read: the tallies per (subject, class) and what was not seen."""

    source: str
    window: str  # "this boot" (the live log) or "in <file>"
    tallies: Mapping[tuple[str, str], Tally]
    lines: int
    lost_before_first: int = 0
    lost_during: int = 0
    notes: tuple[str, ...] = ()


def sample_line(message: str) -> str:
    """The finding's sample: printable (the parser replaced control characters), URLs redacted
    (rocmseat.redact), at most SAMPLE_CHARS. Kernel lines carry process names and paths, never
    the environment."""
    text = redact_text(" ".join(message.split()))
    return text if len(text) <= SAMPLE_CHARS else text[: SAMPLE_CHARS - 3] + "..."


def subject_for(event: KernelEvent, gpus: Sequence[Gpu]) -> str:
    """The GPU the event is about: the one it names, the one behind the port it names, the
    only amdgpu device for an amdgpu line without a device; else the device; else "node"."""
    device = event.device
    if device is None:
        if len(gpus) == 1 and "amdgpu" in event.message and event.driver is None:
            return gpus[0].pci_address  # DRM_ERROR lines of older kernels name no device
        return "node"
    behind = [g.pci_address for g in gpus if g.pci_address == device]
    if behind:
        return behind[0]
    behind = [g.pci_address for g in gpus if any(h.address == device for h in g.path)]
    return behind[0] if len(behind) == 1 else device


def tally_events(parsed: Iterable[Parsed], gpus: Sequence[Gpu], *, source: str, window: str,
                 lines: int = 0, notes: Sequence[str] = ()) -> KernelEvents:
    """The tallies of a stream of parsed lines. Pure; memory bounded by MAX_SUBJECTS."""
    tallies: dict[tuple[str, str], Tally] = {}
    lost_before = lost_during = 0
    for item in parsed:
        if isinstance(item, LostRecords):
            if item.before_first:
                lost_before += item.count
            else:
                lost_during += item.count
            continue
        key = (subject_for(item, gpus), item.event_class)
        if key not in tallies and len(tallies) >= MAX_SUBJECTS:
            key = ("other", item.event_class)  # a flood of forged addresses stays bounded
        tallies.setdefault(key, Tally()).add(item)
    return KernelEvents(source, window, tallies, lines, lost_before, lost_during, tuple(notes))


def read_kernel_events(path: Path, gpus: Sequence[Gpu], *, live: bool) -> KernelEvents | Unreadable:
    """Read and tally a kernel log (the node's /dev/kmsg when `live`, else a saved log)."""
    log = open_kernel_log(path)
    if isinstance(log, Unreadable):
        return log
    parser = KernelLogParser()

    window = "this boot" if live or log.kind == "kmsg" else f"in {path.name}"
    events = tally_events(parser.feed_all(log.lines()), gpus, source=str(path), window=window)
    notes = list(log.notes)
    if log.overruns and not events.lost_during:
        notes.append(f"the kernel's ring buffer overran the reader {log.overruns} time(s)")
    return KernelEvents(events.source, events.window, events.tallies, parser.lines,
                        events.lost_before_first, events.lost_during, tuple(notes))


def judge_events(events: KernelEvents | Unreadable, gpus: Sequence[Gpu],
                 thresholds: EventThresholds, *,
                 only: Collection[str] | None = None) -> list[Finding]:
    """Findings of one read log. Pure. `only`: the GPUs judged (a `--pair` run, the launch
    gate of one replica): another GPU's events are left out; a device that is no GPU and the
    node stay (a fatal line that names no GPU is everyone's)."""
    if isinstance(events, Unreadable):
        return [NODE.unknown(
            "events.source", f"cannot read the kernel log {events.path}: {events.reason}",
            "run as root (or with CAP_SYSLOG), or pass --kernel-log FILE",
        )]
    findings = _source_findings(events)
    others = {g.pci_address for g in gpus} - set(only) if only is not None else set()
    seen = {subject for subject, _ in events.tallies}
    for (subject, name), tally in sorted(events.tallies.items()):
        if subject not in others:
            followers = _followers(subject, name, tally, events.tallies)
            findings.append(_finding(subject, name, tally, events.window, thresholds,
                                     followers=followers))
    for gpu in gpus:
        if gpu.pci_address not in seen and gpu.pci_address not in others:
            findings.append(Subject(gpu.pci_address).ok(
                "events.gpu",
                f"no amdgpu or AER event {events.window} ({events.lines:,} lines read)", "",
                {"lines": events.lines},
            ))
    return findings


def _source_findings(events: KernelEvents) -> list[Finding]:
    findings = []
    if events.lost_during:
        findings.append(NODE.warn(
            "events.lost",
            f"ring buffer overrun: {events.lost_during:,} records lost while reading "
            f"{events.source}; events among them are unseen",
            "a log flood outran the reader: check dmesg for its source",
            {"lost": events.lost_during},
        ))
    if events.lost_before_first:
        findings.append(NODE.warn(
            "events.lost",
            f"ring buffer overrun: {events.lost_before_first:,} records of this boot were "
            "dropped before they were read; events among them are unseen",
            "keep the journal (journalctl -k -b) or raise log_buf_len; a watchdog that runs "
            "from boot sees them live",
            {"lost": events.lost_before_first, "before_first": True},
        ))
    for note in events.notes:
        findings.append(NODE.warn(
            "events.source", f"kernel log {events.source}: {note}",
            "events in the unread part are unseen",
        ))
    return findings


def _severity(name: str, tally: Tally, thresholds: EventThresholds,
              followers: Collection[str]) -> Severity:
    """The verdict of one tally: the class's role, from the catalogue's entry alone."""
    event_class = BY_NAME[name]
    role = event_class.severity
    if role == "fatal":
        return Severity.FAIL
    if role == "threshold":
        limit = getattr(thresholds, event_class.threshold or "", 1)
        return Severity.FAIL if tally.count >= max(1, limit) else Severity.WARN
    if role == "warn":
        return Severity.WARN
    return Severity.WARN if followers else Severity.OK


def _followers(subject: str, name: str, tally: Tally,
               tallies: Mapping[tuple[str, str], Tally]) -> list[str]:
    """The `judged_with` classes of a count class seen on the same subject after its first
    line (or with no time to order them by): the failure its lines are evidence for."""
    names = []
    for other in BY_NAME[name].judged_with:
        later = tallies.get((subject, other))
        if later is None:
            continue
        if tally.first_s is None or later.last_s is None or later.last_s >= tally.first_s:
            names.append(other)
    return names


def _finding(subject: str, name: str, tally: Tally, window: str,
             thresholds: EventThresholds, *, followers: Sequence[str] = ()) -> Finding:
    event_class = BY_NAME[name]
    when = ""
    if tally.first_s is not None and tally.last_s is not None:
        when = (f" at {tally.first_s:.1f} s since boot" if tally.count == 1 else
                f", first at {tally.first_s:.1f} s, last at {tally.last_s:.1f} s since boot")
    extra = "".join(f"; {label} {', '.join(values)}" for label, values in
                    (("ring", tally.rings), ("process", tally.processes),
                     ("detail", tally.details)) if values)
    data: dict[str, Any] = {
        "class": name, "count": tally.count, "first_s": tally.first_s,
        "last_s": tally.last_s, "sample": tally.sample, "rings": list(tally.rings),
        "processes": list(tally.processes), "details": list(tally.details),
        "upstream": event_class.upstream,
    }
    if followers:
        data["followed_by"] = list(followers)
        extra += f"; followed by {', '.join(followers)}"
    return Subject(subject).finding(
        f"events.{name}", _severity(name, tally, thresholds, followers),
        f"{event_class.title}: {tally.count}x {window}{when}{extra}: {tally.sample}",
        event_class.advice, data,
    )
