"""The pure parts of `rocmseat slurm health`: scontrol's node line, the decision table, the node
name, and the budget. The real Slurm is in test_slurm_real.py (tier fleet); here the runner is
the injected fake the style guide allows, answering with lines recorded from Debian's Slurm
22.05.8 (`scontrol -o show node`)."""

from __future__ import annotations

import pytest

from rocmseat.errors import RocmseatError
from rocmseat.findings import Severity
from rocmseat.fleet import breaker, scontrol, slurm
from rocmseat.preflight.verdict import RecordedRun
from rocmseat.preflight.verdict_doc import CachedFinding
from rocmseat.runner import Completed
from tests.sysfs.conftest import SYSFS_FIXTURES

# Recorded from slurmctld/slurmd 22.05.8 (Debian 12) started by tests/fleet/slurm_cluster.py.
DRAINED = (
    "NodeName=vm Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=2.97 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
    "NodeHostName=vm Version=22.05.8 OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0  "
    "RealMemory=1000 AllocMem=0 FreeMem=17219 Sockets=2 Boards=1 State=IDLE+DRAIN "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug  "
    "BootTime=2026-11-30T13:44:21 SlurmdStartTime=2026-11-30T14:22:49 "
    "LastBusyTime=2026-11-30T14:22:49 CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= "
    "CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
    "ExtSensorsTemp=n/s Reason=rocmseat: pcie.link.degraded 0000:89:00.0 "
    "[root@2026-11-30T14:22:54]"
)
IDLE = (
    "NodeName=vm Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=2.97 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
    "NodeHostName=vm Version=22.05.8 OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0  "
    "RealMemory=1000 AllocMem=0 FreeMem=17219 Sockets=2 Boards=1 State=IDLE+NOT_RESPONDING "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug  "
    "BootTime=None SlurmdStartTime=2026-11-30T14:22:49 LastBusyTime=2026-11-30T14:23:01 "
    "CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
    "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s"
)
ADMIN = DRAINED.replace(
    "Reason=rocmseat: pcie.link.degraded 0000:89:00.0", "Reason=maintenance by admin"
).replace("State=IDLE+DRAIN", "State=IDLE+DRAIN+NOT_RESPONDING")


def test_parse_recorded_lines():
    node = scontrol.parse_node_line(DRAINED)
    assert (node.name, node.hostname, node.state) == ("vm", "vm", "IDLE+DRAIN")
    assert node.reason == "rocmseat: pcie.link.degraded 0000:89:00.0"
    assert node.drained and node.drained_by_rocmseat
    idle = scontrol.parse_node_line(IDLE)
    assert (idle.state, idle.reason, idle.drained) == ("IDLE+NOT_RESPONDING", None, False)
    admin = scontrol.parse_node_line(ADMIN)
    assert admin.reason == "maintenance by admin"
    assert admin.drained and not admin.drained_by_rocmseat


def test_parse_a_reason_followed_by_newer_fields():
    # Slurm 23.x prints Comment= and Extra= after Reason: the reason stops there
    line = DRAINED.replace("[root@2026-11-30T14:22:54]", "[root@2026-11-30T14:22:54] Comment=x")
    assert scontrol.parse_node_line(line).reason == "rocmseat: pcie.link.degraded 0000:89:00.0"


def test_parse_garbage_is_a_slurm_error():
    with pytest.raises(scontrol.SlurmError):
        scontrol.parse_node_line("scontrol: error: Invalid node name specified")


def _f(check_id, severity, subject):
    return CachedFinding(check_id, severity, subject, "m")


FAIL = [_f("pcie.link.degraded", Severity.FAIL, "0000:89:00.0"),
        _f("aer.badtlp", Severity.FAIL, "0000:80:02.0"),
        _f("pcie.link.ok", Severity.OK, "0000:05:00.0")]
UNKNOWN = [_f("aer.unknown", Severity.UNKNOWN, "0000:05:00.0")]
FULL = {"aer", "numa", "pcie", "inventory", "preflight"}  # what a full run without --hip covers
# the drain reason of both failures: the degraded link first (rocmseat.preflight.order)
BOTH = "rocmseat: pcie.link.degraded 0000:89:00.0 +1 more: aer.badtlp [aer,pcie]"
TAGGED = DRAINED.replace("Reason=rocmseat: pcie.link.degraded 0000:89:00.0",
                         "Reason=rocmseat: pcie.link.degraded 0000:89:00.0 [pcie]")
HIP_DRAINED = DRAINED.replace("Reason=rocmseat: pcie.link.degraded 0000:89:00.0",
                              "Reason=rocmseat: hip.ipc 0000:05:00.0+0000:09:00.0 [hip]")
MORE_DRAINED = DRAINED.replace("Reason=rocmseat: pcie.link.degraded 0000:89:00.0",
                               "Reason=rocmseat: pcie.link.degraded 0000:89:00.0 +1 more")


def _state(line, state, reason):
    """The recorded line with another State= and Reason= (as Slurm 22.05 prints them)."""
    line = line.replace("State=IDLE+DRAIN ", f"State={state} ")
    return line.replace("Reason=rocmseat: pcie.link.degraded 0000:89:00.0", f"Reason={reason}")


# what an administrator (or Slurm itself) sets: rocmseat neither drains nor resumes these
ADMIN_DOWN = _state(DRAINED, "DOWN", "RMA ticket 42 do not use")
ADMIN_FAIL = _state(DRAINED, "IDLE+FAIL", "admin says failing")
DOWN_OURS = _state(DRAINED, "DOWN+DRAIN", "rocmseat: pcie.link.degraded 0000:89:00.0 [pcie]")
FAIL_OURS = _state(DRAINED, "IDLE+FAIL", "rocmseat: pcie.link.degraded 0000:89:00.0 [pcie]")
MAINT = IDLE.replace("State=IDLE+NOT_RESPONDING", "State=IDLE+MAINT")
REBOOT = _state(DRAINED, "IDLE+DRAIN+REBOOT_REQUESTED", "reboot ASAP")
POWERED = IDLE.replace("State=IDLE+NOT_RESPONDING", "State=IDLE+POWERED_DOWN")
FUTURE = IDLE.replace("State=IDLE+NOT_RESPONDING", "State=FUTURE")
NOTE = IDLE + " Reason=waiting for a new riser [admin@2026-11-30T10:00:00]"
NEWER_FLAG = IDLE.replace("State=IDLE+NOT_RESPONDING", "State=IDLE+SOMETHING_NEW")
FOREIGN = [ADMIN, ADMIN_DOWN, ADMIN_FAIL, DOWN_OURS, FAIL_OURS, MAINT, REBOOT, POWERED, FUTURE,
           NOTE, NEWER_FLAG]


@pytest.mark.parametrize(
    ("code", "findings", "line", "covered", "kind", "reason"),
    [
        (1, FAIL, IDLE, FULL, "drain", BOTH),
        # a new reason; the old one's family (pcie) was checked again and is in the new one
        (1, FAIL, TAGGED, FULL, "drain", BOTH),
        (1, FAIL[:1], TAGGED, FULL, "none", "rocmseat: pcie.link.degraded 0000:89:00.0 [pcie]"),
        # a reason of an older rocmseat (no tag) is rewritten once with its family
        (1, FAIL[:1], DRAINED, FULL, "drain", "rocmseat: pcie.link.degraded 0000:89:00.0 [pcie]"),
        (0, FAIL[2:], TAGGED, FULL, "resume", None),
        (0, FAIL[2:], DRAINED, FULL, "resume", None),  # legacy, one finding: its family
        (0, FAIL[2:], IDLE, FULL, "none", None),
        (2, UNKNOWN, IDLE, FULL, "none", None),  # unknown: no change by default
        # ... and no resume of a drain whose family could not be checked; a drain for another
        # family that passed is resumed (issue 26: slurm health judges the families it has)
        (2, UNKNOWN, TAGGED.replace("[pcie]", "[aer]"), FULL, "none", None),
        (2, UNKNOWN, TAGGED, FULL, "resume", None),
        # issue 13, defect 11: a drain for hip.ipc is not cleared by a run that never probed HIP
        (0, FAIL[2:], HIP_DRAINED, FULL, "none", "rocmseat: hip.ipc 0000:05:00.0+0000:09:00.0 "
         "[hip]"),
        (0, FAIL[2:], HIP_DRAINED, FULL | {"hip"}, "resume", None),
        # ... and a failure elsewhere keeps hip among the causes
        (1, FAIL[:1], HIP_DRAINED, FULL, "drain",
         "rocmseat: pcie.link.degraded 0000:89:00.0 [hip,pcie]"),
        (1, FAIL[:1], HIP_DRAINED, FULL | {"hip"}, "drain",
         "rocmseat: pcie.link.degraded 0000:89:00.0 [pcie]"),
        # an older "+N more" reason does not say which families: never resumed by guess
        (0, FAIL[2:], MORE_DRAINED, FULL | {"hip"}, "none",
         "rocmseat: pcie.link.degraded 0000:89:00.0 +1 more"),
    ],
)
def test_decision_table(code, findings, line, covered, kind, reason):
    action = slurm.decide(code, findings, scontrol.parse_node_line(line), covered=covered)
    assert (action.kind, action.reason) == (kind, reason)


def test_a_drain_the_verdict_cannot_clear_is_unknown():
    action = slurm.decide(0, FAIL[2:], scontrol.parse_node_line(HIP_DRAINED), covered=FULL)
    assert action.unknown == ("this verdict did not check hip, which drained the node (add "
                              "--hip to the periodic run)")
    assert action.why == "left drained (rocmseat: hip.ipc 0000:05:00.0+0000:09:00.0 [hip])"


@pytest.mark.parametrize("line", FOREIGN)
@pytest.mark.parametrize("code", [0, 1, 2])
def test_a_state_or_reason_rocmseat_did_not_set_is_left_alone(line, code):
    """Issue 13, defect 10: an administrator's DOWN or FAIL was overwritten with rocmseat's
    drain, then resumed to IDLE by the next pass (seen on real Slurm 22.05)."""
    node = scontrol.parse_node_line(line)
    findings = FAIL if code == 1 else UNKNOWN if code == 2 else FAIL[2:]
    for covered in (FULL, FULL | {"hip"}):
        action = slurm.decide(code, findings, node, covered=covered, drain_on_unknown=True)
        assert action.kind == "none", (line, action)
        assert action.why.startswith(f"left alone: State={node.state}")
        assert action.why.endswith(" was not set by rocmseat")


def test_left_alone_says_what_it_saw():
    action = slurm.decide(1, FAIL, scontrol.parse_node_line(ADMIN_DOWN), covered=FULL)
    assert action.why == ("left alone: State=DOWN Reason=RMA ticket 42 do not use was not set by "
                          "rocmseat")


def test_reason_families():
    assert slurm.reason_families(BOTH) == {"aer", "pcie"}
    assert slurm.reason_families("rocmseat: unknown no verdict []") == frozenset()
    assert slurm.reason_families("rocmseat: pcie.link.degraded 0000:89:00.0") == {"pcie"}
    assert slurm.reason_families("rocmseat: pcie.link.degraded 0000:89:00.0 +1 more") is None
    assert slurm.reason_families("rocmseat: something I typed") is None
    assert slurm.reason_families("maintenance") is None


def test_reasons_fit_and_carry_no_field_syntax():
    subject = "0000:05:00.0 Comment=x " + "y" * 200
    reason = slurm.drain_reason([_f("pcie.link.degraded", Severity.FAIL, subject)],
                                Severity.FAIL, carried={"hip"})
    assert len(reason) <= slurm.MAX_REASON and reason.endswith(" [hip,pcie]")
    assert "=" not in reason
    assert slurm.reason_families(reason) == {"hip", "pcie"}


def test_unknown_drains_only_when_configured():
    node = scontrol.parse_node_line(IDLE)
    action = slurm.decide(2, UNKNOWN, node, drain_on_unknown=True)
    assert (action.kind, action.reason) == (
        "drain", "rocmseat: unknown aer.unknown 0000:05:00.0 [aer]")
    action = slurm.decide(2, (), node, drain_on_unknown=True, unknown_reason="no verdict")
    assert (action.kind, action.reason) == ("drain", "rocmseat: unknown no verdict []")
    # ... and a pass resumes such a drain (it names no family the pass could miss)
    drained = scontrol.parse_node_line(_state(DRAINED, "IDLE+DRAIN", action.reason))
    assert slurm.decide(0, FAIL[2:], drained, covered=FULL).kind == "resume"


class FakeRunner:
    """Answers scontrol like the recorded Slurm; records what it was asked."""

    def __init__(self, show=DRAINED, update_rc=0, preflight=None):
        self.calls = []
        self.show = show
        self.update_rc = update_rc
        self.preflight = preflight

    def __call__(self, argv, *, timeout_s=None, env=None, cwd=None, input_text=None):
        argv = [str(a) for a in argv]
        self.calls.append((argv, timeout_s))
        if argv[:3] == ["scontrol", "-o", "show"]:
            return Completed(tuple(argv), 0, self.show + "\n", "")
        if argv[:2] == ["scontrol", "update"]:
            return Completed(tuple(argv), self.update_rc, "", "scontrol: error: nope\n"
                             if self.update_rc else "")
        if self.preflight is not None:
            return self.preflight(argv, timeout_s)
        raise AssertionError(argv)


def test_node_name_sources():
    runner = FakeRunner()
    assert scontrol.resolve_node_name("gpu01", {}, runner=runner) == "gpu01"
    assert scontrol.resolve_node_name(None, {"SLURMD_NODENAME": "gpu02"}, runner=runner) == "gpu02"
    assert runner.calls == []  # neither asked scontrol
    assert scontrol.resolve_node_name(None, {}, runner=runner, hostnames=["vm"]) == "vm"
    with pytest.raises(scontrol.SlurmError, match="no Slurm node is this host"):
        scontrol.resolve_node_name(None, {}, runner=runner, hostnames=["other"])


@pytest.mark.parametrize("bad", ["vm; reboot", "-vm", "vm\nx", "a" * 65, "vm State=DOWN"])
def test_hostile_node_names_never_reach_scontrol(bad):
    runner = FakeRunner()
    with pytest.raises(scontrol.SlurmError, match="not a Slurm node name"):
        scontrol.resolve_node_name(None, {"SLURMD_NODENAME": bad}, runner=runner)
    assert runner.calls == []


def test_a_preflight_that_outlives_the_budget_is_unknown_and_drains_nothing(tmp_path):
    """The run is in-process (rocmseat.preflight.verdict): one that took longer than the budget
    left for it is not acted on, whatever it found."""
    from rocmseat.preflight.verdict import run_and_record

    clock = Clock()
    asked = {}

    def slow(sysfs_root, state_dir, options, **kwargs):
        # the whole command has 20 s: the run gets what is left after keeping 2 x 5 s for the
        # two scontrol calls after it; each HIP stage an eighth of that
        asked["hip_stage_timeout_s"] = options.hip_stage_timeout_s
        clock.now += 11.0
        return run_and_record(sysfs_root, state_dir, options, **kwargs)

    runner = FakeRunner(show=IDLE)
    outcome = slurm.health(
        slurm.HealthRequest(SYSFS_FIXTURES / "x99-r9700-degraded", tmp_path, node="vm",
                            budget_s=20.0),
        runner=runner, record=slow, clocks=scontrol.Clocks(monotonic=clock))
    assert outcome.verdict_code == 2
    assert outcome.verdict_line == "UNKNOWN: preflight did not finish within 10s"
    assert outcome.action.kind == "none"
    assert asked["hip_stage_timeout_s"] == 10.0 / slurm.HIP_STAGE_SHARE
    assert not any(argv[:2] == ["scontrol", "update"] for argv, _ in runner.calls)
    # every scontrol call is bounded too
    assert all(t is not None for _, t in runner.calls)


def test_a_stale_verdict_is_replaced_by_an_in_process_run(tmp_path):
    """Issue 16: `slurm health` ran `python -m rocmseat preflight` in a child to get a verdict;
    now it calls the library, which records the verdict as every full run does."""
    from rocmseat.preflight.verdict_doc import verdict_path

    runner = FakeRunner(show=IDLE)
    outcome = slurm.health(
        slurm.HealthRequest(SYSFS_FIXTURES / "x99-r9700-degraded", tmp_path, node="vm"),
        runner=runner)
    assert outcome.verdict_line.startswith("FAIL pcie.link.degraded 0000:89:00.0 +1 more (")
    assert outcome.action.kind == "drain"
    assert verdict_path(tmp_path).is_file()
    # only scontrol was spawned: show, show again after the run, update, and the breaker's
    # read after the drain (this fake does not keep the drain: nothing to rank)
    assert [argv[:2] for argv, _ in runner.calls] == [["scontrol", "-o"], ["scontrol", "-o"],
                                                      ["scontrol", "update"], ["scontrol", "-o"]]


class Clock:
    """A monotonic clock the fake runner moves: a hung call costs its whole timeout."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.mark.parametrize("hangs", ["show", "update", "preflight", "all"])
def test_the_whole_command_fits_its_budget(tmp_path, rocmseat_cli, hangs):
    """Issue 13: 50 s for the preflight plus three scontrol calls of 10 s each exceeded Slurm's
    60 s HealthCheckTimeout. Now every call gets what is left of one budget, and a hung scontrol
    says "timed out"."""
    clock = Clock()
    calls = []

    def runner(argv, *, timeout_s=None, env=None, cwd=None, input_text=None):
        argv = [str(a) for a in argv]
        calls.append((argv[:2], timeout_s))
        kind = ("update" if argv[:2] == ["scontrol", "update"] else
                "show" if argv[0] == "scontrol" else "preflight")
        if hangs in (kind, "all"):
            clock.now += timeout_s
            return Completed(tuple(argv), -9, "", "", timed_out=True)
        clock.now += 0.1
        if kind == "show":
            return Completed(tuple(argv), 0, IDLE + "\n", "")
        if kind == "update":
            return Completed(tuple(argv), 0, "", "")
        raise AssertionError(f"only scontrol is spawned: {argv}")

    def record(sysfs_root, state_dir, options, **kwargs):
        # the in-process run that hangs: each HIP stage is killed after its share, so it costs
        # the budget it was given (and a little more)
        assert hangs == "preflight"
        clock.now += options.hip_stage_timeout_s * slurm.HIP_STAGE_SHARE + 0.5
        return RecordedRun(None, None)

    if hangs in ("show", "update"):  # a fresh verdict of the degraded node: a drain is due
        rocmseat_cli("preflight", "--sysfs-root", str(SYSFS_FIXTURES / "x99-r9700-degraded"),
                     "--state-dir", str(tmp_path))
    try:
        outcome = slurm.health(
            slurm.HealthRequest(SYSFS_FIXTURES / "x99-r9700-degraded", tmp_path), env={},
            runner=runner, record=record, clocks=scontrol.Clocks(monotonic=clock))
        said = f"{outcome.verdict_line}; {outcome.action.why}"
    except scontrol.SlurmError as exc:
        said = str(exc)
    assert clock.now <= slurm.DEFAULT_BUDGET_S, (clock.now, calls)
    assert all(argv[0] != "scontrol" or (t is not None and t <= scontrol.SCONTROL_TIMEOUT_S)
               for argv, t in calls)
    if hangs in ("show", "all", "update"):
        assert "timed out after" in said and "slurmctld not answering" in said, said
    else:
        assert said.startswith("UNKNOWN: preflight did not finish within "), said


def test_a_failing_scontrol_update_is_could_not_act(tmp_path, rocmseat_cli):
    rocmseat_cli("preflight", "--sysfs-root", str(SYSFS_FIXTURES / "x99-r9700-degraded"),
                 "--state-dir", str(tmp_path))
    runner = FakeRunner(show=IDLE, update_rc=1)
    with pytest.raises(RocmseatError) as info:
        slurm.health(
            slurm.HealthRequest(SYSFS_FIXTURES / "x99-r9700-degraded", tmp_path, node="vm"),
            runner=runner)
    assert info.value.exit_code == 2
    assert str(info.value) == "scontrol update NodeName=vm State=DRAIN: scontrol: error: nope"


def test_dry_run_changes_nothing(tmp_path, rocmseat_cli):
    rocmseat_cli("preflight", "--sysfs-root", str(SYSFS_FIXTURES / "x99-r9700-degraded"),
                 "--state-dir", str(tmp_path))
    runner = FakeRunner(show=IDLE)
    outcome = slurm.health(
        slurm.HealthRequest(SYSFS_FIXTURES / "x99-r9700-degraded", tmp_path, node="vm",
                            dry_run=True),
        runner=runner)
    assert outcome.action.kind == "drain" and not outcome.applied
    # the node, then every node (the circuit breaker counts them); no update
    assert [argv for argv, _ in runner.calls] == [["scontrol", "-o", "show", "node", "vm"],
                                                  ["scontrol", "-o", "show", "node"]]


def test_a_hung_scontrol_is_killed_and_named(tmp_path, rocmseat_cli, monkeypatch):
    """The real runner and a real process: an `scontrol` that never answers (slurmctld gone) is
    killed within the budget and the one line says "timed out"."""
    import os
    import time

    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "scontrol").write_text("#!/bin/sh\nexec sleep 600\n")
    (fakebin / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fakebin}{os.pathsep}{os.environ['PATH']}")
    rocmseat_cli("preflight", "--sysfs-root", str(SYSFS_FIXTURES / "x99-r9700"), "--state-dir",
                 str(tmp_path / "s"))
    start = time.monotonic()
    result = rocmseat_cli("slurm", "health", "--node", "vm", "--budget", "12", "--sysfs-root",
                          str(SYSFS_FIXTURES / "x99-r9700"), "--state-dir", str(tmp_path / "s"))
    elapsed = time.monotonic() - start
    assert (result.exit_code, result.stdout) == (2, "")
    # 12 s in all, 2 x 5 s kept for the calls after it: the first call gets 2 s
    assert result.stderr == ("rocmseat: error: scontrol -o show node vm: timed out after 2s "
                             "(slurmctld not answering?)\n")
    assert elapsed < 12, elapsed  # a bound on a hang, not a speed target


AER_DRAINED = DRAINED.replace("Reason=rocmseat: pcie.link.degraded 0000:89:00.0",
                              "Reason=rocmseat: aer.badtlp 0000:80:02.0 [aer]")


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="chown to nobody needs root")
@pytest.mark.parametrize("how", ["file-nobody+file-0666", "dir-0777", "symlink"])
def test_a_forged_ok_verdict_never_resumes_a_drained_node(tmp_path, rocmseat_cli, how):
    """Issue 18: with the state dir 0777 and a forged ok verdict.json owned by nobody, `slurm
    health` sent `scontrol update NodeName=gpu07 State=RESUME` on a node drained for AER."""
    from tests.preflight.test_verdict_doc import _forge_ok_verdict, _plant

    state = tmp_path / "s"
    _plant(state, _forge_ok_verdict(rocmseat_cli, state), how)
    runner = FakeRunner(show=AER_DRAINED)
    outcome = slurm.health(
        slurm.HealthRequest(SYSFS_FIXTURES / "x99-r9700-degraded", state, node="vm"),
        runner=runner)
    assert outcome.action.kind != "resume"
    assert not any("State=RESUME" in argv for argv, _ in runner.calls)
    assert outcome.verdict_code in (1, 2)


def _node(name, host=None, state="IDLE", reason=None):
    """A node line as Slurm 22.05 prints it (the recorded IDLE line, renamed)."""
    line = IDLE.replace("NodeName=vm ", f"NodeName={name} ").replace(
        "NodeHostName=vm ", f"NodeHostName={host or name} ").replace(
        "State=IDLE+NOT_RESPONDING", f"State={state}")
    return line + (f" Reason={reason} [root@2026-11-30T14:22:54]" if reason else "")


@pytest.mark.parametrize("listed", ["gpu[01-64]", "gpu07,gpu08", "ALL", "all", "DEFAULT",
                                    "gpu 07", "-gpu07", "gpu\x1b[2J07"])
def test_a_listed_name_that_is_not_one_node_is_refused(listed):
    """Issue 18, item 3: with neither --node nor SLURMD_NODENAME, a listed
    `NodeName=gpu[01-64]` whose NodeHostName is this host led to `scontrol update
    NodeName=gpu[01-64] State=DRAIN`."""
    runner = FakeRunner(show=_node(listed, host="gpu07"))
    with pytest.raises(scontrol.SlurmError) as info:
        scontrol.resolve_node_name(None, {}, runner=runner, hostnames=["gpu07"])
    assert "not a Slurm node name" in str(info.value) or "Slurm nodes are this host" in str(
        info.value)
    assert "\x1b" not in str(info.value)


def test_several_nodes_on_this_host_are_refused_naming_them():
    """Issue 18, item 3: several nodes sharing this host's name silently picked the first."""
    show = "\n".join(_node(n, host="gpu07") for n in ("gpu07a", "gpu07b")) + "\n" + _node("x")
    runner = FakeRunner(show=show)
    with pytest.raises(scontrol.SlurmError) as info:
        scontrol.resolve_node_name(None, {}, runner=runner, hostnames=["gpu07"])
    assert str(info.value) == "2 Slurm nodes are this host (gpu07): gpu07a, gpu07b"
    assert info.value.exit_code == 2
    assert info.value.hint == "pass --node NAME (the NodeName in slurm.conf)"


@pytest.mark.parametrize("source", ["--node", "SLURMD_NODENAME"])
@pytest.mark.parametrize("bad", ["ALL", "Default", "gpu[01-64]", "gpu07,gpu08"])
def test_the_rule_holds_for_every_source(source, bad):
    runner = FakeRunner()
    with pytest.raises(scontrol.SlurmError, match="not a Slurm node name"):
        if source == "--node":
            scontrol.resolve_node_name(bad, {}, runner=runner)
        else:
            scontrol.resolve_node_name(None, {"SLURMD_NODENAME": bad}, runner=runner)
    assert runner.calls == []


def test_one_answer_with_two_lines_for_the_node_is_refused():
    runner = FakeRunner(show=IDLE + "\n" + IDLE)
    with pytest.raises(scontrol.SlurmError, match="2 nodes called 'vm' in its answer"):
        scontrol.node_state("vm", runner=runner)


def test_a_reason_does_not_start_a_line_at_a_unicode_separator():
    forged = IDLE + " Reason=x\u2028NodeName=evil State=IDLE"
    nodes = scontrol.parse_nodes(forged)
    assert [n.name for n in nodes] == ["vm"] and nodes[0].reason == "x?NodeName=evil State=IDLE"


@pytest.mark.parametrize(("text", "limit_of_10", "limit_of_1"), [
    ("10%", 1, 1), ("25%", 2, 1), ("100%", 10, 1), ("0.5%", 1, 1), ("3", 3, 3), (" 2 ", 2, 2),
])
def test_max_drained(text, limit_of_10, limit_of_1):
    parsed = breaker.parse_max_drained(text)
    assert (parsed.limit(10), parsed.limit(1)) == (limit_of_10, limit_of_1)


@pytest.mark.parametrize("bad", ["", "0", "-1", "0%", "101%", "nan%", "inf%", "1e3", "x%",
                                 "3.5", "%", "1000001", "\u0661\u0662", "1_0", "\u00b2",
                                 "1_0%", "\u0661%", "10 %"])
def test_max_drained_refuses(bad):
    with pytest.raises(ValueError):
        breaker.parse_max_drained(bad)


def _cluster(drained_by_us, *, others=10, extra=""):
    lines = [_node("vm", state="IDLE")]
    for i in range(1, others):
        name = f"gpu{i:02d}"
        if i <= drained_by_us:
            lines.append(_node(name, state="IDLE+DRAIN",
                               reason="rocmseat: pcie.link.degraded 0000:89:00.0 [pcie]"))
        else:
            lines.append(_node(name, state="IDLE+DRAIN" if extra else "IDLE",
                               reason=extra or None))
    return lines


class ClusterRunner(FakeRunner):
    """`show node vm` answers vm's line, `show node` every line."""

    def __init__(self, lines, **kw):
        super().__init__(show=lines[0], **kw)
        self.lines = lines

    def __call__(self, argv, *, timeout_s=None, env=None, cwd=None, input_text=None):
        argv = [str(a) for a in argv]
        if argv == ["scontrol", "-o", "show", "node"]:
            self.calls.append((argv, timeout_s))
            return Completed(tuple(argv), 0, "\n".join(self.lines) + "\n", "")
        return super().__call__(argv, timeout_s=timeout_s)


@pytest.fixture
def degraded_verdict(tmp_path, rocmseat_cli):
    rocmseat_cli("preflight", "--sysfs-root", str(SYSFS_FIXTURES / "x99-r9700-degraded"),
                 "--state-dir", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("drained", "max_drained", "held"), [
    (0, None, False), (1, None, True), (2, "3", False), (3, "3", True), (2, "30%", False),
    (3, "30%", True),
])
def test_the_circuit_breaker_holds_a_drain(degraded_verdict, drained, max_drained, held):
    runner = ClusterRunner(_cluster(drained))
    outcome = slurm.health(
        slurm.HealthRequest(
            SYSFS_FIXTURES / "x99-r9700-degraded", degraded_verdict, node="vm",
            max_drained=breaker.parse_max_drained(max_drained) if max_drained else None),
        runner=runner)
    updates = [argv for argv, _ in runner.calls if argv[1] == "update"]
    assert outcome.verdict_code == 1
    if held:
        limit = breaker.parse_max_drained(max_drained or "10%").limit(10)
        assert outcome.action.why == (f"circuit breaker: {drained} of 10 nodes already drained "
                                      f"by rocmseat (limit {limit}): not draining vm")
        assert updates == [] and not outcome.applied
    else:
        assert outcome.action.kind == "drain" and len(updates) == 1


def test_the_breaker_counts_only_rocmseats_drains_and_never_holds_a_resume(tmp_path,
                                                                           rocmseat_cli):
    # nine drains an administrator set: not rocmseat's, not counted
    runner = ClusterRunner(_cluster(0, extra="disk swap"))
    rocmseat_cli("preflight", "--sysfs-root", str(SYSFS_FIXTURES / "x99-r9700-degraded"),
                 "--state-dir", str(tmp_path / "bad"))
    outcome = slurm.health(
        slurm.HealthRequest(SYSFS_FIXTURES / "x99-r9700-degraded", tmp_path / "bad", node="vm"),
        runner=runner)
    assert outcome.action.kind == "drain" and outcome.applied
    # vm drained by rocmseat among nine others: a pass resumes it whatever the count
    lines = _cluster(9)
    lines[0] = TAGGED
    runner = ClusterRunner(lines)
    rocmseat_cli("preflight", "--sysfs-root", str(SYSFS_FIXTURES / "x99-r9700"),
                 "--state-dir", str(tmp_path / "good"))
    outcome = slurm.health(
        slurm.HealthRequest(SYSFS_FIXTURES / "x99-r9700", tmp_path / "good", node="vm"),
        runner=runner)
    assert outcome.action.kind == "resume" and outcome.verdict_code == 0


def test_the_breaker_on_the_command_line(degraded_verdict, rocmseat_cli, tmp_path,
                                         monkeypatch):
    """The CLI with a real process: a fake `scontrol` on PATH that lists ten nodes, one of
    them drained by rocmseat; the default 10 % holds the drain."""
    import os
    import shlex

    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    listing = tmp_path / "listing.txt"
    listing.write_text("\n".join(_cluster(1)) + "\n")
    one = tmp_path / "one.txt"
    one.write_text(_cluster(1)[0] + "\n")
    asked = tmp_path / "asked.txt"
    (fakebin / "scontrol").write_text(
        "#!/bin/sh\n"
        f"echo \"$*\" >> {shlex.quote(str(asked))}\n"
        f"if [ \"$*\" = \"-o show node\" ]; then exec cat {shlex.quote(str(listing))}; fi\n"
        f"if [ \"$*\" = \"-o show node vm\" ]; then exec cat {shlex.quote(str(one))}; fi\n"
        "exit 1\n")
    (fakebin / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fakebin}{os.pathsep}{os.environ['PATH']}")
    args = ["slurm", "health", "--node", "vm", "--sysfs-root",
            str(SYSFS_FIXTURES / "x99-r9700-degraded"), "--state-dir", str(degraded_verdict)]
    result = rocmseat_cli(*args)
    assert result.exit_code == 1, result.stderr
    assert result.stdout.endswith("; circuit breaker: 1 of 10 nodes already drained by rocmseat "
                                  "(limit 1): not draining vm\n")
    assert "update" not in asked.read_text()
    result = rocmseat_cli(*args, "--max-drained", "nope")
    assert result.exit_code == 2 and "--max-drained" in result.stderr


def test_an_scontrol_that_floods_its_output_is_cut_and_named(tmp_path, rocmseat_cli,
                                                             monkeypatch):
    """Issue 18, item 9: 400 MB of scontrol output took 1.2 GB of memory. The runner keeps at
    most its cap, kills the flood, and the health check says so (exit 2)."""
    import os

    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    (fakebin / "scontrol").write_text("#!/bin/sh\nexec yes 'NodeName=vm State=IDLE'\n")
    (fakebin / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fakebin}{os.pathsep}{os.environ['PATH']}")
    result = rocmseat_cli("slurm", "health", "--node", "vm", "--sysfs-root",
                          str(SYSFS_FIXTURES / "x99-r9700"), "--state-dir", str(tmp_path / "s"))
    assert result.exit_code == 2
    assert result.stderr.startswith("rocmseat: error: scontrol -o show node vm: printed more "
                                    "than 67,108,864 characters (cut; not an answer to read)")


def test_an_scontrol_whose_setsid_child_holds_its_output_ends_within_the_budget(
        tmp_path, rocmseat_cli, monkeypatch):
    """Issue 18, item 9: a child whose `setsid` grandchild holds stdout made `slurm health
    --budget 20` take 100 s (the runner waited on the pipe after the kill; Slurm kills health
    programs at 60 s). The real runner, a real process tree."""
    import os
    import threading

    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    pidfile = tmp_path / "grandchild.pid"
    (fakebin / "scontrol").write_text(
        "#!/bin/sh\n"
        f"setsid sh -c 'echo $$ > {pidfile}; exec sleep 100' &\n"
        "exec sleep 100\n")
    (fakebin / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fakebin}{os.pathsep}{os.environ['PATH']}")
    box = []
    args = ("slurm", "health", "--node", "vm", "--budget", "20", "--sysfs-root",
            str(SYSFS_FIXTURES / "x99-r9700"), "--state-dir", str(tmp_path / "s"))
    thread = threading.Thread(target=lambda: box.append(rocmseat_cli(*args)), daemon=True)
    try:
        thread.start()
        thread.join(40)  # a bound on a hang: 20 s of budget and a grace, far below 100 s
        assert not thread.is_alive(), "slurm health still waiting on the pipe"
    finally:
        if pidfile.exists():
            try:
                os.killpg(int(pidfile.read_text()), 9)
            except (ProcessLookupError, ValueError):
                pass
    (result,) = box
    assert result.exit_code == 2
    assert result.stderr.startswith("rocmseat: error: scontrol -o show node vm: timed out after "
                                    "10s (slurmctld not answering?)"), result.stderr


def _listed(name, state="IDLE", reason=None, stamp=None):
    line = f"NodeName={name} State={state}"
    if reason is not None:
        line += f" Reason={reason}" + (f" [root@{stamp}]" if stamp else "")
    return line


def test_the_reason_stamp_is_read_as_utc():
    node = scontrol.parse_node_line(_listed("gpu01", "IDLE+DRAIN", "rocmseat: x [aer]",
                                       "2026-12-01T14:21:05"))
    assert node.reason == "rocmseat: x [aer]"
    assert node.reason_set_unix_s == 1796134865.0
    for odd in ("Unknown", "12/01 14:21", "2026-13-45T99:99:99"):
        node = scontrol.parse_node_line(_listed("gpu01", "IDLE+DRAIN", "rocmseat: x", odd))
        assert (node.reason, node.reason_set_unix_s) == ("rocmseat: x", None)
    # scontrol is asked for the one format this reads
    env = scontrol.scontrol_env()
    assert (env["SLURM_TIME_FORMAT"], env["TZ"]) == ("standard", "UTC")


def test_breaker_after_keeps_the_first_drains_slurmctld_stamped():
    """Issue 26: every run that drained ranks the same drains the same way (stamp, then name),
    so of twenty drains in one second the first two by name stay, and an older drain keeps its
    place before them; an administrator's drain is not counted."""
    limit = breaker.MaxDrained(count=2)
    same = "2026-12-01T14:21:05"
    nodes = [scontrol.parse_node_line(_listed(f"gpu{i:02d}", "IDLE+DRAIN", "rocmseat: x [aer]",
                                         same)) for i in range(1, 21)]
    kept = [n.name for n in nodes if breaker.breaker_after(n.name, nodes, limit) is None]
    assert kept == ["gpu01", "gpu02"]
    back = breaker.breaker_after("gpu03", nodes, limit)
    assert back is not None and (back.kind, back.held) == ("resume", True)
    assert back.why == ("circuit breaker: 2 of 20 nodes were drained by rocmseat before it "
                        "(limit 2): handed back the drain of gpu03")
    older = scontrol.parse_node_line(_listed("gpu20", "IDLE+DRAIN", "rocmseat: y [pcie]",
                                        "2026-12-01T14:00:00"))
    admin = scontrol.parse_node_line(_listed("gpu00", "IDLE+DRAIN", "RMA ticket 42", same))
    nodes = [admin, *nodes[:19], older]
    kept = [n.name for n in nodes if breaker.breaker_after(n.name, nodes, limit) is None]
    assert kept == ["gpu00", "gpu01", "gpu20"]  # gpu00 is not rocmseat's: never ranked


class ListRunner:
    """scontrol whose node list is given per call; records the calls."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.calls = []

    def __call__(self, argv, *, timeout_s=None, env=None, cwd=None, input_text=None):
        self.calls.append(list(argv))
        return Completed(tuple(argv), 0, "\n".join(self.answers.pop(0)) + "\n", "")


def test_settle_waits_for_the_drains_second_to_pass_before_it_ranks():
    stamp = "2026-12-01T14:21:05"
    stamped = 1796134865.0
    now = [stamped + 0.2]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    mine = _listed("gpu03", "IDLE+DRAIN", "rocmseat: x [aer]", stamp)
    early = [mine, _listed("gpu01")]  # gpu01's drain of the same second is not committed yet
    late = [mine, *(_listed(f"gpu0{i}", "IDLE+DRAIN", "rocmseat: x [aer]", stamp)
                    for i in (1, 2))]
    runner = ListRunner([early, late])
    clocks = scontrol.Clocks(wall=lambda: now[0], monotonic=lambda: 0.0, sleep=sleep)
    back = breaker.settle_and_rank("gpu03", "rocmseat: x [aer]", breaker.MaxDrained(count=2),
                                 runner=runner, deadline=scontrol.Deadline(50, lambda: 0.0),
                                 clocks=clocks)
    assert slept == [pytest.approx(1.0 + breaker.CLOCK_SLACK_S - 0.2)]
    assert back is not None and back.kind == "resume"
    # the drain was changed since (an administrator's reason): not rocmseat's to hand back
    runner = ListRunner([[_listed("gpu03", "IDLE+DRAIN", "RMA ticket 42", stamp)]])
    assert breaker.settle_and_rank("gpu03", "rocmseat: x [aer]", breaker.MaxDrained(count=2),
                                 runner=runner, deadline=scontrol.Deadline(50, lambda: 0.0),
                                 clocks=clocks) is None
    # a stamp far ahead of this host's clock: the clocks disagree, the drain is handed back
    now[0] = stamped - 30
    runner = ListRunner([[mine]])
    back = breaker.settle_and_rank("gpu03", "rocmseat: x [aer]", breaker.MaxDrained(count=2),
                                 runner=runner, deadline=scontrol.Deadline(50, lambda: 0.0),
                                 clocks=clocks)
    assert back is not None and "clocks not synchronised" in back.why


def test_an_absent_hip_runtime_does_not_keep_a_pcie_drain():
    """Issue 26, item 7: a host where vLLM runs in a container has the amdgpu driver and no HIP
    runtime; the timer's `--hip` run finds hip.runtime unknown, the verdict is exit 2, and a node
    rocmseat drained for pcie was never resumed. Now the families the verdict judged decide: the
    pcie drain is resumed, a hip drain stays, and an unknown that speaks for every family
    (inventory) resumes nothing."""
    no_hip = [_f("hip.runtime", Severity.UNKNOWN, "0000:05:00.0+0000:09:00.0"),
              _f("pcie.link.ok", Severity.OK, "0000:05:00.0")]
    covered = FULL | {"hip"}
    action = slurm.decide(2, no_hip, scontrol.parse_node_line(TAGGED), covered=covered)
    assert action.kind == "resume"
    assert action.why == ("resumed (it was drained: rocmseat: pcie.link.degraded 0000:89:00.0 "
                          "[pcie]; this verdict could not check hip, which did not drain it)")
    assert slurm.decide(2, no_hip, scontrol.parse_node_line(HIP_DRAINED),
                        covered=covered).kind == "none"
    unreadable = [*no_hip, _f("inventory.unreadable", Severity.UNKNOWN, "0000:05:00.0")]
    assert slurm.decide(2, unreadable, scontrol.parse_node_line(TAGGED),
                        covered=covered).kind == "none"
    assert slurm.decide(2, no_hip, scontrol.parse_node_line(IDLE), covered=covered).kind == "none"


def test_the_timers_hip_run_on_a_host_without_hip_resumes_a_pcie_drain(tmp_path, rocmseat_cli,
                                                                       monkeypatch):
    """The shipped timer's `preflight --hip` on a host with no HIP runtime (libamdhip64 nowhere):
    hip.runtime is unknown, the other families are judged, and slurm health resumes a drain for
    one of them."""
    monkeypatch.setenv("ROCMSEAT_HIP_LIBRARY", str(tmp_path / "absent" / "libamdhip64.so"))
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    monkeypatch.setenv("HIP_PATH", str(tmp_path / "no-rocm"))
    result = rocmseat_cli("preflight", "--hip", "--format", "npd", "--sysfs-root",
                          str(SYSFS_FIXTURES / "x99-r9700"), "--state-dir", str(tmp_path))
    assert (result.exit_code, result.stdout.split(" ")[:2]) == (2, ["UNKNOWN", "hip.runtime"])
    runner = FakeRunner(show=TAGGED)
    outcome = slurm.health(
        slurm.HealthRequest(SYSFS_FIXTURES / "x99-r9700", tmp_path, node="vm"), runner=runner)
    assert outcome.action.kind == "resume", outcome
    assert runner.calls[-1][0] == ["scontrol", "update", "NodeName=vm", "State=RESUME"]


@pytest.mark.parametrize("shape", ["file", "fifo", "link", "socket"])
def test_slurm_health_under_a_wrong_shape_state_dir(tmp_path, rocmseat_cli, monkeypatch, shape):
    """Issue 28, item 4: a file, FIFO, link or socket where `<state>/preflight` should be: `slurm
    health` says so in one line and exits 2 (could not check), acts on nothing, and writes
    nothing through the link."""
    import os
    import shlex
    import socket

    state, elsewhere = tmp_path / "state", tmp_path / "elsewhere"
    state.mkdir()
    target = state / "preflight"
    if shape == "file":
        target.write_text("x")
    elif shape == "fifo":
        os.mkfifo(target)
    elif shape == "link":
        elsewhere.mkdir()
        target.symlink_to(elsewhere)
    else:
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
        sock.close()
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    one, asked = tmp_path / "one.txt", tmp_path / "asked.txt"
    one.write_text(IDLE + "\n")
    (fakebin / "scontrol").write_text(
        "#!/bin/sh\n"
        f"echo \"$*\" >> {shlex.quote(str(asked))}\n"
        f"case \"$*\" in '-o show node'*) exec cat {shlex.quote(str(one))};; esac\n"
        "exit 1\n")
    (fakebin / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fakebin}{os.pathsep}{os.environ['PATH']}")
    result = rocmseat_cli("slurm", "health", "--node", "vm", "--sysfs-root",
                          str(SYSFS_FIXTURES / "x99-r9700-degraded"), "--state-dir", str(state))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    said = result.stdout + result.stderr
    assert said.count("\n") <= 2 and "preflight" in said, said
    assert "update" not in (asked.read_text() if asked.exists() else "")
    if shape == "link":
        assert list(elsewhere.iterdir()) == []
