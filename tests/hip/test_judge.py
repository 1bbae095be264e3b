"""The pure judgement of a pair's probe (no processes): PairProbe -> findings."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from rocmseat.findings import Severity
from rocmseat.hip.judge import ASYMMETRY_RATIO, hip_version, judge_pair, short
from rocmseat.hip.probe import Direction, PairProbe, StageFailure

A, B = "0000:05:00.0", "0000:09:00.0"


def probe(**overrides: object) -> PairProbe:
    base: dict[str, object] = {
        "a": A, "b": B, "wall_s": 1.234, "library": "/opt/rocm/lib/libamdhip64.so",
        "runtime_version": 60443483, "devices": (A, B),
        "peer": {"a_to_b": True, "b_to_a": True}, "enable_peer": {"a_to_b": None, "b_to_a": None},
        "directions": (
            Direction(A, B, None, 27.2, 26.9, 24.1, 32 << 20),
            Direction(B, A, None, 20.5, 20.3, 23.9, 32 << 20),
        ),
    }
    base.update(overrides)
    return PairProbe(**base)  # type: ignore[arg-type]


def test_healthy_pair_with_x8_slot_golden(golden: Callable[[str, str], None]) -> None:
    findings = judge_pair(probe())
    golden("hip-judge-x8-pair.json",
           json.dumps([f.to_json() for f in findings], indent=2, sort_keys=True) + "\n")
    assert [f.severity for f in findings] == [Severity.OK, Severity.OK, Severity.OK,
                                              Severity.WARN]


def test_cross_socket_failure_golden(golden: Callable[[str, str], None]) -> None:
    f17 = StageFailure("opener", "open", "hipErrorInvalidDevicePointer (17)",
                       call="hipIpcOpenMemHandle", error_name="hipErrorInvalidDevicePointer",
                       error_code=17)
    findings = judge_pair(probe(
        b="0000:86:00.0", devices=(A, "0000:86:00.0"),
        directions=(Direction(A, "0000:86:00.0", f17, 27.2, 27.2),
                    Direction("0000:86:00.0", A, f17, 27.2, 27.2))))
    golden("hip-judge-cross-socket.json",
           json.dumps([f.to_json() for f in findings], indent=2, sort_keys=True) + "\n")
    ipc = findings[1]
    assert ipc.message == ("05:00.0 -> 86:00.0: failed at stage open: "
                           "hipErrorInvalidDevicePointer (17) in hipIpcOpenMemHandle; "
                           "probe 1.23 s (both directions failed)")


@pytest.mark.parametrize(
    ("slow", "fast", "severity"),
    [
        (20.5, 27.2, Severity.WARN),  # the X99 bench's x8 slot
        (27.0, 27.2, Severity.OK),  # noise
        (ASYMMETRY_RATIO * 27.2 + 0.01, 27.2, Severity.OK),
        (ASYMMETRY_RATIO * 27.2 - 0.01, 27.2, Severity.WARN),
    ],
)
def test_asymmetry_threshold(slow: float, fast: float, severity: Severity) -> None:
    findings = judge_pair(probe(directions=(
        Direction(A, B, None, fast, fast, 24.0, 1), Direction(B, A, None, slow, fast, 24.0, 1))))
    assert findings[-1].check_id == "hip.bandwidth"
    assert findings[-1].severity is severity


def test_d2h_asymmetry_alone_warns() -> None:
    findings = judge_pair(probe(directions=(
        Direction(A, B, None, 27.2, 27.2, 24.0, 1), Direction(B, A, None, 27.2, 13.0, 24.0, 1))))
    assert findings[-1].severity is Severity.WARN
    assert "D2H 09:00.0 13.0 GB/s against 05:00.0 27.2 GB/s" in findings[-1].message


def test_missing_host_figure_is_unknown_not_ok() -> None:
    hang = StageFailure("owner", "h2d", "no progress within 30 s", hung=True)
    findings = judge_pair(probe(directions=(Direction(A, B, hang),)))
    assert findings[1].severity is Severity.FAIL
    assert findings[1].message.endswith("(reverse direction not run)")
    assert findings[-1].severity is Severity.UNKNOWN


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"no_runtime": "no HIP runtime (libamdhip64) could be loaded: x"},
         "no HIP runtime (libamdhip64) could be loaded: x"),
        ({"runtime_failure": StageFailure("info", "device_count", "hipErrorNoDevice (100)",
                                          call="hipGetDeviceCount",
                                          error_name="hipErrorNoDevice", error_code=100)},
         "HIP could not be used (/opt/rocm/lib/libamdhip64.so): hipGetDeviceCount: "
         "hipErrorNoDevice (100)"),
        ({"not_visible": f"{B} (HIP sees: {A})"}, f"HIP does not see {B} (HIP sees: {A})"),
    ],
)
def test_runtime_problems_are_a_single_unknown(overrides: dict[str, object], message: str) -> None:
    findings = judge_pair(probe(directions=(), **overrides))
    assert [(f.check_id, f.severity, f.message) for f in findings] == [
        ("hip.runtime", Severity.UNKNOWN, message)]
    assert findings[0].data["wall_s"] == 1.23


def test_enable_peer_refused_is_a_warning() -> None:
    findings = judge_pair(probe(enable_peer={"a_to_b": "hipErrorInvalidDevice (101)"}))
    p2p = next(f for f in findings if f.check_id == "hip.p2p")
    assert p2p.severity is Severity.WARN
    assert "a_to_b: hipErrorInvalidDevice (101)" in p2p.message


@pytest.mark.parametrize(
    ("encoded", "text"),
    [(50221153, "5.2.21153"), (60443483, "6.4.43483"), (None, "unknown version")],
)
def test_hip_version(encoded: int | None, text: str) -> None:
    assert hip_version(encoded) == text


def test_short_pci() -> None:
    assert short("0000:86:00.0") == "86:00.0"
    assert short("weird") == "weird"


@pytest.mark.parametrize(
    ("timings_s", "expected"),
    [([0.5, 0.25, 1.0], 4.0), ([0.0, 0.5, 0.0], 2.0), ([0.0, 0.0, 0.0], None)],
)
def test_best_gbps_never_turns_an_unusable_timing_into_zero(
    timings_s: list[float], expected: float | None
) -> None:
    from rocmseat.hip.child import best_gbps

    times = iter(timings_s)
    assert best_gbps(lambda: next(times), 10**9) == expected
