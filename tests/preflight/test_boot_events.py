"""This boot's kernel events kept in the state dir (issue 34, item 5): a wrap of the printk ring
forgets no event, records no run read are said on every later run of the boot, and the kept
file is held to the state dir's rules. Each run reads the node's own log the way every root
is given (ROCMSEAT_KMSG, with a proc root for the boot id); the records are kmsg records of the
reset fixture (tests/preflight/kmsg_records.py). On main the second run of each test forgets
the reset: "events.lost" warns and the node is otherwise ok."""

from __future__ import annotations

import json
import os

import pytest

from rocmseat.located import DocumentInvalid
from rocmseat.preflight.boot_events import BOOT_EVENTS_DOC, parse_boot_events
from rocmseat.statedir import StateDir
from tests.preflight.kmsg_records import filler, make_proc, records, reset_lines
from tests.sysfs.conftest import SYSFS_FIXTURES

HEALTHY = SYSFS_FIXTURES / "x99-r9700"
BOOT_A = "3f1c2f6e-5d1a-4c59-9a53-0b7d4f3e8a11"
BOOT_B = "9b2e7c41-0a6d-4f1e-8c3b-5e9d1a2f4c77"


@pytest.fixture
def node(tmp_path, monkeypatch, rocmseat_cli):
    """run(log_text, boot_id) -> {check_id: (severity, message)} of one events run."""
    state = tmp_path / "state"

    def run(text: str, boot_id: str = BOOT_A, *, extra: tuple[str, ...] = ()):
        log = tmp_path / "kmsg"
        log.write_text(text)
        monkeypatch.setenv("ROCMSEAT_KMSG", str(log))
        monkeypatch.setenv("ROCMSEAT_PROC_ROOT", str(make_proc(tmp_path / boot_id, boot_id)))
        result = rocmseat_cli("preflight", "--sysfs-root", str(HEALTHY), "--state-dir",
                              str(state), "--only", "events", "--json", *extra)
        found = {}
        for f in json.loads(result.stdout)["findings"]:
            found.setdefault(f["check_id"], (f["severity"], f["message"]))
        return result.exit_code, found

    run.state = state  # type: ignore[attr-defined]
    return run


def first_boot_ring() -> str:
    return records(reset_lines(), 0)  # seq 0..39, the reset at 32


def test_a_wrapped_ring_forgets_no_reset(node):
    code, found = node(first_boot_ring())
    assert code == 1 and found["events.gpu_reset"][0] == "fail"
    # the ring wrapped: its oldest record is now past the reset (seq 40 on), none lost unseen
    code, found = node(records(filler(200), 40))
    assert code == 1, found
    severity, message = found["events.gpu_reset"]
    assert severity == "fail"
    assert "1 no longer in the kernel's ring: kept from an earlier read this boot" in message
    assert "events.lost" not in found


def test_a_reset_still_in_the_ring_is_counted_once(node):
    node(first_boot_ring())
    code, found = node(first_boot_ring() + records(filler(10), 40))
    assert code == 1 and "GPU reset: 1x " in found["events.gpu_reset"][1]
    assert "kept from an earlier read" not in found["events.gpu_reset"][1]


def test_records_no_run_read_are_said_on_every_later_run_of_the_boot(node):
    node(first_boot_ring())
    _, found = node(records(filler(50), 5000))  # 40..4999 wrapped before this run
    assert found["events.lost"][0] == "warn" and "4,960 records" in found["events.lost"][1]
    assert found["events.gpu_reset"][0] == "fail"
    _code, found = node(records(filler(50), 5020))  # nothing new lost: the boot still has a hole
    assert found["events.lost"][0] == "warn" and "4,960 records" in found["events.lost"][1]


def test_a_new_boot_starts_afresh(node):
    node(first_boot_ring())
    code, found = node(records(filler(50), 0), BOOT_B)
    assert code == 0 and "events.gpu_reset" not in found and "events.lost" not in found
    kept = StateDir(node.state).read(BOOT_EVENTS_DOC)
    assert kept is not None and kept.boot_id == BOOT_B and kept.tallies == ()


def test_a_saved_log_or_a_text_log_keeps_nothing(node, tmp_path):
    saved = tmp_path / "saved.log"
    saved.write_text(first_boot_ring())
    code, _ = node(records(filler(5), 0), extra=("--kernel-log", str(saved)))
    assert code == 1 and StateDir(node.state).read(BOOT_EVENTS_DOC) is None  # the own log's only
    code, _ = node("\n".join(reset_lines()) + "\n")  # dmesg text: no sequence numbers
    assert code == 1 and StateDir(node.state).read(BOOT_EVENTS_DOC) is None


def test_an_untrusted_kept_file_is_unknown_on_a_wrapped_ring_and_never_rewritten(node):
    node(first_boot_ring())
    path = StateDir(node.state).path(BOOT_EVENTS_DOC)
    os.chmod(path, 0o666)  # writable by anyone: it must not decide a verdict
    before = path.read_text()
    code, found = node(records(filler(20), 40))
    assert code == 2 and found["events.memory"][0] == "unknown"
    assert "untrusted" in found["events.memory"][1] and path.read_text() == before
    code, found = node(records(filler(20), 0), BOOT_A)  # the whole boot in the ring: a warning
    assert found["events.memory"][0] == "warn"


def test_a_damaged_kept_file_is_unknown_once_then_replaced(node):
    node(first_boot_ring())
    path = StateDir(node.state).path(BOOT_EVENTS_DOC)
    path.write_text('{"schema": "rocmseat.boot-events/v1", "tallies": 7}')
    _, found = node(records(filler(20), 40))
    assert found["events.memory"][0] == "unknown" and str(path) in found["events.memory"][1]
    # what the damage forgot is said from now on: records 0..39 count as never read
    _code, found = node(records(filler(20), 40))
    assert "events.memory" not in found and found["events.lost"][0] == "warn"


@pytest.mark.parametrize(("doc", "why"), [
    ({"tallies": [{"seqs": [3, 1]}]}, "increasing"),
    ({"last_seq": -1}, "whole number"),
    ({"last_seq": True}, "whole number"),
    ({"unseen_ranges": [[5, 1]]}, "first above last"),
    ({"extra": 1}, "unknown key"),
    ({"tallies": [{"sample": "a\u0007b"}]}, "control character"),
    ({"tallies": [{"count": 0}]}, "fewer than"),
])
def test_the_kept_document_is_strict(doc, why):
    tally = {"subject": "0000:86:00.0", "class": "gpu_reset", "count": 2, "first_s": 1.0,
             "last_s": 2.0, "sample": "GPU reset begin!", "rings": [], "processes": [],
             "details": [], "seqs": [1, 3]}
    base = {"schema": "rocmseat.boot-events/v1", "sysfs_root": "/s", "boot_id": BOOT_A,
            "last_seq": 9, "unseen": 0, "unseen_ranges": [], "tallies": [tally]}
    assert parse_boot_events(json.dumps(base), "f").tallies[0].count == 2  # the base is good
    bad = {**base, "tallies": [{**tally, **doc["tallies"][0]}]} if "tallies" in doc else {
        **base, **doc}
    with pytest.raises(DocumentInvalid, match=why):
        parse_boot_events(json.dumps(bad), "f")
