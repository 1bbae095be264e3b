"""The preflight gate of `launch` on fixture trees (the pair's own checks, HIP probe off)."""

from __future__ import annotations

import pytest

from rocmseat.errors import RocmseatError
from rocmseat.findings import Severity
from rocmseat.launch import flow
from tests.conftest import FIXTURES, REPO
from tests.launch.test_plan import R9700, seat_from

SYSFS = FIXTURES / "sysfs"


def seat(tmp_path, refuse=True):
    text = R9700.replace("hip = true", "hip = false").replace(
        'profile = "../checks/x99-r9700.toml"', f'profile = "{REPO / "checks" / "x99-r9700.toml"}"')
    if not refuse:
        text = text.replace("refuse_on_fail = true", "refuse_on_fail = false")
    return seat_from(tmp_path, text)


def gate(s, host, replica, tmp_path, said):
    placement = flow.place(s, SYSFS / host, numactl=None)
    plan = flow.pick(placement.plans, replica)
    return flow.preflight_gate(s, plan, SYSFS / host, tmp_path / "state", said.append)


def test_healthy_pair_is_allowed(tmp_path):
    said: list[str] = []
    findings = gate(seat(tmp_path), "x99-r9700", "r0", tmp_path, said)
    assert findings and not [f for f in findings if f.severity is Severity.FAIL]


def test_degraded_pair_refuses_the_start_naming_the_finding(tmp_path):
    said: list[str] = []
    with pytest.raises(RocmseatError) as info:
        gate(seat(tmp_path), "x99-r9700-degraded", "r1", tmp_path, said)
    assert info.value.message.startswith(
        "replica r1: start refused by preflight: pcie.link.degraded 0000:89:00.0: ")
    assert any(line.startswith("preflight fail: pcie.link.degraded") for line in said)
    # the other replica's pair is healthy on the same node
    gate(seat(tmp_path), "x99-r9700-degraded", "r0", tmp_path, said)


def test_seat_may_start_anyway(tmp_path):
    said: list[str] = []
    findings = gate(seat(tmp_path, refuse=False), "x99-r9700-degraded", "r1", tmp_path, said)
    assert any(f.check_id == "pcie.link.degraded" and f.severity is Severity.FAIL
               for f in findings)
