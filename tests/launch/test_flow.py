"""The preflight gate of `launch` on fixture trees (launch/gate.py), its split with the unit's
ExecStartPre= (`--preflight-only`), and the order key -> gate -> cache prepare."""

from __future__ import annotations

import json
import os
import sys

import pytest

import rocmseat.preflight.run
from rocmseat.errors import RocmseatError
from rocmseat.findings import Finding, Severity
from rocmseat.launch import flow, gate
from rocmseat.launch.plan import engine_env, plan_replica
from rocmseat.placement.recorded import write_recorded
from rocmseat.placement.resolve import pick
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
                .replace('command = ["/opt/vllm/bin/vllm", "serve"]',
                         f'command = ["{sys.executable}"]'))
    return seat_from(tmp_path, text)


def plan_of(s, host, replica, tmp_path):
    record = pick(flow.place_for_launch(s, SYSFS / host, state_dir=tmp_path / "state").records,
                  replica)
    return plan_replica(s, record, numactl=None)


def gate_of(s, host, replica, tmp_path, said, environ=None):
    return gate.launch_gate(s, plan_of(s, host, replica, tmp_path), SYSFS / host,
                            tmp_path / "state", environ=environ or {}, say=said.append)


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
    real = rocmseat.preflight.run.preflight_report

    hip_envs: list[object] = []

    def counting(root, state, options):  # a spy: the real preflight runs, HIP probe included
        calls.append((options.families, options.hip))
        hip_envs.append(options.hip_env)
        return real(root, state, options)

    monkeypatch.setattr(rocmseat.preflight.run, "preflight_report", counting)
    s = seat(tmp_path, hip=True)
    plan = plan_of(s, "x99-r9700", "r0", tmp_path)
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
    # the probe runs in the engine's own environment: inherited + the plan's
    assert hip_envs[1] == engine_env(env, plan)
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
    plan = plan_of(s, "x99-r9700-degraded", "r1", tmp_path)
    with pytest.raises(RocmseatError, match=r"start refused by preflight: pcie\.link\.degraded"):
        gate.sysfs_gate(s, plan, SYSFS / "x99-r9700-degraded", tmp_path / "state",
                        environ={"INVOCATION_ID": "x"}, say=lambda _: None)
    # a refused ExecStartPre leaves nothing for launch to reuse
    assert not (tmp_path / "state" / "seats" / s.name / "r1" / "preflight-sysfs.json").exists()


def test_malformed_saved_result_is_said_and_rerun(tmp_path):
    s = seat(tmp_path)
    plan = plan_of(s, "x99-r9700", "r0", tmp_path)
    path = tmp_path / "state" / "seats" / s.name / "r0" / "preflight-sysfs.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"schema": "rocmseat.preflight-sysfs/v1", "invocation_id": "x", '
                    '"pair": ["0000:05:00.0", "0000:09:00.0"], "findings": [{"nope": 1}]}')
    said: list[str] = []
    findings = gate.launch_gate(s, plan, SYSFS / "x99-r9700", tmp_path / "state",
                                environ={"INVOCATION_ID": "x"}, say=said.append)
    # the one located line: the file and the key (issue 23)
    assert findings and f"{path}: key 'findings[0].nope': unknown key; running the sysfs " \
        "preflight again" in said


@pytest.mark.parametrize("kind", ["fifo", "deep", "huge", "findings_not_a_list", "dangling"])
def test_a_hostile_saved_result_is_said_and_rerun(tmp_path, kind):
    """Review of issue 10, defect 6: gate._reuse read preflight-sysfs.json with read_text: a
    FIFO there hung the start, deep nesting crashed it (exit 3). Each is one line and the
    sysfs preflight runs again."""
    from tests.launch.test_report import bounded

    s = seat(tmp_path)
    plan = plan_of(s, "x99-r9700", "r0", tmp_path)
    path = tmp_path / "state" / "seats" / s.name / "r0" / "preflight-sysfs.json"
    path.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "deep":
        path.write_text('{"schema": "rocmseat.preflight-sysfs/v1", "invocation_id": "x", '
                        '"findings": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif kind == "huge":
        path.write_text(" " * (5 << 20) + "{}")
    elif kind == "dangling":
        path.symlink_to(tmp_path / "nowhere")
    else:
        path.write_text('{"schema": "rocmseat.preflight-sysfs/v1", "invocation_id": "x", '
                        '"pair": ["0000:05:00.0", "0000:09:00.0"], "findings": {"a": 1}}')
    said: list[str] = []
    findings = bounded(lambda: gate.launch_gate(
        s, plan, SYSFS / "x99-r9700", tmp_path / "state", environ={"INVOCATION_ID": "x"},
        say=said.append), fifo=path if kind == "fifo" else None)
    assert {f.family for f in findings} >= {"pcie", "numa", "aer"}  # run again
    [line] = [x for x in said if str(path) in x]
    assert line.endswith("running the sysfs preflight again") and len(line) < 500


def test_launch_refuses_a_linked_state_dir_before_anything(tmp_path, fake_engine_python):
    """Review of issue 10, defect 7: launch wrote its reports and pruned history through a
    link planted in the replica's state dir. It refuses the link (the cache store's rule),
    before the key, the gate or the cache are touched."""
    from rocmseat.errors import ConfigError

    s = seat(tmp_path, python=fake_engine_python)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    replica_dir = tmp_path / "state" / "seats" / s.name / "r0"
    replica_dir.parent.mkdir(parents=True)
    replica_dir.symlink_to(elsewhere)
    for call in (lambda: flow.preflight_only(s, "r0", sysfs_root=SYSFS / "x99-r9700",
                                             state_dir=tmp_path / "state", say=print),
                 lambda: flow.launch_replica(s, "r0", flow.LaunchRun(
                     sysfs_root=SYSFS / "x99-r9700", state_dir=tmp_path / "state", echo=print,
                     say=print))):
        with pytest.raises(ConfigError, match=rf"^state dir {replica_dir} is a symlink to "):
            call()
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "cache").exists()


def test_refused_start_leaves_the_cache_untouched(tmp_path, fake_engine_python):
    """Order: key -> HIP numbering -> plan -> preflight gate -> placement.json -> cache
    prepare. A start the gate refuses must not have moved the old cache aside (it would cost
    the next good start a cold compile), nor rewritten the placement the replica last ran with
    (issue 16: it did, so watch and cache-audit read a placement that never ran)."""
    s = seat(tmp_path, python=fake_engine_python)
    state = tmp_path / "state"
    ran = flow.place_for_launch(s, SYSFS / "x99-r9700", state_dir=state).pick("r1")
    recorded = write_recorded(ran)
    ran_text, ran_inode = recorded.read_text(), recorded.stat().st_ino
    old = tmp_path / "cache" / "r1"
    old.mkdir(parents=True)
    (old / "rocmseat-manifest.json").write_text('{"key": "an-older-key"}')
    (old / "graph.bin").write_text("compiled")
    before = sorted(p.relative_to(tmp_path / "cache") for p in (tmp_path / "cache").rglob("*"))
    with pytest.raises(RocmseatError, match="start refused by preflight"):
        flow.launch_replica(s, "r1", flow.LaunchRun(sysfs_root=SYSFS / "x99-r9700-degraded",
                            state_dir=tmp_path / "state", echo=lambda _: None,
                            say=lambda _: None, environ={}))
    after = sorted(p.relative_to(tmp_path / "cache") for p in (tmp_path / "cache").rglob("*"))
    assert after == before and (old / "graph.bin").read_text() == "compiled"
    # the refusal is the replica's latest start in its report, not the last good one
    report = json.loads((tmp_path / "state" / "seats" / s.name / "r1" / "startup.json")
                        .read_text())
    assert report["outcome"]["refused"] is True and report["outcome"]["exit_code"] == 1
    assert report["outcome"]["reason"].startswith("replica r1: start refused by preflight: ")
    assert "pcie.link.degraded" in {f["check_id"] for f in report["findings"]}
    assert report["cache"]["moved_aside"] is None and len(report["config_key"]["digest"]) == 64
    # the placement it last ran with stays on record, untouched (the same file, the same text)
    assert recorded.stat().st_ino == ran_inode and recorded.read_text() == ran_text
    # and a replica refused on its first start has none: nothing ran
    recorded.unlink()
    with pytest.raises(RocmseatError, match="start refused by preflight"):
        flow.launch_replica(s, "r1", flow.LaunchRun(sysfs_root=SYSFS / "x99-r9700-degraded",
                            state_dir=state, echo=lambda _: None, say=lambda _: None,
                            environ={}))
    assert not recorded.exists()


def demo_seat_with_test_engine(tmp_path, python, port, extra_args):
    """The shipped CPU demo seat, run by the test engine (tests/launch/testengine.py: not vLLM)
    with the models, cache and state in tmp_path."""
    models = tmp_path / "models"
    for name in ("target", "drafter"):
        (models / name).mkdir(parents=True, exist_ok=True)
        (models / name / "config.json").write_text('{"architectures": ["X"]}')
    engine = REPO / "tests" / "launch" / "testengine.py"
    text = ((REPO / "launchers" / "demo-cpu.toml").read_text()
            .replace('command = ["/opt/rocmseat/vllm-venv/bin/python", "-m", '
                     '"vllm.entrypoints.openai.api_server"]',
                     f'command = ["{sys.executable}", "{engine}"]')
            .replace('python = "/opt/rocmseat/vllm-venv/bin/python"', f'python = "{python}"')
            .replace("/var/tmp/rocmseat-demo/models", str(models))
            .replace('"/var/tmp/rocmseat-demo/cache"', f'"{tmp_path / "cache"}"')
            .replace('"/var/tmp/rocmseat-demo/state"', f'"{tmp_path / "state"}"')
            .replace("port_base = 8100", f"port_base = {port}")
            .replace('dtype = "bfloat16"',
                     f'dtype = "bfloat16"\nextra_args = {json.dumps(extra_args)}')
            .replace('VLLM_CPU_KVCACHE_SPACE = "1"',
                     'VLLM_CPU_KVCACHE_SPACE = "1"\nHF_TOKEN = "hf_secret_9"'))
    text = text.replace("[watch]", '[env_classes]\nneutral = ["HF_TOKEN"]\n\n[watch]')
    return seat_from(tmp_path, text)


def test_a_secret_flag_never_reaches_the_log_line_or_the_state(tmp_path, fake_engine_python,
                                                               free_tcp_port):
    """Issue 11: `extra_args = ["--api-key", "sk-..."]` was printed in the "starting replica"
    line and saved in startup.json and history/*.json (0644). The engine still gets it."""
    s = demo_seat_with_test_engine(tmp_path, fake_engine_python, free_tcp_port,
                                   ["--api-key", "sk-live-123", "--exit-after-canary", "0"])
    said: list[str] = []
    echoed: list[str] = []
    result = flow.launch_replica(s, "r0", flow.LaunchRun(
        sysfs_root=None, state_dir=tmp_path / "state", echo=echoed.append, say=said.append,
        environ=dict(os.environ), probe_interval_s=0.05, stop_grace_s=2.0))
    assert result.exit_code == 0, said
    starting = [line for line in said if line.startswith("starting replica r0: ")]
    assert len(starting) == 1 and "--api-key '<redacted>'" in starting[0], said
    assert not [line for line in said if "sk-live-123" in line or "hf_secret_9" in line]
    replica_dir = tmp_path / "state" / "seats" / "demo-cpu" / "r0"
    written = [replica_dir / "startup.json", *sorted((replica_dir / "history").glob("*.json"))]
    assert len(written) == 2
    for path in written:
        assert "sk-live-123" not in path.read_text() and "hf_secret_9" not in path.read_text()
        assert path.stat().st_mode & 0o777 == 0o600
    placement = json.loads((replica_dir / "placement.json").read_text())
    assert placement["schema"] == "rocmseat.placement/v1" and placement["port"] == free_tcp_port
    assert "sk-live-123" not in (replica_dir / "placement.json").read_text()


def test_kv_shrink_under_the_same_key_does_not_say_the_key_changed(tmp_path, fake_engine_python,
                                                                   free_tcp_port):
    """Issue 10 through launch: two starts with one config key, the second with a 17.5 % smaller
    KV pool. The warning used to add "(config key changed)" (the judge never got the current
    key); launch passes it now."""
    log = tmp_path / "engine.log"
    s = demo_seat_with_test_engine(tmp_path, fake_engine_python, free_tcp_port,
                                   ["--replay", str(log), "--exit-after-canary", "0"])
    said: list[str] = []
    for tokens in ("600,000", "495,000"):
        log.write_text(f"GPU KV cache size: {tokens} tokens\n")
        result = flow.launch_replica(s, "r0", flow.LaunchRun(
            sysfs_root=None, state_dir=tmp_path / "state", echo=lambda _: None, say=said.append,
            environ=dict(os.environ), probe_interval_s=0.05, stop_grace_s=2.0))
        assert result.exit_code == 0, said
    [shrunk] = [f for f in result.findings if f.check_id == "launch.kv.shrunk"]
    assert "(config key changed)" not in shrunk.message
    assert shrunk.message.endswith("(same config key)") and shrunk.data["key_changed"] is False


def test_the_wait_for_ready_shows_progress_on_a_terminal(tmp_path, fake_engine_python,
                                                         free_tcp_port, monkeypatch):
    """Issue 19: launch's wait for READY said nothing of its own on a terminal (engine starts
    take minutes). Every sd_notify message now reaches the CLI's progress display, which says
    each status as it changes, how long it has waited, and stops at READY."""
    import time

    import rocmseat.cli.launch as cli_launch

    s = demo_seat_with_test_engine(tmp_path, fake_engine_python, free_tcp_port,
                                   ["--exit-after-canary", "0"])
    lines: list[str] = []
    monkeypatch.setattr(cli_launch, "_say", lines.append)
    progress = cli_launch._ReadyProgress(every_s=0.01)
    time.sleep(0.05)  # the ticker speaks while nothing else does
    messages: list[str] = []

    def listen(message: str) -> None:
        messages.append(message)
        progress.on_message(message)

    result = flow.launch_replica(s, "r0", flow.LaunchRun(
        sysfs_root=None, state_dir=tmp_path / "state", echo=lambda _: None, say=lambda _: None,
        environ={k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"},
        probe_interval_s=0.05, stop_grace_s=2.0, on_status=listen))
    progress.stop()
    assert result.exit_code == 0
    assert messages[0] == "STATUS=computing the config key"
    assert any(m.startswith("READY=1\nSTATUS=ready in ") for m in messages), messages
    assert any(line.startswith("waiting for READY: ") for line in lines), lines
    statuses = [line for line in lines if not line.startswith("waiting for READY")]
    assert statuses[0].startswith("computing the config key (")
    assert any(line.startswith("ready in ") for line in statuses), statuses
    time.sleep(0.05)
    after_ready = lines[next(i for i, line in enumerate(lines) if line.startswith("ready in ")):]
    assert not [line for line in after_ready[1:] if line.startswith("waiting for READY")]
