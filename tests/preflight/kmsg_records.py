"""/dev/kmsg records built from a dmesg log, for the tests of a wrapping ring (issue 34, item 5).

The record format is Documentation/ABI/testing/dev-kmsg's `priority,sequence,timestamp_us,flags;
message`; priority 3 (kern.err) for every line (facility 0, the kernel; printk.c
info_print_ext_header()). The lines come from tests/fixtures/kernel-log/x99-r9700-reset-86.log
(README there: built from amdgpu's upstream format strings).
"""

from __future__ import annotations

import re
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
RESET_LOG = FIXTURES / "kernel-log" / "x99-r9700-reset-86.log"
_DMESG = re.compile(r"\[\s*(\d+)\.(\d+)\] (.*)")
FILLER = "usb 1-1: new high-speed USB device number {n} using xhci_hcd"


def records(lines: list[str], first_seq: int) -> str:
    """The dmesg lines as kmsg records numbered from `first_seq`."""
    out = []
    for seq, line in enumerate(lines, first_seq):
        found = _DMESG.fullmatch(line)
        usec, text = ((int(found.group(1)) * 1_000_000 + int(found.group(2)[:6].ljust(6, "0")),
                       found.group(3)) if found else (seq * 1000, line))
        out.append(f"3,{seq},{usec},-;{text}\n")
    return "".join(out)


def reset_lines() -> list[str]:
    return RESET_LOG.read_text().splitlines()


def filler(count: int, start_s: int = 9000) -> list[str]:
    """Boring lines after the reset (what pushes it out of the ring)."""
    return [f"[{start_s + n:5d}.000000] {FILLER.format(n=n % 127 + 1)}" for n in range(count)]


def make_proc(root: Path, boot_id: str) -> Path:
    """A proc root holding this boot's id (rocmseat.sysfs.host reads it there)."""
    kernel = root / "sys" / "kernel"
    (kernel / "random").mkdir(parents=True, exist_ok=True)
    (kernel / "random" / "boot_id").write_text(boot_id + "\n")
    (kernel / "hostname").write_text("gpu07\n")
    (root / "uptime").write_text("9200.00 1000.00\n")
    return root
