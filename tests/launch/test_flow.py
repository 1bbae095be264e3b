"""The preflight gate of `launch` on fixture trees (launch/gate.py), its split with the unit's
ExecStartPre= (`--preflight-only`), and the order key -> gate -> cache prepare."""

from __future__ import annotations

import json
import sys

import pytest

import rocmseat.preflight.run
from rocmseat.errors import RocmseatError
from rocmseat.findings import Finding, Severity
from rocmseat.launch import flow, gate
from tests.conftest import FIXTURES, REPO
from tests.launch.test_plan import R9700, seat_from

SYSFS = FIXTURES / "sysfs"
PROFILE = REPO / "checks" / "x99-r9700.toml"


def seat(tmp_path, refuse=True, hip=False, python=None):
    text = R9700.replace('profile = "../checks/x99-r9700.toml"', f'profile = "{PROFILE}"')
    if not hip:
        text = text.replace("hip = true", "hip = false")
    if not refuse:
        text = text.replace("refuse_on_fail = true", "refuse_on_fail = false")
    if python is not None:
        models = tmp_path / "models"
        for name in ("target", "drafter"):
            (models / name).mkdir(parents=True, exist_ok=True)
            (models / name / "config.json").write_text('{"architectures": ["X"]}')
        text = (text.replace('"/opt/vllm/bin/python"', f'"{python}"')
                .replace('"/models/qwen3.8-27b-mxfp4"', f'"{models / "target"}"')
                .replace('"/models/qwen3.8-27b-dflash-fp8"', f'"{models / "drafter"}"')
                .replace('"/var/cache/rocmseat/r9700-mxfp4-dflash"', f'"{tmp_path / "cache"}"')
                .replace('command = ["vllm", "serve"]', f'command = ["{sys.executable}"]'))
    return seat_from(tmp_path, text)


def plan_of(s, host, replica):
    return flow.pick(flow.place(s, SYSFS / host, numactl=None).plans, replica)


def gate_of(s, host, replica, tmp_path, said, environ=None):
    return gate.launch_gate(s, plan_of(s, host, replica), SYSFS / host, tmp_path / "state",
                            environ=environ or {}, say=said.append)


def test_healthy_pair_is_allowed(tmp_path):
    said: list[str] = []
    findings = gate_of(seat(tmp_path), "x99-r9700", "r0", tmp_path, said)
    assert findings and not [f for f in findings if f.severity is Severity.FAIL]
    assert {f.family for f in findings} >= {"pcie", "numa", "aer"}


def test_degraded_pair_refuses_the_start_naming_the_finding(tmp_path):
    said: list[str] = []
    with pytest.raises(RocmseatError) as info:
        gate_of(seat(tmp_path), "x99-r9700-degraded", "r1", tmp_path, said)
    assert info.value.message.startswith(
        "replica r1: start refused by preflight: pcie.link.degraded 0000:89:00.0: ")
    assert any(line.startswith("preflight fail: pcie.link.degraded") for line in said)
    # the other replica's pair is healthy on the same node
    gate_of(seat(tmp_path), "x99-r9700-degraded", "r0", tmp_path, said)


def test_seat_may_start_anyway(tmp_path):
    said: list[str] = []
    findings = gate_of(seat(tmp_path, refuse=False), "x99-r9700-degraded", "r1", tmp_path, said)
    assert any(f.check_id == "pcie.link.degraded" and f.severity is Severity.FAIL
               for f in findings)


@pytest.mark.parametrize(
    ("severities", "refuse_on_fail", "refused"),
    [
        (["ok", "warn", "unknown"], True, False),  # unknown is said, it does not refuse
        (["ok", "fail"], True, True),
        (["fail", "fail", "unknown"], True, True),
        (["fail"], False, False),
        ([], True, False),
    ],
)
def test_refusal_rule(severities, refuse_on_fail, refused):
    findings = [Finding(f"x.{i}", Severity(s), "0000:05:00.0", s) for i, s in enumerate(severities)]
    error = gate.refusal(findings, "r0", refuse_on_fail=refuse_on_fail)
    assert (error is not None) == refused
    if error is not None and severities.count("fail") == 2:
        assert error.message.endswith("(and 1 more failing)")


def test_preflight_only_then_launch_gate_runs_each_check_once(tmp_path, monkeypatch):
    """ExecStartPre= runs the sysfs families; launch (same $INVOCATION_ID) reuses them and
    runs only the HIP family."""
    calls: list[object] = []
    real = rocmseat.preflight.run.run_preflight

    hip_envs: list[object] = []

    def counting(root, state, **kw):  # a spy: the real preflight runs, HIP probe included
        calls.append((kw.get("families"), kw.get("hip")))
        hip_envs.append(kw.get("hip_env"))
        return real(root, state, **kw)

    monkeypatch.setattr(rocmseat.preflight.run, "run_preflight", counting)
    s = seat(tmp_path, hip=True)
    plan = plan_of(s, "x99-r9700", "r0")
    env = {"INVOCATION_ID": "5f0c" * 8}
    said: list[str] = []
    pre = gate.sysfs_gate(s, plan, SYSFS / "x99-r9700", tmp_path / "state", environ=env,
                          say=said.append)
    saved = json.loads((tmp_path / "state" / "seats" / s.name / "r0" /
                        "preflight-sysfs.json").read_text())
    assert saved["invocation_id"] == env["INVOCATION_ID"] and len(saved["findings"]) == len(pre)
    findings = gate.launch_gate(s, plan, SYSFS / "x99-r9700", tmp_path / "state", environ=env,
                                say=said.append)
    # sysfs once (ExecStartPre), HIP once (launch), the probe under the replica's environment
    assert calls == [(None, False), ({"hip"}, True)]
    assert hip_envs[0] is None
    assert hip_envs[1] == dict(plan.env)
    assert hip_envs[1]["HIP_VISIBLE_DEVICES"] == "0,1"
    assert hip_envs[1]["NCCL_PROTO"] == "Simple"
    # no GPU on this machine: the real probe says unknown, which is said and does not refuse
    assert findings[:len(pre)] == pre
    assert [f.family for f in findings[len(pre):]] == ["hip"]
    assert findings[-1].severity is Severity.UNKNOWN
    assert any("ran in ExecStartPre= of this start" in line for line in said)
    # another start (a new invocation id) or a manual run: launch runs every family itself
    calls.clear()
    gate.launch_gate(s, plan, SYSFS / "x99-r9700", tmp_path / "state",
                     environ={"INVOCATION_ID": "other"}, say=said.append)
    gate.launch_gate(s, plan, SYSFS / "x99-r9700", tmp_path / "state", environ={},
                     say=said.append)
    assert calls == [(None, True), (None, True)]


def test_preflight_only_refuses_like_launch(tmp_path):
    s = seat(tmp_path)
    plan = plan_of(s, "x99-r9700-degraded", "r1")
    with pytest.raises(RocmseatError, match=r"start refused by preflight: pcie\.link\.degraded"):
        gate.sysfs_gate(s, plan, SYSFS / "x99-r9700-degraded", tmp_path / "state",
                        environ={"INVOCATION_ID": "x"}, say=lambda _: None)
    # a refused ExecStartPre leaves nothing for launch to reuse
    assert not (tmp_path / "state" / "seats" / s.name / "r1" / "preflight-sysfs.json").exists()


def test_malformed_saved_result_is_said_and_rerun(tmp_path):
    s = seat(tmp_path)
    plan = plan_of(s, "x99-r9700", "r0")
    path = tmp_path / "state" / "seats" / s.name / "r0" / "preflight-sysfs.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": "rocmseat.preflight-sysfs/v1", "invocation_id": "x", '
                    '"pair": ["0000:05:00.0", "0000:09:00.0"], "findings": [{"nope": 1}]}')
    said: list[str] = []
    findings = gate.launch_gate(s, plan, SYSFS / "x99-r9700", tmp_path / "state",
                                environ={"INVOCATION_ID": "x"}, say=said.append)
    assert findings and any("malformed finding" in line for line in said)


def test_refused_start_leaves_the_cache_untouched(tmp_path, fake_engine_python):
    """Order: key -> preflight gate -> cache prepare. A start the gate refuses must not have
    moved the old cache aside (it would cost the next good start a cold compile)."""
    s = seat(tmp_path, python=fake_engine_python)
    old = tmp_path / "cache" / "r1"
    old.mkdir(parents=True)
    (old / "rocmseat-manifest.json").write_text('{"key": "an-older-key"}')
    (old / "graph.bin").write_text("compiled")
    before = sorted(p.relative_to(tmp_path / "cache") for p in (tmp_path / "cache").rglob("*"))
    with pytest.raises(RocmseatError, match="start refused by preflight"):
        flow.launch_replica(s, "r1", sysfs_root=SYSFS / "x99-r9700-degraded",
                            state_dir=tmp_path / "state", echo=lambda _: None,
                            say=lambda _: None, environ={})
    after = sorted(p.relative_to(tmp_path / "cache") for p in (tmp_path / "cache").rglob("*"))
    assert after == before and (old / "graph.bin").read_text() == "compiled"
    # the refusal is the replica's latest start in its report, not the last good one
    report = json.loads((tmp_path / "state" / "seats" / s.name / "r1" / "startup.json")
                        .read_text())
    assert report["outcome"]["refused"] is True and report["outcome"]["exit_code"] == 1
    assert report["outcome"]["reason"].startswith("replica r1: start refused by preflight: ")
    assert "pcie.link.degraded" in {f["check_id"] for f in report["findings"]}
    assert report["cache"]["moved_aside"] is None and len(report["config_key"]["digest"]) == 64
