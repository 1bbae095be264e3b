"""The Grafana dashboard only queries series that exist: the exporter's or the shipped rules'."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from rocmseat.preflight.textfile import TEXTFILE_NAME
from rocmseat.watch.exporter import ExportState, render
from tests.conftest import REPO
from tests.sysfs.conftest import SYSFS_FIXTURES
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
    exported |= _textfile_names(tmp_path)
    recorded = set(re.findall(r"record: (\S+)", RULES.read_text()))
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [a["expr"] for a in dash["annotations"]["list"]]
    unquoted = [re.sub(r'"[^"]*"', "", e) for e in exprs]  # label values are not names
    names = {n for e in unquoted for n in re.findall(r"(rocmseat[_:][A-Za-z0-9_:]+)", e)}
    assert names, exprs
    assert names <= exported | recorded, names - exported - recorded
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
    assert dash["uid"] == "rocmseat-watch"


def _textfile_names(tmp_path):
    """The families of the node textfile, as `rocmseat preflight --textfile` writes them for the
    degraded fixture tree (every family it can hold: links, AER, findings)."""
    from rocmseat.cli.main import main

    out = tmp_path / "textfile"
    main(["preflight", "--sysfs-root", str(SYSFS_FIXTURES / "x99-r9700-degraded"),
          "--state-dir", str(tmp_path / "state"), "--textfile", str(out)])
    text = (out / TEXTFILE_NAME).read_text()
    names = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    return names | {f"{n}_total" for n in names}


def _variables(dash):
    return {v["name"]: v for v in dash["templating"]["list"]}


def test_fleet_variables_and_legends_name_the_node():
    dash = json.loads(DASHBOARD.read_text())
    assert {"datasource", "node", "instance", "seat", "replica"} <= _variables(dash).keys()
    targets = [(p["title"], t) for p in dash["panels"] for t in p.get("targets", [])]
    for title, t in targets:
        if "rocmseat_" in t["expr"] and "rocmseat:" not in t["expr"]:
            assert 'node=~"$node"' in t["expr"], (title, t["expr"])
            assert "{{node}}" in t["legendFormat"], (title, t["legendFormat"])
        else:  # the recorded rules keep the vLLM job's instance (host:port)
            assert "{{instance}}" in t["legendFormat"], (title, t["legendFormat"])


def test_node_health_row_reads_the_textfile():
    dash = json.loads(DASHBOARD.read_text())
    rows = [p for p in dash["panels"] if p["type"] == "row"]
    assert rows and rows[0]["title"].startswith("Node health")
    first_row_end = dash["panels"].index(rows[1])
    health = " ".join(t["expr"] for p in dash["panels"][1:first_row_end] for t in p["targets"])
    for name in ("rocmseat_preflight_exit_code", "rocmseat_gpu_pcie_link_speed_gts",
                 "rocmseat_pcie_aer_errors_total", "node_textfile_mtime_seconds"):
        assert name in health, name


@pytest.mark.tools
def test_preview_renders_every_panel_from_a_real_prometheus(tmp_path):
    # grafana/render_preview.py: recorded series -> promtool blocks -> Prometheus on loopback ->
    # each panel's PromQL; every panel answers with at least one series
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (Debian package 'prometheus')")
    out = tmp_path / "dash.png"
    done = subprocess.run([sys.executable, str(REPO / "grafana" / "render_preview.py"), str(out)],
                          capture_output=True, text=True, timeout=600, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout + done.stderr
    counts = {m.group(2): int(m.group(1))
              for m in re.finditer(r"^\s*(\d+) series  (.+)$", done.stdout, re.M)}
    dash = json.loads(DASHBOARD.read_text())
    titles = [p["title"] for p in dash["panels"] if p["type"] != "row"]
    assert sorted(counts) == sorted(titles)
    assert all(n > 0 for n in counts.values()), counts
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (REPO / "docs" / "img" / "rocmseat-dashboard.png").is_file()
