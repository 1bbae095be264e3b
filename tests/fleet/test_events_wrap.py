"""A node drained for a kernel event is never resumed by a verdict that could not see the whole
boot (issue 34, item 5): `decide` on such a verdict (an `events.lost` finding: records of this
boot no run read, rocmseat.preflight.boot_events) carries the events drain like an unchecked
family's. On main, the ok verdict with `events.lost` resumed the node."""

from __future__ import annotations

from rocmseat import exitcodes
from rocmseat.findings import Severity
from rocmseat.fleet import slurm
from rocmseat.fleet.scontrol import NodeState
from rocmseat.preflight.verdict_doc import CachedFinding

DRAINED = NodeState("gpu07", "gpu07", "IDLE+DRAIN",
                    "rocmseat: events.gpu_reset 0000:86:00.0 [events]")
COVERED = ("aer", "events", "numa", "pcie", "ras", "xgmi")
LOST = CachedFinding("events.lost", Severity.WARN, "node",
                     "ring buffer overrun: 4,960 records of this boot were dropped before "
                     "they were read; events among them are unseen")
CLEAN = CachedFinding("events.gpu", Severity.OK, "0000:86:00.0", "no amdgpu or AER event")


def test_an_ok_verdict_blind_to_part_of_the_boot_leaves_an_events_drain():
    action = slurm.decide(exitcodes.OK, [LOST, CLEAN], DRAINED, covered=COVERED)
    assert action.kind == "none" and action.reason == DRAINED.reason
    assert action.unknown is not None and "could not see the whole boot" in action.unknown
    assert "events, which drained the node, cannot be re-judged" in action.unknown


def test_the_same_verdict_seeing_the_whole_boot_resumes():
    action = slurm.decide(exitcodes.OK, [CLEAN], DRAINED, covered=COVERED)
    assert action.kind == "resume"


def test_a_blind_verdict_does_not_block_a_drain_for_another_family():
    pcie = NodeState("gpu07", "gpu07", "IDLE+DRAIN", "rocmseat: pcie.link.degraded "
                     "0000:89:00.0 [pcie]")
    assert slurm.decide(exitcodes.OK, [LOST, CLEAN], pcie, covered=COVERED).kind == "resume"


def test_a_new_failure_on_a_blind_verdict_keeps_events_in_the_tag():
    link = CachedFinding("pcie.link.degraded", Severity.FAIL, "0000:89:00.0", "Gen1")
    action = slurm.decide(exitcodes.PROBLEM, [LOST, link], DRAINED, covered=COVERED)
    assert action.kind == "drain" and action.reason is not None
    assert action.reason.endswith("[events,pcie]")


def test_an_unknown_verdict_blind_to_the_boot_does_not_resume_it_either():
    other = CachedFinding("hip.runtime", Severity.UNKNOWN, "node", "no HIP runtime")
    action = slurm.decide(exitcodes.CANNOT_CHECK, [LOST, CLEAN, other], DRAINED,
                          covered=(*COVERED, "hip"))
    assert action.kind == "none"
