"""Tier 3: hip_findings end to end against the fake libamdhip64.so (child processes, real IPC
through POSIX shared memory, injected faults)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rocmseat.findings import Finding, Severity
from rocmseat.hip import check
from tests.conftest import REPO
from tests.hip.conftest import PROBE_SIZE, A, B, C, D

pytestmark = pytest.mark.hip

# Stage timeout of the hang tests: generous, because the first "stage" is a fresh Python
# interpreter starting on a shared 2-core machine; only the hung stage should ever reach it.
HANG_TIMEOUT_S = 5.0


def hip_findings(pairs: list[tuple[str, str]], **kwargs: Any) -> list[Finding]:
    """rocmseat.hip.check.hip_findings moving PROBE_SIZE per direction: the fake copies and
    verifies real bytes, and what these tests judge does not depend on how many."""
    return check.hip_findings(pairs, **{"size_bytes": PROBE_SIZE, **kwargs})


def by_id(findings: list[Finding], subject: str) -> dict[str, Finding]:
    return {f.check_id: f for f in findings if f.subject == subject}


def test_x99_bench_socket_local_pairs_pass_cross_socket_fails_with_17(
    fake_hip: Path, x99: dict[str, str]
) -> None:
    findings = hip_findings([(A, B), (C, D), (A, C)], env=x99, library=fake_hip)

    for pair in (f"{A}+{B}", f"{C}+{D}"):
        got = by_id(findings, pair)
        assert got["hip.runtime"].severity is Severity.OK
        assert got["hip.ipc"].severity is Severity.OK, got["hip.ipc"].message
        assert "verified both ways" in got["hip.ipc"].message
        assert got["hip.ipc"].data["verified_bytes"] == PROBE_SIZE
        assert got["hip.p2p"].severity is Severity.OK

    cross = by_id(findings, f"{A}+{C}")
    ipc = cross["hip.ipc"]
    assert ipc.severity is Severity.FAIL
    assert "failed at stage open: hipErrorInvalidDevicePointer (17)" in ipc.message
    assert ipc.data["stage"] == "open"
    assert ipc.data["error_code"] == 17
    assert ipc.data["error_name"] == "hipErrorInvalidDevicePointer"
    assert ipc.data["call"] == "hipIpcOpenMemHandle"
    assert ipc.data["failed_directions"] == [f"{A}->{C}", f"{C}->{A}"]
    assert "one socket" in ipc.hint

    # every finding names PCI addresses and carries its pair's probe wall time, shown for ipc
    assert {f.subject for f in findings} == {f"{A}+{B}", f"{C}+{D}", f"{A}+{C}"}
    for f in findings:
        assert f.data["wall_s"] > 0
        assert f.data["a"] in f.subject and f.data["b"] in f.subject
    for f in findings:
        if f.check_id == "hip.ipc":
            assert f"probe {f.data['wall_s']:.2f} s" in f.message


def test_x8_slot_shows_as_asymmetric_host_bandwidth(fake_hip: Path, x99: dict[str, str]) -> None:
    findings = hip_findings([(A, B), (C, D)], env=x99, library=fake_hip)
    slot_pair = by_id(findings, f"{A}+{B}")["hip.bandwidth"]
    assert slot_pair.severity is Severity.WARN
    assert "H2D 09:00.0 20.5 GB/s against 05:00.0 27.2 GB/s" in slot_pair.message
    assert slot_pair.data["slow"] == B
    assert slot_pair.data["h2d_gbps"][B] == pytest.approx(20.5, rel=1e-3)
    assert slot_pair.data["d2h_gbps"][A] == pytest.approx(27.2, rel=1e-3)
    assert slot_pair.data["d2d_gbps"][f"{A}->{B}"] == pytest.approx(24.0, rel=1e-3)
    other = by_id(findings, f"{C}+{D}")["hip.bandwidth"]
    assert other.severity is Severity.OK
    assert "86:00.0 H2D 27.2" in other.message


def test_no_peer_access_warns_that_rccl_goes_through_the_host(
    fake_hip: Path, x99: dict[str, str]
) -> None:
    env = {**x99, "FAKEHIP_NO_PEER": f"{A}>{B},{B}>{A}"}
    p2p = by_id(hip_findings([(A, B)], env=env, library=fake_hip), f"{A}+{B}")["hip.p2p"]
    assert p2p.severity is Severity.WARN
    assert "05:00.0->09:00.0 = 0, 09:00.0->05:00.0 = 0" in p2p.message
    assert "RCCL routes through the host" in p2p.message


def test_one_way_peer_access_is_a_warning_too(fake_hip: Path, x99: dict[str, str]) -> None:
    env = {**x99, "FAKEHIP_NO_PEER": f"{B}>{A}"}
    p2p = by_id(hip_findings([(A, B)], env=env, library=fake_hip), f"{A}+{B}")["hip.p2p"]
    assert p2p.severity is Severity.WARN
    assert p2p.data == {**p2p.data, "a_to_b": True, "b_to_a": False}


@pytest.mark.parametrize(
    ("hang", "stage", "role"),
    [
        ("hipIpcOpenMemHandle", "open", "opener"),
        ("hipIpcGetMemHandle", "get_handle", "owner"),
        (f"hipMemcpy@{B}", "copy", "opener"),  # the owner on 05 copies fine; 09 hangs
    ],
)
def test_hung_stage_is_a_failure_naming_the_stage(
    fake_hip: Path, x99: dict[str, str], hang: str, stage: str, role: str
) -> None:
    env = {**x99, "FAKEHIP_HANG": hang}
    got = by_id(hip_findings([(A, B)], env=env, stage_timeout_s=HANG_TIMEOUT_S,
                             library=fake_hip), f"{A}+{B}")
    ipc = got["hip.ipc"]
    assert ipc.severity is Severity.FAIL
    assert f"stage {stage} hung: no progress within {HANG_TIMEOUT_S:g} s" in ipc.message
    assert (ipc.data["stage"], ipc.data["role"], ipc.data["hung"]) == (stage, role, True)
    assert "reverse direction not run" in ipc.message


def test_hang_before_any_pair_work_is_unknown_runtime(fake_hip: Path, x99: dict[str, str]) -> None:
    env = {**x99, "FAKEHIP_HANG": "hipGetDeviceCount"}
    findings = hip_findings([(A, B)], env=env, stage_timeout_s=HANG_TIMEOUT_S, library=fake_hip)
    assert [(f.check_id, f.severity) for f in findings] == [("hip.runtime", Severity.UNKNOWN)]
    assert "stage device_count hung" in findings[0].message


def test_corrupted_mapping_fails_verify_with_byte_count(
    fake_hip: Path, x99: dict[str, str]
) -> None:
    env = {**x99, "FAKEHIP_IPC_CORRUPT": "1"}
    ipc = by_id(hip_findings([(A, B)], env=env, library=fake_hip), f"{A}+{B}")["hip.ipc"]
    assert ipc.severity is Severity.FAIL
    # the fake flips the byte at half the buffer (fake_amdhip64.c, FAKEHIP_IPC_CORRUPT)
    assert (f"failed at stage verify: 1 of {PROBE_SIZE} bytes differ, first at offset "
            f"{PROBE_SIZE // 2}") in ipc.message


def test_replica_environment_reaches_the_children(fake_hip: Path, x99: dict[str, str]) -> None:
    # HIP_VISIBLE_DEVICES of the replica hides socket 1: the probe must see what the replica sees.
    env = {**x99, "HIP_VISIBLE_DEVICES": "0,1"}
    findings = hip_findings([(C, D)], env=env, library=fake_hip)
    assert [(f.check_id, f.severity) for f in findings] == [("hip.runtime", Severity.UNKNOWN)]
    assert findings[0].message == (
        f"HIP does not see {C} (HIP sees: {A}, {B})")
    # and reordered indices still map back to the right PCI addresses
    env = {**x99, "HIP_VISIBLE_DEVICES": "3,2"}
    ok = by_id(hip_findings([(C, D)], env=env, library=fake_hip), f"{C}+{D}")
    assert ok["hip.runtime"].data["devices"] == [D, C]
    assert ok["hip.ipc"].severity is Severity.OK


def test_no_device_is_unknown_with_hips_error_name(fake_hip: Path, shm_prefix: str) -> None:
    findings = hip_findings([(A, B)], env={"FAKEHIP_DEVICES": ""}, library=fake_hip)
    assert [(f.check_id, f.severity) for f in findings] == [("hip.runtime", Severity.UNKNOWN)]
    assert findings[0].message == \
        f"HIP could not be used ({fake_hip}): hipGetDeviceCount: hipErrorNoDevice (100)"
    assert findings[0].data["error_code"] == 100


def test_no_runtime_is_unknown_naming_what_was_tried(tmp_path: Path) -> None:
    missing = tmp_path / "libamdhip64.so"
    findings = hip_findings([(A, B)], library=missing)
    assert [(f.check_id, f.severity) for f in findings] == [("hip.runtime", Severity.UNKNOWN)]
    assert f"{missing}: no such file" in findings[0].message


def test_not_a_hip_library_is_unknown(tmp_path: Path) -> None:
    libc = Path("/lib/x86_64-linux-gnu/libc.so.6")
    if not libc.exists():
        pytest.skip("no glibc at the Debian path")
    findings = hip_findings([(A, B)], library=libc)
    assert findings[0].severity is Severity.UNKNOWN
    assert "has no hipRuntimeGetVersion" in findings[0].message


@pytest.mark.parametrize(
    "content", [b"not an ELF file\n" * 64, b"\x7fELF\x02\x01\x01" + bytes(57)])  # text, truncated
def test_library_that_is_not_a_shared_object_is_one_unknown(
    content: bytes, tmp_path: Path
) -> None:
    bogus = tmp_path / "libamdhip64.so"
    bogus.write_bytes(content)
    findings = hip_findings([(A, B)], library=bogus)
    assert [(f.check_id, f.severity) for f in findings] == [("hip.runtime", Severity.UNKNOWN)]
    assert findings[0].message.startswith(
        f"no HIP runtime (libamdhip64) could be loaded: {bogus}: ")
    assert "Traceback" not in findings[0].message


def test_library_from_env_var_is_honoured_first(fake_hip: Path, x99: dict[str, str]) -> None:
    env = {**x99, "ROCMSEAT_HIP_LIBRARY": str(fake_hip), "ROCM_PATH": "/nonexistent"}
    got = by_id(hip_findings([(A, B)], env=env), f"{A}+{B}")
    assert got["hip.runtime"].data["library"] == str(fake_hip)
    assert got["hip.ipc"].severity is Severity.OK


def test_pair_naming_an_address_hip_does_not_list_is_unknown(
    fake_hip: Path, x99: dict[str, str]
) -> None:
    # 0a:00.0 is no GPU of the bench at all (not merely hidden by HIP_VISIBLE_DEVICES)
    findings = hip_findings([(A, "0000:0a:00.0")], env=x99, library=fake_hip)
    assert [(f.check_id, f.severity) for f in findings] == [("hip.runtime", Severity.UNKNOWN)]
    assert findings[0].message == f"HIP does not see 0000:0a:00.0 (HIP sees: {A}, {B}, {C}, {D})"


def test_short_and_upper_case_addresses_map_to_hips_bus_ids(
    fake_hip: Path, x99: dict[str, str]
) -> None:
    # the fake reports upper case, as a runtime may; both sides are normalised
    env = {**x99, "FAKEHIP_DEVICES": ",".join(p.upper() for p in (A, B, C, D))}
    got = by_id(hip_findings([("05:00.0", "09:00.0")], env=env, library=fake_hip), f"{A}+{B}")
    assert got["hip.runtime"].data["devices"] == [A, B, C, D]
    assert got["hip.ipc"].severity is Severity.OK


@pytest.mark.parametrize("bad", ["05:00", "gpu0", ""])
def test_malformed_address_is_unknown_without_probing(bad: str, tmp_path: Path) -> None:
    # no library exists at this path: had a child been spawned it would report that instead
    findings = hip_findings([(bad, B)], library=tmp_path / "libamdhip64.so")
    assert [(f.check_id, f.severity) for f in findings] == [("hip.runtime", Severity.UNKNOWN)]
    assert findings[0].message.startswith(f"not a PCI address: {bad!r}")
    assert findings[0].data == {}


def test_runtime_printing_to_stdout_does_not_break_the_protocol(
    fake_hip: Path, x99: dict[str, str]
) -> None:
    env = {**x99, "FAKEHIP_STDOUT_NOISE": "1"}
    got = by_id(hip_findings([(A, B)], env=env, library=fake_hip), f"{A}+{B}")
    assert got["hip.ipc"].severity is Severity.OK, got["hip.ipc"].message
    assert got["hip.bandwidth"].data["h2d_gbps"][B] == pytest.approx(20.5, rel=1e-3)


def test_the_calling_process_never_loads_hip(fake_hip: Path, x99: dict[str, str]) -> None:
    # In a fresh interpreter: this pytest process has loaded the fake itself (test_fake_api).
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from rocmseat.hip.check import hip_findings\n"
        "f = hip_findings([(sys.argv[1], sys.argv[2])], env=json.loads(sys.argv[3]),"
        " library=Path(sys.argv[4]), size_bytes=int(sys.argv[5]))\n"
        "maps = Path('/proc/self/maps').read_text()\n"
        "print(json.dumps([[x.check_id, x.severity.value] for x in f]))\n"
        "print('libamdhip64' in maps)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, A, B, json.dumps(x99), str(fake_hip),
         str(PROBE_SIZE)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        check=False, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    checks, loaded = proc.stdout.splitlines()
    assert ["hip.ipc", "ok"] in json.loads(checks)  # HIP really ran, in the children
    assert loaded == "False"
