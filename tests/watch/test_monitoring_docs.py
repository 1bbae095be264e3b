"""The examples in docs/monitoring.md are what the code reads: parsed and checked here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from rocmseat.watch.filesd import parse_targets_file
from tests.conftest import REPO

DOC = REPO / "docs" / "monitoring.md"


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


def test_targets_example_is_a_valid_targets_file(tmp_path):
    (example,) = blocks("json")
    json.loads(example)
    targets = parse_targets_file(example, tmp_path / "vllm-west.json")
    assert [t.name for t in targets] == ["gpu-07-r0", "gpu-07-r1"]
    assert dict(targets[0].labels) == {"cluster": "west", "instance": "10.0.3.7:8000",
                                       "node": "gpu-07"}


def test_probe_example_uses_the_listener_endpoints():
    probe = next(yaml.safe_load(b) for b in blocks("yaml") if "readinessProbe" in b)
    assert probe["readinessProbe"]["httpGet"] == {"path": "/ready/r0", "port": 9464}
    assert probe["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 9464}


@pytest.mark.tools
def test_prometheus_example_passes_promtool(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package 'prometheus')")
    doc = next(yaml.safe_load(b) for b in blocks("yaml") if "scrape_configs" in b)
    assert doc["scrape_configs"][0]["honor_labels"] is True
    doc["rule_files"] = [str(REPO / "prometheus" / "rocmseat-rules.yml")]
    doc["scrape_configs"][1]["file_sd_configs"][0]["files"] = [str(tmp_path / "vllm-*.json")]
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(doc))
    done = subprocess.run([promtool, "check", "config", str(config)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
