"""The pure parts of `rocmseat slurm health`: scontrol's node line, the decision table, the node
name, and the budget. The real Slurm is in test_slurm_real.py (tier fleet); here the runner is
the injected fake the style guide allows, answering with lines recorded from Debian's Slurm
22.05.8 (`scontrol -o show node`)."""

from __future__ import annotations

import pytest

from rocmseat.errors import RocmseatError
from rocmseat.findings import Severity
from rocmseat.fleet import slurm
from rocmseat.fleet.verdict_cache import CachedFinding
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
    node = slurm.parse_node_line(DRAINED)
    assert (node.name, node.hostname, node.state) == ("vm", "vm", "IDLE+DRAIN")
    assert node.reason == "rocmseat: pcie.link.degraded 0000:89:00.0"
    assert node.drained and node.drained_by_rocmseat
    idle = slurm.parse_node_line(IDLE)
    assert (idle.state, idle.reason, idle.drained) == ("IDLE+NOT_RESPONDING", None, False)
    admin = slurm.parse_node_line(ADMIN)
    assert admin.reason == "maintenance by admin"
    assert admin.drained and not admin.drained_by_rocmseat


def test_parse_a_reason_followed_by_newer_fields():
    # Slurm 23.x prints Comment= and Extra= after Reason: the reason stops there
    line = DRAINED.replace("[root@2026-11-30T14:22:54]", "[root@2026-11-30T14:22:54] Comment=x")
    assert slurm.parse_node_line(line).reason == "rocmseat: pcie.link.degraded 0000:89:00.0"


def test_parse_garbage_is_a_slurm_error():
    with pytest.raises(slurm.SlurmError):
        slurm.parse_node_line("scontrol: error: Invalid node name specified")


def _f(check_id, severity, subject):
    return CachedFinding(check_id, severity, subject, "m")


FAIL = [_f("pcie.link.degraded", Severity.FAIL, "0000:89:00.0"),
        _f("aer.badtlp", Severity.FAIL, "0000:80:02.0"),
        _f("pcie.link.ok", Severity.OK, "0000:05:00.0")]
UNKNOWN = [_f("aer.unknown", Severity.UNKNOWN, "0000:05:00.0")]


@pytest.mark.parametrize(
    ("code", "findings", "line", "kind", "reason"),
    [
        (1, FAIL, IDLE, "drain", "rocmseat: aer.badtlp 0000:80:02.0 +1 more"),
        (1, FAIL, DRAINED, "drain", "rocmseat: aer.badtlp 0000:80:02.0 +1 more"),  # new reason
        (1, FAIL[:1], DRAINED, "none", "rocmseat: pcie.link.degraded 0000:89:00.0"),  # same
        (1, FAIL, ADMIN, "none", None),  # an admin's drain is never overwritten
        (0, FAIL[2:], DRAINED, "resume", None),
        (0, FAIL[2:], ADMIN, "none", None),  # ... nor resumed
        (0, FAIL[2:], IDLE, "none", None),
        (2, UNKNOWN, IDLE, "none", None),  # unknown: no change by default
        (2, UNKNOWN, DRAINED, "none", None),  # ... and no resume either
    ],
)
def test_decision_table(code, findings, line, kind, reason):
    action = slurm.decide(code, findings, slurm.parse_node_line(line))
    assert (action.kind, action.reason) == (kind, reason)


def test_unknown_drains_only_when_configured():
    node = slurm.parse_node_line(IDLE)
    action = slurm.decide(2, UNKNOWN, node, drain_on_unknown=True)
    assert (action.kind, action.reason) == ("drain", "rocmseat: unknown aer.unknown 0000:05:00.0")
    action = slurm.decide(2, (), node, drain_on_unknown=True, unknown_reason="no verdict")
    assert (action.kind, action.reason) == ("drain", "rocmseat: unknown no verdict")


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
    assert slurm.resolve_node_name("gpu01", {}, runner=runner) == "gpu01"
    assert slurm.resolve_node_name(None, {"SLURMD_NODENAME": "gpu02"}, runner=runner) == "gpu02"
    assert runner.calls == []  # neither asked scontrol
    assert slurm.resolve_node_name(None, {}, runner=runner, hostnames=["vm"]) == "vm"
    with pytest.raises(slurm.SlurmError, match="no Slurm node is this host"):
        slurm.resolve_node_name(None, {}, runner=runner, hostnames=["other"])


@pytest.mark.parametrize("bad", ["vm; reboot", "-vm", "vm\nx", "a" * 65, "vm State=DOWN"])
def test_hostile_node_names_never_reach_scontrol(bad):
    runner = FakeRunner()
    with pytest.raises(slurm.SlurmError, match="not a Slurm node name"):
        slurm.resolve_node_name(None, {"SLURMD_NODENAME": bad}, runner=runner)
    assert runner.calls == []


def test_a_preflight_that_outlives_the_budget_is_unknown_and_drains_nothing(tmp_path):
    def hung(argv, timeout_s):
        assert argv[1:4] == ["-m", "rocmseat", "preflight"] and timeout_s == 7.0
        return Completed(tuple(argv), -9, "", "", timed_out=True)

    runner = FakeRunner(show=IDLE, preflight=hung)
    outcome = slurm.health(sysfs_root=SYSFS_FIXTURES / "x99-r9700", state_dir=tmp_path,
                           node="vm", budget_s=7.0, runner=runner)
    assert outcome.verdict_code == 2
    assert outcome.verdict_line == "UNKNOWN: preflight did not finish within 7s"
    assert outcome.action.kind == "none"
    assert not any(argv[:2] == ["scontrol", "update"] for argv, _ in runner.calls)
    # every scontrol call is bounded too
    assert all(t is not None for _, t in runner.calls)


def test_a_failing_scontrol_update_is_could_not_act(tmp_path, rocmseat_cli):
    rocmseat_cli("preflight", "--sysfs-root", str(SYSFS_FIXTURES / "x99-r9700-degraded"),
                 "--state-dir", str(tmp_path))
    runner = FakeRunner(show=IDLE, update_rc=1)
    with pytest.raises(RocmseatError) as info:
        slurm.health(sysfs_root=SYSFS_FIXTURES / "x99-r9700-degraded", state_dir=tmp_path,
                     node="vm", runner=runner)
    assert info.value.exit_code == 2
    assert str(info.value) == "scontrol update NodeName=vm State=DRAIN: scontrol: error: nope"


def test_dry_run_changes_nothing(tmp_path, rocmseat_cli):
    rocmseat_cli("preflight", "--sysfs-root", str(SYSFS_FIXTURES / "x99-r9700-degraded"),
                 "--state-dir", str(tmp_path))
    runner = FakeRunner(show=IDLE)
    outcome = slurm.health(sysfs_root=SYSFS_FIXTURES / "x99-r9700-degraded", state_dir=tmp_path,
                           node="vm", runner=runner, dry_run=True)
    assert outcome.action.kind == "drain" and not outcome.applied
    assert [argv[:2] for argv, _ in runner.calls] == [["scontrol", "-o"]]
