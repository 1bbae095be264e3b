"""Issue 24: error windows that neither a gap nor the clock can move. Each reading is stamped
with the seconds since boot beside the wall clock (rocmseat.preflight.windows); a reading with an
unreadable source is never a window's base."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rocmseat.findings import Severity
from rocmseat.located import DocumentInvalid
from rocmseat.preflight.run import PreflightOptions, preflight_report
from rocmseat.preflight.windows import (
    Entry,
    Stamp,
    parse_ring,
    state_path,
    window_for,
)
from tests.sysfs.conftest import fixture_builder

BOOT_ID = "0f3c2b1a-9d8e-4f70-8a6b-5c4d3e2f1a0b"
MI_GPU = "0000:0c:00.0"


def proc_root(base: Path, uptime_s: float, boot_id: str = BOOT_ID) -> Path:
    """A proc root as the kernel lays it out: sys/kernel/random/boot_id, sys/kernel/hostname,
    uptime ("<seconds since boot> <idle seconds>", fs/proc/uptime.c)."""
    root = base / "proc"
    (root / "sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (root / "sys/kernel/random/boot_id").write_text(boot_id + "\n")
    (root / "sys/kernel/hostname").write_text("gpu-node-7\n")
    (root / "uptime").write_text(f"{uptime_s:.2f} {uptime_s * 1.9:.2f}\n")
    return root


def _checks(report):
    return sorted((f.check_id, f.severity, f.subject) for f in report.findings
                  if f.severity != Severity.OK)


def test_a_month_slow_clock_stepped_in_the_same_boot_still_fails(copy_tree, tmp_path):
    """Before: the boot's 6,655 BadTLP reading, stamped a month in the past, became "older than
    the window": `aer.badtlp` vanished from the verdict once NTP stepped the clock."""
    root = copy_tree("x99-r9700-degraded")
    state = tmp_path / "state"
    # the node-preflight timer, 1 min after boot, before time sync: the clock is a month slow
    first = preflight_report(root, state, PreflightOptions(now=lambda: "2026-11-01T00:01:00Z",
                             proc_root=proc_root(tmp_path, 60.0)))
    assert ("aer.badtlp", Severity.FAIL, "0000:80:02.0") in _checks(first)
    # NTP stepped the clock; 30 minutes of uptime later the next run
    later = preflight_report(root, state, PreflightOptions(now=lambda: "2026-12-01T00:30:00Z",
                             proc_root=proc_root(tmp_path, 1860.0)))
    assert ("aer.badtlp", Severity.FAIL, "0000:80:02.0") in _checks(later)
    (badtlp,) = [f for f in later.findings if f.check_id == "aer.badtlp"]
    assert "+6,655 BadTLP since boot (no reading of this boot is 24 h old yet)" in badtlp.message
    ring = parse_ring(state_path(state).read_text(), "readings")
    entries = ring.devices["0000:80:02.0"]
    assert [(e.first, e.first_boot_s) for e in entries][:1] == [("2026-11-01T00:01:00Z", 60.0)]


def test_the_boot_clock_measures_the_window_a_day_later(copy_tree, tmp_path):
    root = copy_tree("x99-r9700-degraded")
    state = tmp_path / "state"
    preflight_report(root, state, PreflightOptions(now=lambda: "2026-11-01T00:01:00Z",
                     proc_root=proc_root(tmp_path, 60.0)))
    # 25 h of uptime later (and the wall clock a month on): the boot's reading is the base
    later = preflight_report(root, state, PreflightOptions(now=lambda: "2026-12-02T01:01:00Z",
                             proc_root=proc_root(tmp_path, 60.0 + 25 * 3600)))
    assert not [c for c in _checks(later) if c[0] == "aer.badtlp"]
    (clean,) = [f for f in later.findings
                if f.check_id == "aer.clean" and f.subject == "0000:86:00.0"]
    # the base's reading, 25 h of uptime ago, worded in the wall clock of now (not its own
    # month-slow stamp): whatever the clock did
    assert "in the last 24 h (since 2026-12-01 00:01 UTC)" in clean.message


def test_an_unreadable_reading_is_never_a_base(copy_tree, tmp_path):
    """Before: an unreadable gpu_metrics (a GPU reset answers EPERM) was stored as 0 replays;
    24 h later the old 500 replays were charged to the window: `aer.fw_replay +500` FAIL."""
    builder = fixture_builder()
    root = copy_tree("mi300x-8gpu")  # v1.5 tables: what the code before issue 24 decoded
    state = tmp_path / "state"
    table = (root / "bus/pci/devices" / MI_GPU).resolve() / "gpu_metrics"

    def run(stamp):
        return preflight_report(root, state, PreflightOptions(families={"aer"}, now=lambda: stamp))

    table.write_bytes(builder.mi300x_metrics(replay=500))
    run("2026-12-01T00:00:00Z")
    table.write_bytes(builder.mi300x_metrics()[:300])  # unreadable this once
    gap = run("2026-12-01T02:00:00Z")
    assert ("aer.unknown", Severity.UNKNOWN, MI_GPU) in _checks(gap)
    ring = parse_ring(state_path(state).read_text(), "readings")
    assert ring.devices[MI_GPU][-1].unknown == ("gpu_metrics",)
    table.write_bytes(builder.mi300x_metrics(replay=500))
    later = run("2026-12-02T03:00:00Z")
    assert _checks(later) == []


def test_window_for_skips_gaps_and_unplaced_readings():
    entries = (
        Entry("2026-12-01T00:00:00Z", "2026-12-01T00:00:00Z", {"a": 1}, 100.0, 100.0),
        Entry("2026-12-01T01:00:00Z", "2026-12-01T01:00:00Z", {}, 3700.0, 3700.0, ("ras",)),
        Entry("2026-12-01T01:30:00Z", "2026-12-01T01:30:00Z", {"a": 2}),  # no boot clock
    )
    window = window_for(entries, Stamp("2026-12-03T00:00:00Z", 100_000.0), 24 * 3600)
    assert window.base == {"a": 1}
    # on the wall clock, likewise: the gap is never the base
    wall = window_for(entries[:2], "2026-12-03T00:00:00Z", 24 * 3600)
    assert wall.base == {"a": 1}


@pytest.mark.parametrize("bad", [-1, math.inf, "60", True, 1e11])
def test_hostile_boot_seconds_are_refused(bad):
    doc = {"schema": "rocmseat.error-readings/v1", "sysfs_root": "/x", "boot_id": None,
           "devices": {"0000:01:00.0": [{"first": "2026-12-01T00:00:00Z",
                                         "last": "2026-12-01T00:00:00Z", "counters": {},
                                         "first_boot_s": bad}]}}
    text = json.dumps(doc, allow_nan=True)
    with pytest.raises(DocumentInvalid, match="first_boot_s"):
        parse_ring(text, "readings")


def test_an_unreadable_uptime_warns_and_keeps_the_wall_clock(copy_tree, tmp_path):
    root = copy_tree("x99-r9700")
    proc = proc_root(tmp_path, 60.0)
    (proc / "uptime").write_text("soon\n")
    report = preflight_report(root, tmp_path / "state",
                              PreflightOptions(families={"aer"}, proc_root=proc))
    (warn,) = [f for f in report.findings if f.check_id == "aer.window"]
    assert warn.severity == Severity.WARN and "cannot read the boot clock" in warn.message


@pytest.mark.parametrize("text", ["", "nan 1.0\n", "-5.00 1.00\n", "1e9 2.0\n",
                                  "99999999999.00 1.00\n", "12.5\n", "12.50 3.00 9\n"])
def test_hostile_uptime_is_a_one_line_reason(tmp_path, text):
    from rocmseat.sysfs.host import read_uptime_s

    proc = proc_root(tmp_path, 60.0)
    (proc / "uptime").write_text(text)
    value, error = read_uptime_s(proc)
    assert value is None and error is not None and "\n" not in error
