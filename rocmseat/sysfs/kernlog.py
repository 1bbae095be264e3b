"""The kernel-log parser: lines as /dev/kmsg, dmesg or journalctl give them -> typed events.

Formats, detected per line (a saved log may mix them; docs/preflight.md "Kernel events"):
- /dev/kmsg records, `priority,sequence,timestamp_us,flags[,...];message`; a continuation
  (dictionary) line starts with a space (Linux Documentation/ABI/testing/dev-kmsg). Only records
  of facility 0 (the kernel) are classified: anything userspace writes to /dev/kmsg carries
  facility 1 (user) by default (kernel/printk/printk.c devkmsg_write()), so a process cannot
  forge an amdgpu event that way;
- `dmesg`: `[  312.522692] message`, with or without a caller id (`[    T609] `), `dmesg -T`
  (`[Wed Jun  8 16:34:49 2022] message`: no time since boot) and no timestamp at all;
- syslog / `journalctl -k` lines: `... kernel: message` or `... kernel: [  12.3] message`.
  Only kernel records count: a syslog or `journalctl -b` line whose ident is not `kernel`
  (`Feb  2 08:03:20 host logger[12]: GPU reset begin!`, rocmseat's own alert lines) is not
  classified (RFC 3164 `TIMESTAMP HOSTNAME TAG[PID]: MSG`; journalctl's short, short-iso,
  short-precise and short-full outputs put the identifier in the same place).

amdgpu names its device first (`amdgpu 0000:03:00.0: amdgpu: ...`, dev_err/drm_err); older
kernels' DRM_ERROR lines carry no device (`[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ...`):
their event has no device. The line after a ring timeout or a page fault names the process
(amdgpu_job.c "Process information: process %s pid %d thread %s pid %d", newer " Process %s
pid %d thread %s pid %d"; gmc "for process %s pid %d thread %s pid %d"); AER's bit lines
(`   [ 6] BadTLP`) follow their "PCIe Bus Error" line (aer.c __aer_print_error()): both are
attached to the event they follow.

Pure: `KernelLogParser.feed(line)` returns what that line completed; nothing is read here.
Memory is bounded: one held event, whatever the input's length. Speed: a line that is not about
a GPU or a PCIe port (rocmseat.sysfs.kernel_events.about_gpu, a few substring tests) is dropped
before any regex; bench/bench_kernel_log.py measures it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

from rocmseat.sysfs.kernel_events import BY_NAME, classify, could_be_event

MAX_LINE_CHARS = 4096  # the kernel's own line limit is 1024 (PRINTK_MESSAGE_MAX); keep margin

_KMSG_RE = re.compile(r"(\d{1,4}),(\d{1,20}),(\d{1,20}),[^;]{0,64};(.*)", re.DOTALL)
_DMESG_TS_RE = re.compile(r"\[\s*(\d{1,12}\.\d{1,9})\]\s?")
_DMESG_T_RE = re.compile(r"\[[^\]\[]{8,40}\d{4}\]\s?")  # dmesg -T, any locale
_CALLER_RE = re.compile(r"\[\s*[TC]\d{1,10}\]\s?")
_KERNEL_TAG = "kernel: "
# a syslog / journalctl line: [grep's file prefix] TIMESTAMP HOSTNAME IDENT[PID]: (RFC 3164;
# journalctl -o short / short-iso / short-precise / short-full; months in any locale)
_SYSLOG_RE = re.compile(
    r"(?:[^\s:]{1,200}:)?"
    r"(?:\S{2,12} {1,2}\d{1,2} \d{1,2}:\d{2}:\d{2}(?:[.,]\d{1,9})?"
    r"|(?:\S{2,4} )?\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?"
    r"(?:Z|[+-]\d{2}:?\d{2})?(?: [A-Z]{3,5})?)"
    r" (?P<host>\S{1,255}) (?P<ident>[^\s\[:]{1,64})(?:\[\d{1,10}\])?: "
)
_DEVICE_RE = re.compile(
    r"(?P<driver>[\w.-]{1,40}) (?P<addr>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])"
    r"(?::[\w.-]{1,40})?: (?P<rest>.*)",
    re.DOTALL,
)
_PROCESS_RE = re.compile(
    r"^\s*(?:Process information: process |Process |in process |for process )"
    r"(?P<name>.{0,64}?) pid (?P<pid>\d{1,10}) thread"
)
_AER_BIT_RE = re.compile(
    r"^\s*(?:AER: )?\s*\[\s*(?P<bit>\d{1,2})\] (?P<name>\S.{0,40}?)\s*(?:\(First\))?\s*$"
)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# what stands between the device and the words: amdgpu's "amdgpu: " (drm_dev_* helpers), the
# DRM_ERROR prefix "[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ", AER's "AER: "
_LEAD_RE = re.compile(r"(?:amdgpu: )?(?:\[drm(?::[\w.]+(?: \[\w+\])?)?\] ?)?(?:\*ERROR\* ?)?")


@dataclass(frozen=True, slots=True)
class KernelEvent:
    """One classified kernel message."""

    event_class: str
    device: str | None  # the PCI address the line names (lower case), None when it names none
    driver: str | None  # the driver that printed it (amdgpu, pcieport, nvme)
    ring: str | None  # gfx_0.0.0, sdma0; the IH ring number of a page fault
    process: str | None  # the process name the driver gave, when it gave one
    pid: int | None
    since_boot_s: float | None  # None: the line had no time since boot (dmesg -T, syslog)
    seq: int | None  # the /dev/kmsg sequence number
    detail: str | None  # MES message, VM hub, RAS block, AER layer and error bits
    message: str  # the message, control characters replaced, at most MAX_LINE_CHARS


@dataclass(frozen=True, slots=True)
class LostRecords:
    """Records the reader never saw: a /dev/kmsg sequence gap (the ring buffer overran the
    reader, or wrapped before it first read)."""

    count: int
    before_first: bool  # the buffer had already dropped these when the log was first read


Parsed = KernelEvent | LostRecords


@dataclass(frozen=True, slots=True)
class _Line:
    text: str
    since_boot_s: float | None
    seq: int | None


def clean(text: str) -> str:
    """Control characters replaced by `?` and cut to MAX_LINE_CHARS (hostile input)."""
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS]
    return text if text.isprintable() else _CONTROL_RE.sub("?", text)


def split_line(raw: str) -> _Line | None:
    """The message of one raw line and its time since boot; None for a line that is not a
    kernel message (a userspace /dev/kmsg record, a dictionary continuation). Pure."""
    text = raw.rstrip("\r\n")
    kmsg = _KMSG_RE.fullmatch(text) if text[:1].isdigit() else None
    if kmsg:
        if int(kmsg.group(1)) >> 3 != 0:
            return None  # facility != kern: written by userspace (printk.c devkmsg_write)
        seq = int(kmsg.group(2))
        return _Line(clean(kmsg.group(4)), int(kmsg.group(3)) / 1e6, seq)
    syslog = _SYSLOG_RE.match(text)
    if syslog:
        if syslog.group("ident") != "kernel":
            return None  # a userspace program's line, whatever it quotes
        tag = syslog.end() - len(_KERNEL_TAG)
    else:
        tag = text.find(_KERNEL_TAG, 0, 200)
    if tag >= 0:
        text = text[tag + len(_KERNEL_TAG):]
    since: float | None = None
    stamp = _DMESG_TS_RE.match(text)
    if stamp:
        since = float(stamp.group(1))
        text = text[stamp.end():]
    elif tag < 0 and (named := _DMESG_T_RE.match(text)):
        text = text[named.end():]
    caller = _CALLER_RE.match(text) if text[:1] == "[" else None
    if caller:
        text = text[caller.end():]
    return _Line(clean(text.strip()), since, None)


def normalize_address(address: str) -> str | None:
    """`0000:03:00.0` in lower case; None for a device number above 0x1f (a forged address)."""
    try:
        domain, bus, rest = address.split(":")
        device, function = rest.split(".")
        if int(device, 16) > 0x1F or int(function) > 7:
            return None
    except ValueError:
        return None
    return f"{domain.lower()}:{bus.lower()}:{device.lower()}.{function}"


class KernelLogParser:
    """Lines in, events out; one event held back for the context line that may follow it."""

    def __init__(self) -> None:
        self._held: KernelEvent | None = None
        self._last_seq: int | None = None
        self.lines = 0

    def feed(self, raw: str) -> list[Parsed]:
        self.lines += 1
        out: list[Parsed] = []
        if raw[:1] == " " and self._last_seq is not None and _KMSG_RE.match(raw[1:]) is None:
            return out  # a /dev/kmsg dictionary line (" SUBSYSTEM=pci")
        if self._held is None and not could_be_event(raw) and not (
                raw[:1].isdigit() and "," in raw[1:5]):
            return out  # no class can match (a kmsg record still counts its sequence number)
        line = split_line(raw)
        if line is None:
            return out
        if line.seq is not None:
            out.extend(self._gap(line.seq))
        if self._held is None and not could_be_event(line.text):
            return out
        device, driver, message = _device_of(line.text)
        if self._held is not None and self._attach(device, message):
            return out
        match = classify(message)
        if self._held is not None:
            out.append(self._held)
            self._held = None
        if match is None:
            return out
        if match.source is not None:  # the message names the device it is about
            device = normalize_address(match.source) or device
        event = KernelEvent(
            match.event_class.name, device, driver, match.ring, None, None, line.since_boot_s,
            line.seq, match.detail, line.text,
        )
        event = _with_inline_process(event, message)
        if match.event_class.context is not None and event.process is None:
            self._held = event
        else:
            out.append(event)
        return out

    def feed_all(self, lines: Iterable[str]) -> Iterator[Parsed]:
        """`feed` every line, then `flush`: the bulk path, with the cheap test inline (a line
        that is not about a GPU, while no event waits for its context line, is only counted:
        no call, no list; a /dev/kmsg record still goes through for its sequence number)."""
        feed = self.feed
        skipped = 0
        for raw in lines:
            if self._held is None and not (
                    "amdgpu" in raw or "pcie" in raw or "AER" in raw or "aer_" in raw
                    or "PCIe Bus" in raw or "[drm" in raw  # ANCHORS (about_gpu), unrolled
                    or (raw[:1].isdigit() and "," in raw[1:5])):
                skipped += 1
                continue
            parsed = feed(raw)
            if parsed:
                yield from parsed
        self.lines += skipped
        yield from self.flush()

    def flush(self) -> list[Parsed]:
        held, self._held = self._held, None
        return [held] if held is not None else []

    def _gap(self, seq: int) -> list[Parsed]:
        last, self._last_seq = self._last_seq, seq
        if last is None:
            # /dev/kmsg opened at the oldest record still held: sequence numbers start at 0
            # each boot (printk_ringbuffer), so a first record above 0 means older ones wrapped
            return [LostRecords(seq, before_first=True)] if seq > 0 else []
        if seq > last + 1:
            return [LostRecords(seq - last - 1, before_first=False)]
        return []

    def _attach(self, device: str | None, message: str) -> bool:
        held = self._held
        assert held is not None
        if device != held.device:
            return False
        if BY_NAME[held.event_class].context == "aer":
            bit = _AER_BIT_RE.match(message)
            if bit:
                name = bit.group("name").strip()
                self._held = replace(held, detail=f"{held.detail}: {name}" if held.detail
                                     else name)
                return True
            # "device [1002:1478] error status/mask=..." and the TLP header stay with it; the
            # firmware-first report's layer and severity lines (pci_print_aer()) with its status
            rest = message.removeprefix("AER:").lstrip()
            if held.event_class == "aer_firmware_first" and rest.startswith(
                    ("aer_layer=", "aer_uncor_severity:")):
                return True
            return rest.startswith(("device [", "TLP Header"))
        process = _PROCESS_RE.match(message)
        if process:
            self._held = replace(held, process=process.group("name").strip() or None,
                                 pid=int(process.group("pid")))
            return True
        return False


def _device_of(text: str) -> tuple[str | None, str | None, str]:
    """(device, driver, message without the device and the driver's lead-in)."""
    found = _DEVICE_RE.match(text)
    if found is None:
        device, driver, rest = None, None, text
    else:
        device = normalize_address(found.group("addr"))
        driver, rest = found.group("driver"), found.group("rest")
    lead = _LEAD_RE.match(rest)
    return device, driver, rest[lead.end():] if lead else rest


def _with_inline_process(event: KernelEvent, message: str) -> KernelEvent:
    """A page fault of older kernels names its process on the same line."""
    marker = message.find("for process ")
    if marker < 0:
        return event
    found = _PROCESS_RE.match(message[marker:])
    if found is None:
        return event
    return replace(event, process=found.group("name").strip() or None,
                   pid=int(found.group("pid")))
