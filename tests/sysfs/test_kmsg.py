"""The kernel log reader read to the end (issue 34, items 3, 4 and 9): a pipe until its writer
closes it, compressed logs through the standard library, what is not text refused, and the
newest /dev/kmsg records kept when the ring holds more than the read cap. Every test here fails
on the reader before issue 34 (O_NONBLOCK to the first EAGAIN, bytes taken as text, the oldest
records kept)."""

from __future__ import annotations

import bz2
import errno
import gzip
import lzma
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

import rocmseat.sysfs.kmsg as kmsg
from rocmseat.findings import Severity
from rocmseat.preflight.events import EventThresholds, judge_events, read_kernel_events
from rocmseat.sysfs.kmsg import KernelLog, open_kernel_log
from tests.conftest import REPO
from tests.sysfs.conftest import SYSFS_FIXTURES

KLOG = Path(__file__).resolve().parent.parent / "fixtures" / "kernel-log"
RESET_LOG = KLOG / "x99-r9700-reset-86.log"
HEALTHY = SYSFS_FIXTURES / "x99-r9700"
# amdgpu_device.c amdgpu_device_gpu_recover(): "GPU reset begin!" (dev_info, 5.x-6.x)
FATAL = b"amdgpu 0000:86:00.0: amdgpu: GPU reset begin!\n"
BOOT = b"Linux version 6.8.0-49-generic (buildd@lcy02-amd64-103) #49-Ubuntu SMP\n"


def read_all(log: KernelLog) -> list[str]:
    return list(log.lines())


def _read(path: Path, budget_s: float | None):
    # the default budget is the reader's own (60 s): a test that waits on it says so
    return read_kernel_events(path, (), live=False, **(
        {"budget_s": budget_s} if budget_s is not None else {}))


def verdict(path: Path, budget_s: float | None = None) -> dict[str, Severity]:
    findings = judge_events(_read(path, budget_s), (), EventThresholds())
    worst: dict[str, Severity] = {}
    for f in findings:
        worst[f.check_id] = f.severity
    return worst


def messages(path: Path, budget_s: float | None = None) -> str:
    return "\n".join(f.message for f in judge_events(_read(path, budget_s), (),
                                                      EventThresholds()))


# ----- item 3: a pipe is read until its writer closes it ---------------------------------------
def _slow_writer(fifo: Path, parts: list[bytes], pause_s: float) -> threading.Thread:
    def write() -> None:
        try:
            with open(fifo, "wb", buffering=0) as out:  # blocks until the reader opened it
                for part in parts:
                    out.write(part)
                    time.sleep(pause_s)
        except BrokenPipeError:
            pass  # the reader stopped at its bound and closed

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_a_slow_writer_is_read_to_its_end(tmp_path):
    """The boot banner now, the fatal line 0.6 s later: read, and judged (before: 0 lines, ok)."""
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    log = open_kernel_log(fifo, budget_s=10)
    assert isinstance(log, KernelLog) and log.kind == "fifo"
    writer = _slow_writer(fifo, [BOOT, FATAL], 0.6)
    lines = read_all(log)
    writer.join(5)
    assert lines[-1] == FATAL.decode().strip() and log.partial == []


def test_a_fifo_that_never_writes_is_unknown_at_the_time_limit(tmp_path):
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    started = time.monotonic()
    said = verdict(fifo, budget_s=0.5)
    assert time.monotonic() - started < 3
    assert said == {"events.source": Severity.UNKNOWN}
    assert "the pipe was still open after 0.2 s" in messages(fifo, budget_s=0.2)


def test_a_writer_that_closes_without_writing_is_an_empty_log_not_a_clean_one(tmp_path):
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    log = open_kernel_log(fifo, budget_s=5)
    assert isinstance(log, KernelLog)
    writer = _slow_writer(fifo, [], 0)
    assert read_all(log) == []
    writer.join(5)
    events = read_kernel_events(RESET_LOG, (), live=False)  # the contrast: a real log is judged
    assert not isinstance(events, type(None)) and events.partial == ()
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert verdict(empty) == {"events.source": Severity.UNKNOWN}
    assert "is empty" in messages(empty)


def test_a_huge_pipe_stops_at_the_size_bound_and_is_partial(tmp_path):
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    log = open_kernel_log(fifo, budget_s=20, max_bytes=1 << 20)
    assert isinstance(log, KernelLog)
    block = BOOT * ((1 << 16) // len(BOOT))
    writer = _slow_writer(fifo, [block] * 64, 0)  # 4 MiB, more than the bound
    lines = read_all(log)
    assert len(lines) < 20_000 and "stopped after 1,048,576 bytes" in log.partial[0]
    writer.join(1)  # the writer gets EPIPE when we close: it ends too


def _cli(args: list[str], *, stdin: int | None = None, shell: str | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    for var in ("ROCMSEAT_SYSFS_ROOT", "ROCMSEAT_PROC_ROOT", "ROCMSEAT_KMSG"):
        environ.pop(var, None)
    argv = ["bash", "-c", shell] if shell else [sys.executable, "-m", "rocmseat", *args]
    return subprocess.run(argv, stdin=stdin, capture_output=True, text=True, timeout=120,
                          env=environ, cwd=REPO)


def test_journalctl_piped_into_dev_stdin_is_judged_after_a_slow_start(tmp_path):
    """`journalctl -k -b | rocmseat preflight --kernel-log /dev/stdin`, the writer 1 s late."""
    writer = subprocess.Popen(["bash", "-c", f"sleep 1; cat {RESET_LOG}"],
                              stdout=subprocess.PIPE)
    assert writer.stdout is not None
    done = _cli(["preflight", "--sysfs-root", str(HEALTHY), "--state-dir", str(tmp_path),
                 "--only", "events", "--kernel-log", "/dev/stdin"], stdin=writer.stdout.fileno())
    writer.wait(10)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "GPU reset" in done.stdout and "0000:86:00.0" in done.stdout


def test_process_substitution_and_a_follower_that_never_ends(tmp_path):
    """`<(journalctl -k -b)` is read to its end; `<(journalctl -k -f)` (never closes) is
    unknown at --kernel-log-timeout, never ok."""
    base = (f"{sys.executable} -m rocmseat preflight --sysfs-root {HEALTHY} --state-dir "
            f"{tmp_path} --only events")
    whole = _cli([], shell=f"{base} --kernel-log <(sleep 0.5; cat {RESET_LOG})")
    assert whole.returncode == 1, whole.stdout + whole.stderr
    follows = _cli([], shell=f"{base} --kernel-log-timeout 1 --kernel-log "
                             f"<({{ grep -v 86:00.0 {RESET_LOG}; sleep 3; }} 2>/dev/null)")
    assert follows.returncode == 2, follows.stdout + follows.stderr
    assert "the pipe was still open after 1 s" in follows.stdout


def test_a_terminal_behind_dev_stdin_is_refused_not_read_as_kmsg():
    assert kmsg._kind(os.stat("/dev/null")) is None  # 1:3, a character device like a tty
    refused = open_kernel_log("/dev/null")
    assert not isinstance(refused, KernelLog)
    assert "that is not /dev/kmsg (1:11)" in refused.reason


# ----- item 4: compressed and binary files -----------------------------------------------------
COMPRESSORS = {"gzip": gzip.compress, "xz": lzma.compress, "bzip2": bz2.compress}


@pytest.mark.parametrize("fmt", sorted(COMPRESSORS))
def test_a_compressed_log_is_read_through_the_standard_library(tmp_path, fmt):
    """`--kernel-log kern.log.2.gz` (logrotate): before, "no amdgpu or AER event (1 lines
    read)", exit 0."""
    path = tmp_path / f"kern.log.2.{fmt}"
    path.write_bytes(COMPRESSORS[fmt](RESET_LOG.read_bytes()))
    said = verdict(path)
    assert said["events.gpu_reset"] == Severity.FAIL and "events.source" not in said
    events = read_kernel_events(path, (), live=False)
    assert events.lines == len(RESET_LOG.read_text().splitlines())


def test_concatenated_gzip_members_are_one_log(tmp_path):
    text = RESET_LOG.read_bytes()
    half = len(text) // 2
    cut = text.index(b"\n", half) + 1
    path = tmp_path / "kern.log.gz"
    path.write_bytes(gzip.compress(text[:cut]) + gzip.compress(text[cut:]) + b"\0" * 512)
    assert verdict(path)["events.gpu_reset"] == Severity.FAIL
    assert "events.source" not in verdict(path)


@pytest.mark.parametrize("fmt", sorted(COMPRESSORS))
def test_a_truncated_compressed_log_is_unknown(tmp_path, fmt):
    data = COMPRESSORS[fmt](RESET_LOG.read_bytes() * 20)
    path = tmp_path / f"kern.log.{fmt}"
    path.write_bytes(data[: len(data) * 2 // 3])
    said = verdict(path)
    assert said["events.source"] == Severity.UNKNOWN
    assert f"truncated {fmt}" in messages(path) or f"not a valid {fmt}" in messages(path)


def test_a_corrupt_gzip_is_unknown(tmp_path):
    data = bytearray(gzip.compress(RESET_LOG.read_bytes()))
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "kern.log.gz"
    path.write_bytes(bytes(data))
    assert verdict(path)["events.source"] == Severity.UNKNOWN
    assert "gzip" in messages(path)


@pytest.mark.parametrize(("head", "named"), [
    (b"\x28\xb5\x2f\xfd" + b"\0" * 64, "zstd"),  # RFC 8878 3.1.1 magic number 0xFD2FB528
    (b"\x04\x22\x4d\x18" + b"\0" * 64, "lz4"),
    (b"LPKSHHRH" + b"\0" * 64, "systemd journal file"),  # journal-def.h HEADER_SIGNATURE
    (b"\x7fELF\x02\x01\x01" + b"\0" * 64, "ELF binary"),
    (b"PK\x03\x04" + b"\0" * 64, "zip archive"),
])
def test_what_has_no_stdlib_reader_or_is_no_log_is_unknown_by_name(tmp_path, head, named):
    path = tmp_path / "kern.log.2"
    path.write_bytes(head)
    assert verdict(path) == {"events.source": Severity.UNKNOWN}
    assert named in messages(path) and str(path) in messages(path)


def test_a_file_with_nul_bytes_is_not_text(tmp_path):
    """UTF-16 (a log saved by a Windows editor), or a binary with no known magic."""
    path = tmp_path / "kern.log"
    path.write_bytes(RESET_LOG.read_text().encode("utf-16-le"))
    assert verdict(path) == {"events.source": Severity.UNKNOWN}
    assert "a NUL byte at offset 1" in messages(path)


def test_a_decompression_bomb_is_bounded_in_memory_and_partial(tmp_path):
    """64 MiB of text in a ~64 KiB gzip, read with an 8 MiB bound: partial, and the reader's
    memory stays near one chunk, never the decompressed size."""
    path = tmp_path / "bomb.gz"
    path.write_bytes(gzip.compress(BOOT * ((64 << 20) // len(BOOT)), compresslevel=9))
    assert path.stat().st_size < 1 << 20
    log = open_kernel_log(path, max_bytes=8 << 20)
    assert isinstance(log, KernelLog)
    tracemalloc.start()
    try:
        count = sum(1 for _ in log.lines())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count < (9 << 20) // len(BOOT)
    assert "stopped after 8,388,608 bytes decompressed" in log.partial[0]
    assert peak < 4 << 20, f"peak {peak:,} bytes"


def test_a_zero_bomb_is_refused_at_its_first_piece(tmp_path):
    path = tmp_path / "zeros.gz"
    path.write_bytes(gzip.compress(b"\0" * (32 << 20)))
    started = time.monotonic()
    assert verdict(path) == {"events.source": Severity.UNKNOWN}
    assert time.monotonic() - started < 2 and "NUL byte at offset 0 of the gzip" in messages(path)


def test_a_gzip_through_a_pipe_is_read_too(tmp_path):
    fifo = tmp_path / "log"
    os.mkfifo(fifo)
    data = gzip.compress(RESET_LOG.read_bytes())
    writer = _slow_writer(fifo, [data[:100], data[100:]], 0.3)
    assert verdict(fifo, budget_s=10)["events.gpu_reset"] == Severity.FAIL
    writer.join(5)


# ----- item 9: the newest /dev/kmsg records are kept when the ring holds more than the cap ------
def _fake_kmsg(monkeypatch, records: list[bytes], tmp_path: Path) -> Path:
    """A regular file read as /dev/kmsg (one record per read, EAGAIN at the end)."""
    path = tmp_path / "kmsg"
    path.write_bytes(b"")
    monkeypatch.setattr(kmsg, "_kind", lambda info: "kmsg")
    feed = iter(records)
    real_read = os.read

    def read(fd: int, n: int) -> bytes:
        if fd < 0:
            return real_read(fd, n)
        try:
            return next(feed)
        except StopIteration:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable") from None

    monkeypatch.setattr(kmsg.os, "read", read)
    return path


def test_a_ring_larger_than_the_cap_keeps_the_newest_and_names_the_rest(tmp_path, monkeypatch):
    """A 2 GiB ring (printk.c LOG_BUF_LEN_MAX) read with a cap: before, the oldest records
    were read and the newest (a GPU reset a minute ago) never were."""
    records = [f"6,{seq},{seq * 1000},-;usb 1-1: new high-speed USB device number 3\n".encode()
               for seq in range(4000)]
    records.append(b"3,4000,4000000,-;" + FATAL)
    path = _fake_kmsg(monkeypatch, records, tmp_path)
    log = open_kernel_log(path, max_bytes=64 << 10)
    assert isinstance(log, KernelLog) and log.kind == "kmsg"
    lines = read_all(log)
    assert lines[-1] == "3,4000,4000000,-;" + FATAL.decode().strip()
    assert log.unread is not None and log.unread[0] == 0 and log.unread[1] > 2000
    first_kept = int(lines[0].split(",")[1])
    assert first_kept == log.unread[1] + 1
    assert f"sequence numbers 0 to {log.unread[1]:,}" in log.notes[0]


def test_the_default_cap_is_not_below_a_large_ring():
    """A ring of 128 MiB (log_buf_len=128M) fits; the 64 MiB of before did not."""
    assert kmsg.MAX_KMSG_BYTES >= 128 << 20


def test_the_capped_read_through_the_events_family_judges_the_newest(tmp_path, monkeypatch):
    records = [f"6,{seq},{seq * 1000},-;usb 1-1: new high-speed USB device number 3\n".encode()
               for seq in range(3000)]
    records.append(b"3,3000,3000000,-;" + FATAL)
    path = _fake_kmsg(monkeypatch, records, tmp_path)
    monkeypatch.setattr(kmsg, "MAX_KMSG_BYTES", 32 << 10)
    findings = judge_events(read_kernel_events(path, (), live=True), (), EventThresholds())
    by_id = {f.check_id: f for f in findings}
    assert by_id["events.gpu_reset"].severity == Severity.FAIL
    assert "were not read; the newest were" in by_id["events.source"].message
    assert by_id["events.lost"].severity == Severity.WARN
