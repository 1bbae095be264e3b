"""The exporter's page and the shipped Prometheus rules, checked by the real promtool."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rocmseat.watch.exporter import parse_listen, render, start_exporter
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.metrics import read_page
from rocmseat.watch.scrape import Target
from tests.conftest import REPO
from tests.watch.conftest import FakeClock, page

RULES = REPO / "prometheus" / "rocmseat-rules.yml"
RULES_TEST = REPO / "prometheus" / "rocmseat-rules.test.yml"


def statuses_after_collapse(tmp_path):
    pages = iter([page("00-healthy.txt"), page("01-healthy.txt"), page("02-collapse.txt")])
    clock = FakeClock()
    w = Watcher([Target("r0", "http://r0/metrics"), Target("r1", "http://r1/metrics")],
                WatchConfig(pinned_al=2.9, state_dir=tmp_path),
                fetch=lambda url, t: next(pages) if "r0" in url else "<html></html>",
                clock=clock)
    out = []
    for _ in range(3):
        out = w.step()
        clock.tick(10)
    w.close()
    return out


def test_exporter_page_names_and_values(tmp_path):
    statuses = statuses_after_collapse(tmp_path)
    text = render(lambda: statuses)
    assert 'rocmseat_alert_active{alert="spec_drafter_dead",replica="r0"} 1.0' in text
    assert 'rocmseat_alert_active{alert="replica_down",replica="r1"} 1.0' in text
    assert 'rocmseat_scrape_errors_total{replica="r1"} 3.0' in text
    assert 'rocmseat_spec_baseline_acceptance_length{replica="r0"} 2.9' in text
    assert 'rocmseat_spec_position_acceptance{position="2",replica="r0"} 0.0' in text
    assert 'rocmseat_replica_up{replica="r1"} 0.0' in text
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
             if line and not line.startswith("#")}
    # the names issue 6 lists (and the e2e room scrapes): renaming one breaks users' dashboards
    assert {"rocmseat_spec_acceptance_length", "rocmseat_spec_draft_acceptance_rate",
            "rocmseat_spec_position_acceptance", "rocmseat_alert_active",
            "rocmseat_scrape_errors_total"} <= names
    al = [line for line in text.splitlines()
          if line.startswith('rocmseat_spec_acceptance_length{replica="r0"}')]
    assert al and float(al[0].split()[-1]) == pytest.approx(1 + 12 / 600)


def test_exporter_serves_its_own_registry_over_http(tmp_path):
    import httpx

    statuses = statuses_after_collapse(tmp_path)
    server, _thread = start_exporter("127.0.0.1:0", lambda: statuses)
    try:
        port = server.server_address[1]
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    finally:
        server.shutdown()
        server.server_close()
    assert "rocmseat_spec_cusum" in text and "python_gc" not in text  # no global registry


@pytest.mark.parametrize("bad", ["9464", "host:", "h:99999", "", "h:\u00b2", "h:\u0661\u0662"])
def test_listen_must_be_host_port(bad):
    with pytest.raises(ValueError, match="expected HOST:PORT"):
        parse_listen(bad)


def _promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (Debian package 'prometheus')")
    return path


@pytest.mark.tools
def test_promtool_check_rules():
    proc = subprocess.run([_promtool(), "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 23 rules found" in proc.stdout


@pytest.mark.tools
def test_promtool_test_rules():
    proc = subprocess.run([_promtool(), "test", "rules", str(RULES_TEST)], capture_output=True,
                          text=True, timeout=120, cwd=RULES_TEST.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@pytest.mark.tools
def test_promtool_check_metrics_on_the_exporter_page(tmp_path):
    text = render(lambda: statuses_after_collapse(tmp_path))
    proc = subprocess.run([_promtool(), "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.tools
def test_promtool_check_metrics_accepts_the_vllm_fixture_pages():
    # The fixtures are vLLM's own exposition: promtool's linter takes them as well-formed
    # (it may only lint names, never fail to parse), and the reader reads them.
    text = page("vllm-qwen-dp2-k7.txt")
    proc = subprocess.run([_promtool(), "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=120)
    assert "error while linting" not in (proc.stdout + proc.stderr)
    assert read_page(text).engines == 2
