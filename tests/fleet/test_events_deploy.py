"""The events family through the deploy/ adapters: NHC's check (`check_rocmseat events`) and the
NPD rule answer from the verdict a full run cached with a saved GPU-reset log."""

from __future__ import annotations

import json
from pathlib import Path

from tests.fleet.test_deploy import DEPLOY, X99, nhc  # noqa: F401 (the fixture)

RESET_LOG = Path(__file__).resolve().parent.parent / "fixtures/kernel-log/x99-r9700-reset-86.log"


def test_nhc_drains_on_a_gpu_reset_and_names_the_class(nhc, monkeypatch):  # noqa: F811
    monkeypatch.setenv("ROCMSEAT_KMSG", str(RESET_LOG))
    lines = nhc(X99, "events")
    assert lines[0] == "DIE 1 rocmseat: FAIL events.gpu_reset 0000:86:00.0 +1 more", lines
    assert lines[-1] == "RC 1"
    assert nhc(X99, "pcie", fresh=False) == ["RC 0"]  # the other families stay clean


def test_the_npd_rule_for_events_exists_with_its_condition():
    config = json.loads((DEPLOY / "npd" / "rocmseat-plugin-monitor.json").read_text())
    (rule,) = [r for r in config["rules"] if r["condition"] == "RocmseatKernelEvents"]
    assert rule["args"][-2:] == ["--only", "events"] and rule["type"] == "permanent"
    assert "RocmseatKernelEvents" in {c["type"] for c in config["conditions"]}
