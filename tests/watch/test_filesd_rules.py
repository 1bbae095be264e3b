"""The targets file read as Prometheus's file_sd reads it (YAML scalars, empty and null labels,
what it refuses), and what rocmseat adds: UTF-8 label values the exporter can encode, an
empty or half-written re-read keeps the last set, no targets is exit 2, rocmseat_spec, and
the descriptor limit.

Each test failed before its fix (issue 11 and the watch room's second review).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import httpx
import pytest

from rocmseat.errors import ConfigError
from rocmseat.watch.exporter import ExportState, render, start_exporter
from rocmseat.watch.filesd import TargetsFile, parse_targets_file
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.scrape import Target
from tests.conftest import REPO
from tests.watch.conftest import Answer, page
from tests.watch.hostile import (
    CLI,
    env,
)


@pytest.mark.parametrize(("name", "text"), [
    ("t.json", '[{"targets": ["127.0.0.1:1"], "labels": {"replica": "r0", "zone": "\\ud800"}}]'),
    ("t.yml", '- targets: ["127.0.0.1:1"]\n  labels: {replica: r0, zone: "\\ud800"}\n'),
    ("t.json", '[{"targets": ["127.0.0.1:1"], "labels": {"replica": "r\\udfff0"}}]'),
], ids=["json-value", "yaml-value", "json-replica"])
def test_a_lone_surrogate_in_a_label_is_a_one_line_error(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match="not valid UTF-8") as info:
        parse_targets_file(path.read_text(), path)
    assert str(path) in info.value.message and "\n" not in info.value.message


def _status(labels: tuple[tuple[str, str], ...]):
    w = Watcher([Target("r0", "http://r0/metrics", labels=labels)],
                WatchConfig(state_dir=None), fetch=lambda url, t: "<html></html>")
    w.step()
    w.close()
    return w.statuses


def test_the_exporter_survives_a_label_it_cannot_encode():
    statuses = _status((("zone", "a\ud800b"),))
    text = render(lambda: ExportState(statuses=tuple(statuses), evaluated_at_s=time.time(),
                                      max_age_s=60))
    assert 'zone="a\ufffdb"' in text
    server, _ = start_exporter("127.0.0.1:0", lambda: ExportState(statuses=tuple(statuses)))
    try:
        port = server.server_address[1]
        r = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert r.status_code == 200 and "rocmseat_replica_up" in r.text
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("name", "text"), [
    ("t.json", "[]"), ("t.yml", ""), ("t.yml", "- targets: []\n"),
    ("t.json", '[{"targets": [], "labels": {"zone": "z"}}]'),
], ids=["json-empty-list", "yaml-empty", "yaml-no-targets", "json-no-targets"])
def test_once_with_no_targets_is_exit_2(rocmseat_cli, tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    result = rocmseat_cli("watch", "--targets-file", str(path), "--once", "--state-dir",
                          str(tmp_path / "s"))
    assert result.exit_code == 2, result.stdout + result.stderr
    assert "no targets" in result.stderr and result.stdout == ""


@pytest.mark.parametrize(("name", "good", "empty"), [
    ("t.json", '[{"targets": ["a:1", "b:1"]}]', ""),
    ("t.json", '[{"targets": ["a:1", "b:1"]}]', "[]"),
    ("t.yml", "- targets: ['a:1', 'b:1']\n", ""),
    ("t.yml", "- targets: ['a:1', 'b:1']\n", "- targets: []\n"),
    ("t.yml", "- targets: ['a:1', 'b:1']\n", "# being rewritten\n"),
], ids=["json-empty-file", "json-empty-list", "yaml-empty", "yaml-no-targets", "yaml-comment"])
def test_an_empty_reread_keeps_the_last_set_and_says_so_once(tmp_path, name, good, empty):
    path = tmp_path / name
    path.write_text(good)
    source = TargetsFile(path)
    assert [t.name for t in source.load()] == ["a:1", "b:1"]
    path.write_text(empty)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    said = [source.poll() for _ in range(3)]
    assert all(r.targets is None for r in said), said
    errors = [r.error for r in said if r.error]
    assert len(errors) == 1 and "no targets" in errors[0], said


def test_a_file_caught_mid_write_never_removes_targets(tmp_path):
    path = tmp_path / "t.yml"
    full = "- targets: ['a:1']\n  labels: {zone: z1}\n- targets: ['b:1']\n  labels: {zone: z2}\n"
    path.write_text(full)
    source = TargetsFile(path)
    source.load()
    path.write_text(full[:full.index("- targets: ['b:1']")])  # a writer caught half-way
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    first = source.poll()
    path.write_text(full.replace("z2", "z3"))  # the writer finished
    applied = [r.targets for r in (first, source.poll(), source.poll(), source.poll())
               if r.targets is not None]
    assert applied and all({t.name for t in got} == {"a:1", "b:1"} for got in applied), applied
    assert dict(applied[-1][1].labels)["zone"] == "z3"


# What Debian's Prometheus 2.42 discovers from the same YAML (its yaml.v2 decoder into
# model.LabelSet takes a scalar's text; null and empty values are absent labels);
# tests/watch/test_monitoring_stack.py reads the same file through the real Prometheus.
SCALARS_YAML = """\
- targets: ["127.0.0.1:1"]
  labels:
    rack: 12
    flt: 1.50
    hex: 0x1F
    oct: 010
    boolish: yes
    tru: true
    nul: null
    tilde: ~
    empty:
    sci: 1e3
    date: 2024-01-01
    inf: .inf
    quoted: "12"
    single: '0x1F'
    tagged: !!str 7
    bin: !!binary aGVsbG8=
"""
PROMETHEUS_LABELS = {"bin": "hello", "boolish": "yes", "date": "2024-01-01", "flt": "1.50",
                     "hex": "0x1F", "inf": ".inf", "oct": "010", "quoted": "12", "rack": "12",
                     "sci": "1e3", "single": "0x1F", "tagged": "7", "tru": "true"}


def test_yaml_scalars_are_read_as_prometheus_reads_them(tmp_path):
    (target,) = parse_targets_file(SCALARS_YAML, tmp_path / "t.yml")
    assert dict(target.labels) == {**PROMETHEUS_LABELS, "instance": "127.0.0.1:1"}


@pytest.mark.parametrize(("name", "text", "why"), [
    ("t.yml", "- targets: ['a:1']\n  labels: {x: 1, x: 2}\n", "key 'labels.x' is given twice"),
    ("t.yml", "- targets: ['a:1']\n  labels: {x: [1]}\n", "key 'labels.x': the value must be "),
    ("t.yml", "- targets: ['a:1']\n  labels: {12: x}\n", "label name '12'"),
    ("t.json", '[{"targets": ["a:1"], "labels": {"x": true}}]', "must be a string, not bool"),
], ids=["yaml-duplicate-key", "yaml-sequence-value", "yaml-number-name", "json-bool"])
def test_what_prometheus_refuses_is_refused(tmp_path, name, text, why):
    with pytest.raises(ConfigError, match=re.escape(why)):
        parse_targets_file(text, tmp_path / name)


def test_empty_and_null_labels_are_absent_as_in_prometheus(tmp_path):
    text = ('[{"targets": ["a:1"], "labels": {"instance": "", "replica": null, "zone": "z"}}]')
    (target,) = parse_targets_file(text, tmp_path / "t.json")
    assert target.name == "a:1" and dict(target.labels) == {"instance": "a:1", "zone": "z"}


def test_a_target_declared_non_speculative_is_ready_without_spec_series(rocmseat_cli,
                                                                         page_server, tmp_path):
    nospec = page("vllm-nospec.txt")
    page_server.play(Answer(nospec))
    port = page_server.url.split(":")[2].split("/")[0]
    path = tmp_path / "t.yml"
    path.write_text(f"- targets: ['127.0.0.1:{port}']\n"
                    "  labels: {replica: plain, rocmseat_spec: 'false', zone: z}\n")
    (target,) = parse_targets_file(path.read_text(), path)
    assert target.expect_spec is False and "rocmseat_spec" not in dict(target.labels)
    once = rocmseat_cli("watch", "--targets-file", str(path), "--once", "--interval", "0.05",
                        "--state-dir", str(tmp_path / "s"))
    flag = rocmseat_cli("watch", "--target", f"plain=127.0.0.1:{port}", "--no-spec", "--once",
                        "--interval", "0.05", "--state-dir", str(tmp_path / "s"))
    assert once.exit_code == 0, once.stdout
    assert flag.exit_code == 0, flag.stdout
    assert "spec_blind" not in once.stdout + flag.stdout


def test_more_targets_than_descriptors_is_refused_at_start(tmp_path):
    import resource

    path = tmp_path / "t.json"
    path.write_text(json.dumps([{"targets": [f"127.0.0.1:{20000 + i}" for i in range(300)]}]))
    done = subprocess.run(
        [*CLI, "watch", "--targets-file", str(path), "--once", "--state-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=env(), cwd=REPO,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200)))
    assert done.returncode == 2, done.stderr
    assert "300 targets need 556 file descriptors; the limit is 200" in done.stderr
    assert done.stdout == ""


