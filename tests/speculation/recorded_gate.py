"""The recorded CPU gate the flow tests replay their arms from (tests/fixtures/spec/
gate-cpu-schedule: vllm bench serve results of the CPU engine), and the shipped demo seats they
gate (tests/speculation/test_gate_flow.py, test_interleave_gate.py)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from rocmseat.speculation.gate.arms import ArmRecord, load_arm_record
from tests.conftest import FIXTURES, REPO

SCHEDULE_GATE = FIXTURES / "spec" / "gate-cpu-schedule"
BASE_SEAT = REPO / "launchers" / "demo-cpu-base.toml"
SPEC_SEAT = REPO / "launchers" / "demo-cpu-spec.toml"
HANG = "rocmseat-watch replica=r0 alert=replica_stalled state=firing"


def recorded_arms(tmp_path: Path, names: Sequence[str]) -> dict[str, ArmRecord]:
    """The recorded gate's arms `names`, read from a copy under `tmp_path` (tests may edit it)."""
    copy_dir = tmp_path / "recorded"
    shutil.copytree(SCHEDULE_GATE, copy_dir)
    return {name: load_arm_record(copy_dir, name) for name in names}
