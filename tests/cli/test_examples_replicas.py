"""Every `--replica NAME` in the help examples names a replica its seat has (issue 35, item 7:
`launch --help` said `launchers/demo-cpu.toml --replica r1`; the demo seat has only r0)."""

from __future__ import annotations

import json
import re

import pytest

from rocmseat.cli.examples import EXAMPLES
from tests.conftest import REPO
from tests.sysfs.conftest import SYSFS_FIXTURES

USES = sorted({(m.group(1), m.group(2)) for examples in EXAMPLES.values() for e in examples
               if (m := re.search(r" (launchers/\S+\.toml) .*--replica (\S+)", e))})


def test_there_are_replica_examples():
    assert ("launchers/demo-cpu.toml", "r0") in USES


@pytest.mark.parametrize(("seat", "replica"), USES)
def test_example_replica_exists(rocmseat_cli, seat, replica):
    # the seat's replicas as the dry run plans them on the flagship's own board
    result = rocmseat_cli("launch", str(REPO / seat), "--dry-run", "--json",
                          "--sysfs-root", str(SYSFS_FIXTURES / "x99-r9700"))
    plan, _ = json.JSONDecoder().raw_decode(result.stdout)
    names = [r["replica"] for r in plan["replicas"]]
    assert replica in names, (seat, names)
