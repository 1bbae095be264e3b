"""The Alertmanager routes shipped in prometheus/: one node's replicas notify once.

Each test failed before its fix (issue 11 and the watch room's second review).
"""

from __future__ import annotations

import yaml

from tests.conftest import REPO


def test_alertmanager_groups_one_nodes_replicas_into_one_notification():
    doc = yaml.safe_load((REPO / "prometheus" / "alertmanager.yml").read_text())
    assert doc["route"]["group_by"] == ["alertname", "node", "seat"]
    text = " ".join((REPO / "docs" / "monitoring.md").read_text().split())
    assert "**grouping** `[alertname, node, seat]`" in text
