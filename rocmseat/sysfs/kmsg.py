"""The kernel log reader: /dev/kmsg (non-blocking, to its end) or a saved log (to its end).

The path comes from the root mechanism every reader uses (rocmseat.sysfs.fs.default_kmsg_path:
`$ROCMSEAT_KMSG`, else /dev/kmsg on the live root, else none), or from `--kernel-log FILE`.

/dev/kmsg (Linux Documentation/ABI/testing/dev-kmsg): a fresh open reads from the oldest record
the ring buffer still holds; every read() returns one record; with O_NONBLOCK a read at the end
fails with EAGAIN (the end of this boot's log so far); a reader the buffer overran gets EPIPE
once and then continues at the oldest record left (the parser sees the sequence gap and says so).
Opening or reading needs CAP_SYSLOG when kernel.dmesg_restrict is 1 (kernel/printk/printk.c
devkmsg_open() -> check_syslog_permissions()): that is `unknown`, never an empty log. It is
told from any other character device (a terminal behind /dev/stdin, /dev/zero) by its number:
1:11 (drivers/char/mem.c `devlist[]`, `[11] = { "kmsg", ... }` under MEM_MAJOR 1).

The ring holds up to 2 GiB: `log_buf_len=` is clamped to LOG_BUF_LEN_MAX, `(u32)(1 << 31)`
(kernel/printk/printk.c log_buf_len_update(): "log_buf over 2G is not supported."). Records are
read oldest first into a bounded tail (`max_bytes`): when the ring holds more, the oldest are
dropped from the tail and the newest are judged; `unread` names the sequence numbers that were
not (the dropped ones), which the events family says (and rocmseat.preflight.boot_events
counts as never seen).

A saved log is read to its end, whatever it is:
- a regular file, in chunks;
- a pipe or FIFO (`journalctl -k -b | rocmseat preflight --kernel-log /dev/stdin`, or
  `<(journalctl -k -b)`): waited on with poll() until its writer closes it. A FIFO nobody has
  opened for writing yet reports no hang-up (fs/pipe.c fifo_open() "suppress EPOLLHUP until we
  have seen a writer", pipe_poll()), so a writer that never comes, or never closes, ends at the
  time budget: that read is `partial`, never judged whole;
- gzip, xz and bzip2 (logrotate's `kern.log.2.gz`) are decompressed on the fly by the standard
  library (zlib, lzma, bz2), concatenated members too, the output bounded like any log (a
  decompression bomb ends at `max_bytes`, in constant memory); a truncated or corrupt stream is
  `partial`. zstd, lz4, zip and 7z have no reader in Python 3.11's standard library: refused as
  `partial`, by name. A file that is not text (a NUL byte: a systemd journal file, an ELF
  binary, UTF-16) is refused the same way, naming the offset.

`partial` (a list of reasons) makes the events family `unknown`: a log read only in part is never
called healthy. `notes` are what was read but cut (a line longer than MAX_LINE_BYTES; the
kernel's own limit is 1 KiB).
"""

from __future__ import annotations

import bz2
import errno
import lzma
import os
import select
import stat
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmseat.sysfs.fs import Unreadable

MAX_LOG_BYTES = 1 << 30  # a saved log (decompressed) larger than this is partial, and says so
# The ring is at most LOG_BUF_LEN_MAX = 2 GiB of text (printk.c log_buf_len_update()); each
# record read adds its "pri,seq,usec,flags;" header and dictionary lines. The tail kept for one
# run is smaller than the largest ring: beyond it the oldest records are dropped and named.
MAX_KMSG_BYTES = 1 << 28
READ_BUDGET_S = 60.0  # wall time for one whole read (a pipe still open then is partial)
MAX_LINE_BYTES = 8192
KMSG_MAJOR, KMSG_MINOR = 1, 11  # drivers/char/mem.c devlist[]: "kmsg" under MEM_MAJOR
_CHUNK = 1 << 16
_TAIL_CHUNK = 1 << 20  # the kmsg tail is kept in chunks of about this size
_RECORD = 16384  # one /dev/kmsg record; CONSOLE_EXT_LOG_MAX is 8 KiB
_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
# formats told by their first bytes (each format's own specification of its magic number)
_READABLE = ((b"\x1f\x8b", "gzip"), (b"\xfd7zXZ\x00", "xz"), (b"BZh", "bzip2"))
_REFUSED = (
    (b"\x28\xb5\x2f\xfd", "zstd-compressed (Python 3.11's standard library has no zstd "
                          "reader: zstdcat FILE | rocmseat ... --kernel-log /dev/stdin)"),
    (b"\x04\x22\x4d\x18", "lz4-compressed (decompress it first: lz4cat)"),
    (b"PK\x03\x04", "a zip archive (unpack it first)"),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive (unpack it first)"),
    (b"LPKSHHRH", "a systemd journal file (read it with journalctl -k --file=FILE)"),
    (b"\177ELF", "an ELF binary, not a log"),
)


@dataclass(slots=True)
class KernelLog:
    """An open kernel log: `lines()` yields its text lines once; `partial` says why the read is
    not the whole log and `notes` what was cut (both complete when `lines()` is exhausted)."""

    path: str
    kind: str  # "kmsg" (the /dev/kmsg device), "file", "fifo" (a pipe or FIFO)
    fd: int
    max_bytes: int = MAX_LOG_BYTES
    budget_s: float = READ_BUDGET_S
    monotonic: Callable[[], float] = time.monotonic
    notes: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    overruns: int = 0  # EPIPE answers from /dev/kmsg
    first: bytes = b""  # the record read at open (the proof of the right to read)
    unread: tuple[int, int] | None = None  # kmsg: (first, last) sequence number not read
    compression: str | None = None  # "gzip", "xz", "bzip2" when the saved log was one

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

    # --- /dev/kmsg ------------------------------------------------------------------------
    def _records(self) -> Iterator[str]:
        tail = _Tail(min(self.max_bytes, MAX_KMSG_BYTES))
        if self.first:
            tail.add(self.first)
        deadline = self.monotonic() + self.budget_s
        while True:
            if self.monotonic() > deadline:
                self.partial.append(f"stopped reading after {self.budget_s:g} s (the kernel "
                                    "kept writing): the newest records are unread")
                break
            try:
                record = os.read(self.fd, _RECORD)
            except BlockingIOError:
                break  # EAGAIN: the end of the log so far
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.overruns += 1
                    continue
                self.partial.append(f"read failed: {exc.strerror or type(exc).__name__}")
                break
            if not record:
                break
            tail.add(record)
        if tail.dropped:
            self.unread = tail.dropped
            first, last = tail.dropped
            self.notes.append(
                f"the ring held more than the {tail.limit:,}-byte read cap: the oldest records "
                f"(sequence numbers {first:,} to {last:,}) were not read; the newest were")
        for chunk in tail.chunks:
            yield from chunk.decode("utf-8", errors="replace").splitlines()

    # --- a saved log ----------------------------------------------------------------------
    def _text(self) -> Iterator[str]:
        partial = b""
        cut = 0
        for chunk in self._decoded():
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

    def _decoded(self) -> Iterator[bytes]:
        """The log's bytes, decompressed when it is compressed, to the end or the first reason
        it is partial (appended to `partial`); at most `max_bytes` of them."""
        total = 0
        inflater: _Inflater | None = None
        for raw in self._raw():
            if total == 0 and inflater is None:
                refused = _refused(raw)
                if refused is not None:
                    self.partial.append(f"is {refused}")
                    return
                fmt = _compression(raw)
                if fmt is not None:
                    inflater, self.compression = _Inflater(fmt), fmt
            try:
                pieces = inflater.feed(raw) if inflater is not None else iter((raw,))
                for piece in pieces:
                    if b"\0" in piece:
                        at = total + piece.index(b"\0")
                        self.partial.append(f"is not text: a NUL byte at offset {at:,}"
                                            + (f" of the {inflater.fmt} content"
                                               if inflater is not None else "")
                                            + " (a binary file?)")
                        return
                    total += len(piece)
                    if total > self.max_bytes:
                        self.partial.append(f"stopped after {self.max_bytes:,} bytes"
                                            + (" decompressed" if inflater else "")
                                            + ": the rest is unread")
                        return
                    yield piece
            except (zlib.error, lzma.LZMAError, OSError, EOFError) as exc:
                self.partial.append(f"is not a valid {inflater.fmt if inflater else ''} file "
                                    f"({exc})")
                return
        if inflater is not None and not inflater.complete:
            self.partial.append(f"is a truncated {inflater.fmt} file (it ends before the "
                                "stream's end marker)")

    def _raw(self) -> Iterator[bytes]:
        """The bytes as they come, to the end (a pipe: until its writer closes it), within the
        time budget; a read stopped short appends its reason to `partial`."""
        deadline = self.monotonic() + self.budget_s
        poller = select.poll() if self.kind == "fifo" else None
        if poller is not None:
            poller.register(self.fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        while True:
            left = deadline - self.monotonic()
            if left <= 0:
                self.partial.append(self._timed_out())
                return
            if poller is not None and not poller.poll(max(1, int(min(left, 1.0) * 1000))):
                continue  # nothing yet: wait on, up to the budget
            try:
                chunk = os.read(self.fd, _CHUNK)
            except BlockingIOError:
                continue
            except OSError as exc:
                self.partial.append(f"read failed: {exc.strerror or type(exc).__name__}")
                return
            if not chunk:
                return  # the end of the file; a pipe's writer closed it
            yield chunk

    def _timed_out(self) -> str:
        if self.kind == "fifo":
            return (f"the pipe was still open after {self.budget_s:g} s (a writer that never "
                    "came, never closed, or follows the log like journalctl -f): the rest is "
                    "unread")
        return f"stopped reading after {self.budget_s:g} s: the rest is unread"


class _Tail:
    """The newest /dev/kmsg records, at most about `limit` bytes, in chunks; the sequence
    numbers of the records dropped from its front."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._chunk = max(4096, min(_TAIL_CHUNK, limit // 16))  # dropped a piece at a time
        self.chunks: deque[bytearray] = deque()
        self._firsts: deque[int | None] = deque()  # each chunk's first sequence number
        self.size = 0
        self.dropped: tuple[int, int] | None = None

    def add(self, record: bytes) -> None:
        if not self.chunks or len(self.chunks[-1]) >= self._chunk:
            self.chunks.append(bytearray())
            self._firsts.append(record_seq(record))
        if not record.endswith(b"\n"):
            record += b"\n"
        self.chunks[-1] += record
        self.size += len(record)
        while self.size > self.limit and len(self.chunks) > 1:
            gone = self.chunks.popleft()
            first = self._firsts.popleft()
            self.size -= len(gone)
            following = self._firsts[0]
            if first is not None and following is not None:
                low = first if self.dropped is None else self.dropped[0]
                self.dropped = (low, following - 1)


def record_seq(record: bytes) -> int | None:
    """The sequence number of a /dev/kmsg record (`pri,seq,usec,flags;...`). Pure."""
    head = record[:64].split(b",", 2)
    if len(head) < 3 or not head[1].isdigit():
        return None
    return int(head[1])


def _compression(first: bytes) -> str | None:
    for magic, name in _READABLE:
        if first.startswith(magic):
            if name == "bzip2" and not first[3:10].startswith(tuple(
                    bytes([d]) + b"1AY&SY" for d in b"123456789")):
                return None  # a text line that happens to begin "BZh"
            return name
    return None


def _refused(first: bytes) -> str | None:
    for magic, why in _REFUSED:
        if first.startswith(magic):
            return why
    return None


class _Inflater:
    """One compressed stream (and the members concatenated after it), decompressed in pieces
    of at most _CHUNK bytes: memory stays bounded whatever the ratio."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self._d: Any = self._new()
        self.complete = False  # at the end of a member, nothing pending

    def _new(self) -> Any:
        if self.fmt == "gzip":
            return zlib.decompressobj(zlib.MAX_WBITS | 16)  # a gzip header and CRC checked
        if self.fmt == "xz":
            return lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
        return bz2.BZ2Decompressor()

    def feed(self, data: bytes) -> Iterator[bytes]:
        while data:
            if self.complete:
                if self.fmt == "gzip":
                    data = data.lstrip(b"\0")  # gzip(1) ignores trailing zeros (tar padding)
                    if not data:
                        return
                self._d, self.complete = self._new(), False
            yield from (self._zlib(data) if self.fmt == "gzip" else self._stream(data))
            self.complete = bool(self._d.eof)
            data = self._d.unused_data if self.complete else b""

    def _zlib(self, data: bytes) -> Iterator[bytes]:
        d = self._d
        while True:
            out = d.decompress(data, _CHUNK)
            if out:
                yield out
            data = d.unconsumed_tail
            if d.eof or (not data and len(out) < _CHUNK):
                return

    def _stream(self, data: bytes) -> Iterator[bytes]:
        d = self._d  # lzma.LZMADecompressor, bz2.BZ2Decompressor: the same interface
        out = d.decompress(data, _CHUNK)
        while True:
            if out:
                yield out
            if d.eof or d.needs_input:
                return
            out = d.decompress(b"", _CHUNK)


def _kind(info: os.stat_result) -> str | None:
    mode = info.st_mode
    if stat.S_ISCHR(mode):
        rdev = info.st_rdev
        return "kmsg" if (os.major(rdev), os.minor(rdev)) == (KMSG_MAJOR, KMSG_MINOR) else None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISFIFO(mode):
        return "fifo"
    return None


def _not_a_log(info: os.stat_result) -> str:
    mode = info.st_mode
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISCHR(mode):
        rdev = info.st_rdev
        return (f"is a character device ({os.major(rdev)}:{os.minor(rdev)}) that is not "
                f"/dev/kmsg ({KMSG_MAJOR}:{KMSG_MINOR}): a terminal behind /dev/stdin? pipe "
                "the log in (journalctl -k -b | rocmseat ... --kernel-log /dev/stdin)")
    return "is not a log (a socket or block device)"


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
    info = os.fstat(fd)
    kind = _kind(info)
    if kind is None:
        os.close(fd)
        return Unreadable(str(path), _not_a_log(info))
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
        kind = _kind(os.fstat(fd))
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


@dataclass(slots=True)
class SeqSpan:
    """The /dev/kmsg sequence numbers of the records read: the first, the last, and the gaps
    between them (records the ring dropped while they were read), at most MAX_GAPS named."""

    first: int | None = None
    last: int | None = None
    gaps: list[tuple[int, int]] = field(default_factory=list)
    missed: int = 0  # records inside the gaps, all of them (named or not)
    MAX_GAPS = 32

    def see(self, line: str) -> None:
        """One raw line; only a record (`pri,seq,usec,flags;...`) counts."""
        head = line[:64].split(",", 2)
        if len(head) < 3 or not head[1].isdigit() or ";" not in line[:128]:
            return
        seq = int(head[1])
        if self.first is None:
            self.first = seq
        elif self.last is not None and seq > self.last + 1:
            self.missed += seq - self.last - 1
            if len(self.gaps) < self.MAX_GAPS:
                self.gaps.append((self.last + 1, seq - 1))
        if self.last is None or seq > self.last:
            self.last = seq
