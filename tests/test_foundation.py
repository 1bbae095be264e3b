"""The foundation: findings -> exit codes, the sysfs attribute reader, atomic writes, locks,
the subprocess runner."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from pathlib import Path

import pytest

from rocmseat import exitcodes
from rocmseat.atomic import LockTimeout, atomic_write_json, atomic_write_text, exclusive_lock
from rocmseat.findings import NODE, Finding, Severity, Subject, exit_code_for, worst
from rocmseat.runner import run
from rocmseat.sysfs.fs import Unreadable, Unsupported, read_attr


def f(sev: Severity) -> Finding:
    return Finding("x.y", sev, "0000:05:00.0", "m")


@pytest.mark.parametrize(
    ("severities", "strict", "code"),
    [
        ([], False, exitcodes.OK),
        ([Severity.OK, Severity.WARN], False, exitcodes.OK),
        ([Severity.OK, Severity.WARN], True, exitcodes.PROBLEM),
        ([Severity.UNKNOWN, Severity.WARN], False, exitcodes.CANNOT_CHECK),
        ([Severity.UNKNOWN, Severity.FAIL], False, exitcodes.PROBLEM),
        ([Severity.FAIL], False, exitcodes.PROBLEM),
    ],
)
def test_exit_code_for(severities, strict, code):
    assert exit_code_for([f(s) for s in severities], strict=strict) == code


def test_worst_orders_fail_over_unknown():
    assert worst([f(Severity.UNKNOWN), f(Severity.FAIL), f(Severity.OK)]) is Severity.FAIL
    assert worst([]) is Severity.OK


def test_finding_json_is_plain():
    finding = Finding("pcie.aer", Severity.FAIL, "0000:80:03.0", "6655 BadTLP", "reseat", {"n": 1})
    assert finding.to_json()["severity"] == "fail"
    assert finding.family == "pcie"


def test_read_attr_absent_text_and_directory(tmp_path: Path):
    (tmp_path / "speed").write_text("8.0 GT/s PCIe\n")
    assert read_attr(tmp_path / "speed") == "8.0 GT/s PCIe\n"
    assert read_attr(tmp_path / "missing") is None
    assert read_attr(tmp_path / "speed" / "below-a-file") is None
    assert isinstance(read_attr(tmp_path), Unreadable)  # EISDIR is a device error, not a value


def test_read_attr_unsupported_from_kernel_errno():
    # /proc/self/mem at offset 0 is unmapped: the kernel answers EIO, which we report as
    # Unreadable; an EINVAL/ENODATA answer would be Unsupported. Both carry the path.
    value = read_attr(Path("/proc/self/mem"))
    assert isinstance(value, Unreadable | Unsupported)
    assert value.path == "/proc/self/mem"


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path):
    target = tmp_path / "state" / "aer.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_text(target, "new\n")
    assert target.read_text() == "new\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["aer.json"]


def _hold_lock(path: str, ready: multiprocessing.synchronize.Event, seconds: float) -> None:
    with exclusive_lock(Path(path)):
        ready.set()
        time.sleep(seconds)


def test_exclusive_lock_times_out_while_another_process_holds_it(tmp_path: Path):
    lock = tmp_path / "cache.lock"
    ready = multiprocessing.Event()
    holder = multiprocessing.Process(target=_hold_lock, args=(str(lock), ready, 3.0))
    holder.start()
    try:
        assert ready.wait(10)
        with pytest.raises(LockTimeout, match="still locked"), exclusive_lock(lock, timeout_s=0.2):
            pass
    finally:
        holder.join(10)
    with exclusive_lock(lock, timeout_s=5):
        pass


def test_run_captures_output_and_code():
    done = run([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"])
    assert (done.returncode, done.stdout, done.ok) == (3, "out\n", False)


def test_run_missing_program_is_127():
    done = run(["/nonexistent/program-xyz"])
    assert done.returncode == 127
    assert "command not found" in done.stderr


def test_run_timeout_kills_the_whole_group(tmp_path: Path):
    pidfile = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    done = run([sys.executable, "-c", code], timeout_s=2)
    assert done.timed_out
    grandchild = int(pidfile.read_text())
    for _ in range(50):
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"grandchild {grandchild} survived the timeout")


def test_lock_never_follows_a_planted_symlink(tmp_path):
    """A link planted at the lock's name would make us create/lock someone else's file."""
    import pytest as _pytest

    from rocmseat.atomic import exclusive_lock
    from rocmseat.errors import ReadError

    target = tmp_path / "their-file"
    target.write_text("theirs")
    lock = tmp_path / ".r0.lock"
    lock.symlink_to(target)
    with _pytest.raises(ReadError, match="is a symlink"), exclusive_lock(lock, timeout_s=1):
        pass
    assert target.read_text() == "theirs"
    dangling = tmp_path / ".r1.lock"
    dangling.symlink_to(tmp_path / "would-be-created")
    with _pytest.raises(ReadError), exclusive_lock(dangling, timeout_s=1):
        pass
    assert not (tmp_path / "would-be-created").exists()


def test_subject_builds_the_finding_it_names():
    """findings.Subject: the subject once, the severity by method; data absent is an empty map."""
    gpu = Subject("0000:03:00.0")
    assert gpu.fail("aer.fatal", "m", "h", {"delta": 1}) == Finding(
        "aer.fatal", Severity.FAIL, "0000:03:00.0", "m", "h", {"delta": 1})
    assert gpu.ok("pcie.link.ok", "m") == Finding("pcie.link.ok", Severity.OK, "0000:03:00.0", "m")
    assert [gpu.warn("x.y", "m").severity, gpu.unknown("x.y", "m").severity] == [
        Severity.WARN, Severity.UNKNOWN]
    assert gpu.finding("x.y", Severity.FAIL, "m").data == {}
    assert NODE.warn("aer.window", "m").subject == "node"
