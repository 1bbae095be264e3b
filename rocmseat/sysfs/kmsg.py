"""The kernel log reader: /dev/kmsg (non-blocking, from its first record) or a saved log.

The path comes from the root mechanism every reader uses (rocmseat.sysfs.fs.default_kmsg_path:
`$ROCMSEAT_KMSG`, else /dev/kmsg on the live root, else none), or from `--kernel-log FILE`.

/dev/kmsg (Linux Documentation/ABI/testing/dev-kmsg): a fresh open reads from the oldest record
the ring buffer still holds; every read() returns one record; with O_NONBLOCK a read at the end
fails with EAGAIN (the end of this boot's log so far); a reader the buffer overran gets EPIPE
once and then continues at the oldest record left (the parser sees the sequence gap and says so).
Opening or reading needs CAP_SYSLOG when kernel.dmesg_restrict is 1 (kernel/printk/printk.c
devkmsg_open() -> check_syslog_permissions()): that is `unknown`, never an empty log.

A saved log (a regular file, or a FIFO a test writes) is read in chunks, line by line, within a
byte budget and a time budget: a huge or endless input ends the read with a note, never a hang.
Lines longer than MAX_LINE_BYTES are cut (the kernel's own limit is 1 KiB).
"""

from __future__ import annotations

import errno
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rocmseat.sysfs.fs import Unreadable

MAX_LOG_BYTES = 1 << 30  # a saved log larger than this is read up to here, and says so
# the printk ring buffer is at most 32 MiB (init/Kconfig LOG_BUF_SHIFT range 12..25; the
# log_buf_len= parameter rounds to a power of two): a character device giving more is not it
MAX_KMSG_BYTES = 1 << 26
READ_BUDGET_S = 60.0  # wall time for one whole read (a slow FIFO ends here)
MAX_LINE_BYTES = 8192
_CHUNK = 1 << 16
_RECORD = 16384  # one /dev/kmsg record; CONSOLE_EXT_LOG_MAX is 8 KiB
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(slots=True)
class KernelLog:
    """An open kernel log: `lines()` yields its text lines once; `notes` says what was not read
    (filled while reading, complete when `lines()` is exhausted)."""

    path: str
    kind: str  # "kmsg" (a character device), "file", "fifo"
    fd: int
    max_bytes: int = MAX_LOG_BYTES
    budget_s: float = READ_BUDGET_S
    monotonic: Callable[[], float] = time.monotonic
    notes: list[str] = field(default_factory=list)
    overruns: int = 0  # EPIPE answers from /dev/kmsg
    first: bytes = b""  # the record read at open (the proof of the right to read)

    def lines(self) -> Iterator[str]:
        try:
            if self.kind == "kmsg":
                yield from self._records()
            else:
                yield from self._text()
        finally:
            self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _records(self) -> Iterator[str]:
        deadline = self.monotonic() + self.budget_s
        total = len(self.first)
        yield from self.first.decode("utf-8", errors="replace").splitlines()
        while True:
            if self.monotonic() > deadline:
                self.notes.append(f"stopped after {self.budget_s:g} s of reading")
                return
            try:
                record = os.read(self.fd, _RECORD)
            except BlockingIOError:
                return  # EAGAIN: the end of the log so far
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.overruns += 1
                    continue
                self.notes.append(f"read failed: {exc.strerror or type(exc).__name__}")
                return
            if not record:
                return
            total += len(record)
            if total > min(self.max_bytes, MAX_KMSG_BYTES):
                self.notes.append(f"stopped after {min(self.max_bytes, MAX_KMSG_BYTES):,} bytes "
                                  "(more than any kernel ring buffer holds: is it /dev/kmsg?)")
                return
            yield from record.decode("utf-8", errors="replace").splitlines()

    def _text(self) -> Iterator[str]:
        deadline = self.monotonic() + self.budget_s
        total = 0
        partial = b""
        cut = 0
        while True:
            if self.monotonic() > deadline:
                self.notes.append(f"stopped after {self.budget_s:g} s of reading")
                break
            try:
                chunk = os.read(self.fd, _CHUNK)
            except BlockingIOError:
                break  # a FIFO with nothing more to give now
            except OSError as exc:
                self.notes.append(f"read failed: {exc.strerror or type(exc).__name__}")
                break
            if not chunk:
                break
            total += len(chunk)
            if total > self.max_bytes:
                self.notes.append(f"stopped after {self.max_bytes:,} bytes (the rest unread)")
                break
            parts = (partial + chunk).split(b"\n")
            partial = parts.pop()
            if len(partial) > MAX_LINE_BYTES:
                partial, cut = partial[:MAX_LINE_BYTES], cut + 1
            for part in parts:
                yield part[:MAX_LINE_BYTES].decode("utf-8", errors="replace")
        if partial:
            yield partial.decode("utf-8", errors="replace")
        if cut:
            self.notes.append(f"{cut} line(s) longer than {MAX_LINE_BYTES:,} bytes were cut")


def _kind(mode: int) -> str | None:
    if stat.S_ISCHR(mode):
        return "kmsg"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISFIFO(mode):
        return "fifo"
    return None


def open_kernel_log(path: Path | str, *, max_bytes: int = MAX_LOG_BYTES,
                    budget_s: float = READ_BUDGET_S) -> KernelLog | Unreadable:
    """Open a kernel log for one read from its start; Unreadable says why it cannot be."""
    try:
        fd = os.open(path, _FLAGS)
    except FileNotFoundError:
        return Unreadable(str(path), "no such file")
    except PermissionError as exc:
        return Unreadable(str(path), _denied(exc))
    except OSError as exc:
        return Unreadable(str(path), exc.strerror or type(exc).__name__)
    mode = os.fstat(fd).st_mode
    kind = _kind(mode)
    if kind is None:
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(mode) else "not a log (device, socket)"
        return Unreadable(str(path), f"is {what}")
    log = KernelLog(str(path), kind, fd, max_bytes=max_bytes, budget_s=budget_s)
    if kind == "kmsg":
        # a first read proves the right to read (dmesg_restrict is checked at open and read)
        try:
            first = os.read(fd, _RECORD)
        except BlockingIOError:
            first = b""
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                log.overruns += 1
                return log
            os.close(fd)
            reason = _denied(exc) if exc.errno in (errno.EPERM, errno.EACCES) else (
                exc.strerror or type(exc).__name__)
            return Unreadable(str(path), reason)
        log.first = first
    return log


def _denied(exc: OSError) -> str:
    return (f"{exc.strerror or 'permission denied'} (reading the kernel log needs root or "
            "CAP_SYSLOG when kernel.dmesg_restrict = 1)")


class KernelLogTail:
    """Follows a kernel log from its end: each `poll()` returns the lines written since the
    last one, without blocking (the watchdog's source; rocmseat.watch.kernel)."""

    def __init__(self, path: Path | str, *, max_bytes_per_poll: int = 1 << 22) -> None:
        self.path = str(path)
        self.max_bytes = max_bytes_per_poll
        self.fd = -1
        self.kind: str | None = None
        self.partial = b""
        self.overruns = 0

    def open(self) -> str | None:
        """Open at the end of what is there now; a one-line reason when it cannot."""
        try:
            fd = os.open(self.path, _FLAGS)
        except PermissionError as exc:
            return _denied(exc)
        except OSError as exc:
            return exc.strerror or type(exc).__name__
        kind = _kind(os.fstat(fd).st_mode)
        if kind is None:
            os.close(fd)
            return "is not a log (a directory, socket or block device)"
        if kind in ("kmsg", "file"):
            try:
                os.lseek(fd, 0, os.SEEK_END)  # devkmsg_llseek() supports SEEK_END
            except OSError as exc:
                os.close(fd)
                return exc.strerror or type(exc).__name__
        self.fd, self.kind = fd, kind
        return None

    def poll(self) -> list[str]:
        if self.fd < 0:
            return []
        out: list[str] = []
        total = 0
        while total < self.max_bytes:
            try:
                data = os.read(self.fd, _RECORD if self.kind == "kmsg" else _CHUNK)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.overruns += 1
                    continue
                break
            if not data:
                break
            total += len(data)
            if self.kind == "kmsg":
                out.extend(data.decode("utf-8", errors="replace").splitlines())
                continue
            parts = (self.partial + data).split(b"\n")
            self.partial = parts.pop()[:MAX_LINE_BYTES]
            out.extend(p[:MAX_LINE_BYTES].decode("utf-8", errors="replace") for p in parts)
        return out

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
