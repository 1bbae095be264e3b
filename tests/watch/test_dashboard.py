"""The Grafana dashboard only queries series that exist: the exporter's or the shipped rules'."""

from __future__ import annotations

import json
import re

from rocmseat.watch.exporter import ExportState, render
from tests.conftest import REPO
from tests.watch.test_exporter_rules import RULES, statuses_after_collapse

DASHBOARD = REPO / "grafana" / "rocmseat-dashboard.json"


def test_dashboard_queries_known_series(tmp_path):
    dash = json.loads(DASHBOARD.read_text())
    statuses = tuple(statuses_after_collapse(tmp_path))
    text = render(lambda: ExportState(statuses=statuses, evaluated_at_s=1.0, evaluations=3,
                                      last_duration_s=0.1, max_age_s=1e9,
                                      sink_failures=(("command-hook", 0, False),
                                                     ("webhook", 0, False))))
    exported = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    exported |= {f"{n}_total" for n in exported}
    recorded = set(re.findall(r"record: (\S+)", RULES.read_text()))
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [a["expr"] for a in dash["annotations"]["list"]]
    names = {n for e in exprs for n in re.findall(r"(rocmseat[_:][A-Za-z0-9_:]+)", e)}
    assert names, exprs
    assert names <= exported | recorded, names - exported - recorded
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    assert dash["uid"] == "rocmseat-watch"
