"""Tier 3: the HIP probe over every pair of a TP8 group (rocmseat.placement.groups.group_pairs),
against the fake libamdhip64.so configured as the mi300x-hive fixture's eight GPUs; a pair
whose IPC open fails is named, the others pass. The wall time is printed (a figure for the
report, not an assertion: timed assertions are not tests here)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rocmseat.findings import Severity
from rocmseat.hip.check import hip_findings
from rocmseat.node.inventory import read_inventory
from rocmseat.placement.groups import group_pairs, plan_groups
from tests.conftest import FIXTURES
from tests.hip.conftest import PROBE_SIZE

pytestmark = pytest.mark.hip


def _hive_group() -> tuple[str, ...]:
    (group,) = plan_groups(read_inventory(FIXTURES / "sysfs" / "mi300x-hive"), 8).groups
    return group


def test_every_pair_of_a_tp8_group_is_probed(fake_hip: Path, shm_prefix: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    group = _hive_group()
    pairs = group_pairs(group)
    bad = (group[1], group[2])
    env = {"FAKEHIP_DEVICES": ",".join(group), "FAKEHIP_SHM_PREFIX": shm_prefix,
           "FAKEHIP_IPC_OPEN_FAIL": f"{bad[0]}>{bad[1]},{bad[1]}>{bad[0]}",
           "HIP_VISIBLE_DEVICES": ",".join(str(i) for i in range(8))}
    started = time.monotonic()
    # 1 MiB per direction (the production 32 MiB took 41 s for the 28 pairs here, 1.4 s a
    # pair: docs/launch.md's figure)
    findings = hip_findings(pairs, env=env, library=fake_hip, stage_timeout_s=60.0,
                            size_bytes=PROBE_SIZE)
    took = time.monotonic() - started
    ipc = {f.subject: f for f in findings if f.check_id == "hip.ipc"}
    assert len(pairs) == 28 and len(ipc) == 28
    failing = sorted(s for s, f in ipc.items() if f.severity is Severity.FAIL)
    assert failing == [f"{bad[0]}+{bad[1]}"]
    assert all(f.severity is Severity.OK for s, f in ipc.items() if s not in failing)
    with capsys.disabled():
        print(f"\nHIP probe, TP8 group: {len(pairs)} pairs in {took:.1f} s "
              f"({took / len(pairs):.2f} s per pair)")
