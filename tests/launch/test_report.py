from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from rocmseat.launch.plan import Binding, KeyStatus, ReplicaPlan
from rocmseat.launch.readiness import Canary, probe
from rocmseat.launch.report import (
    HISTORY_KEEP,
    SCHEMA,
    build_report,
    previous_start,
    replica_state_dir,
    save_report,
)
from rocmseat.launch.startuplog import classify_text
from rocmseat.placement.record import NumaBinding, ReplicaPlacement
from tests.conftest import FIXTURES


def a_plan(key: str | None = "ab" * 32,
           argv: tuple[str, ...] = ("vllm", "serve", "/m")) -> ReplicaPlan:
    record = ReplicaPlacement(
        seat="s", replica="r0", index=0, host="127.0.0.1", port=8000,
        pci_pair=("0000:05:00.0", "0000:09:00.0"), gfx_targets=("gfx1201", "gfx1201"),
        hip_indices=(0, 1), hip_index_source="pci-bus-order", hip_note="assumed",
        numa=NumaBinding(0, "0-3", (0, 1, 2, 3), ""), cache_dir=Path("/c/r0"),
        state_dir=Path("/s/seats/s/r0"))
    return ReplicaPlan(
        seat="s", placement=record, backend="rocm",
        binding=Binding(0, "0-3", (0, 1, 2, 3), "numactl", "numactl --cpunodebind=0"),
        env={}, engine_argv=argv, argv=argv, key=KeyStatus(key, "" if key else "unknown: x"),
    )


def report_at(day: int, tokens_log: str) -> dict:
    summary = classify_text(tokens_log)
    when = dt.datetime(2026, 11, day, 10, 0, tzinfo=dt.UTC)
    return build_report(a_plan(), summary, [], started_at=when, finished_at=when,
                        moved_aside=None, changed_factors=[], outcome={"ready": True})


def test_report_document_and_files(tmp_path):
    doc = report_at(27, (FIXTURES / "logs" / "rocm-0.33-aot-hit-eagle3.log").read_text())
    assert doc["schema"] == SCHEMA
    assert doc["config_key"] == {"digest": "ab" * 32, "reason": ""}
    assert doc["log"]["components"]["eagle_head"]["outcome"] == "cache_load"
    assert doc["plan"]["pci_pair"] == ["0000:05:00.0", "0000:09:00.0"]
    path = save_report(tmp_path, doc)
    assert path == tmp_path / "seats" / "s" / "r0" / "startup.json"
    assert json.loads(path.read_text()) == doc
    assert len(list((path.parent / "history").glob("*.json"))) == 1


def test_reports_hold_no_secret_and_are_owner_only(tmp_path):
    """Issue 11: `extra_args = ["--api-key", "sk-..."]` reached startup.json and history/*.json
    (mode 0644) verbatim. The argv is redacted, and both files are 0600 (they hold an argv)."""
    when = dt.datetime(2026, 11, 27, 10, 0, tzinfo=dt.UTC)
    plan = a_plan(argv=("vllm", "serve", "/m", "--api-key", "sk-live-123", "--hf-token=hf_x9"))
    doc = build_report(plan, classify_text(""), [], started_at=when, finished_at=when,
                       moved_aside=None, changed_factors=[], outcome={"ready": True})
    path = save_report(tmp_path, doc)
    [entry] = (path.parent / "history").glob("*.json")
    for written in (path, entry):
        text = written.read_text()
        assert "sk-live-123" not in text and "hf_x9" not in text
        assert written.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text())["plan"]["argv"][-3:] == [
        "--api-key", "<redacted>", "--hf-token=<redacted>"]


def test_previous_start_is_newest_with_a_kv_pool_and_names_bad_entries(tmp_path):
    save_report(tmp_path, report_at(25, "GPU KV cache size: 600,000 tokens"))
    save_report(tmp_path, report_at(26, "GPU KV cache size: 500,000 tokens"))
    save_report(tmp_path, report_at(27, "engine died before the KV line"))
    history = replica_state_dir(tmp_path, "s", "r0") / "history"
    (history / "2026-11-28T100000Z-1.json").write_text("{not json")
    prev, problems = previous_start(tmp_path, "s", "r0")
    assert prev is not None
    assert (prev.kv_cache_tokens, prev.started_at) == (500_000, "2026-11-26T10:00:00Z")
    assert len(problems) == 1 and "2026-11-28T100000Z-1.json" in problems[0]


def test_no_history_no_previous(tmp_path):
    assert previous_start(tmp_path, "s", "r0") == (None, [])


def test_history_is_pruned(tmp_path):
    history = replica_state_dir(tmp_path, "s", "r0") / "history"
    history.mkdir(parents=True)
    for i in range(HISTORY_KEEP + 5):
        (history / f"2026-01-01T00{i:04d}Z-1.json").write_text("{}")
    save_report(tmp_path, report_at(27, "x"))
    assert len(list(history.glob("*.json"))) == HISTORY_KEEP


@pytest.mark.parametrize(
    ("health", "answer", "stage", "detail"),
    [
        ((503, b""), None, "health", "/health answered 503"),
        ((200, b""), (500, b"engine dead"), "canary",
         "canary completion answered 500: engine dead"),
        ((200, b""), (200, b"<html>"), "canary", "canary answer is not a completion"),
        ((200, b""), (200, b'{"choices": []}'), "canary", "canary answer is not a completion"),
        ((200, b""), (200, b'{"choices": [{"text": 5}]}'), "canary", "canary answer has no text"),
        ((200, b""), (200, b'{"choices": [{"text": " hi"}]}'), "ready", " hi"),
    ],
)
def test_probe_table(health, answer, stage, detail):
    calls = []

    def fetch(url, body, timeout_s, headers):
        calls.append((url, body))
        return health if url.endswith("/health") else answer

    result = probe(Canary("http://h:1", "qwen", "Hello", 4), timeout_s=5, fetch=fetch)
    assert (result.stage, result.ready) == (stage, stage == "ready")
    assert result.detail.startswith(detail)
    if len(calls) == 2:
        assert json.loads(calls[1][1]) == {"model": "qwen", "prompt": "Hello", "max_tokens": 4,
                                           "temperature": 0}


def test_probe_connection_refused():
    def fetch(url, body, timeout_s, headers):
        raise ConnectionRefusedError(111, "Connection refused")

    result = probe(Canary("http://h:1", "q", "p", 1), timeout_s=1, fetch=fetch)
    assert not result.ready and result.detail == "/health: [Errno 111] Connection refused"


# ----- hostile state files (review of issue 10, defects 6 and 7) -----------------------------


def bounded(call, *, fifo: Path | None = None, timeout_s: float = 5.0):
    """Run `call` in a thread for at most `timeout_s`; a call still blocked (on a FIFO) is a
    failure, and the FIFO is then opened for writing and closed so the thread can end."""
    import os
    import threading

    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # re-raised in the test's thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        if fifo is not None:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(5)
        pytest.fail(f"still waiting after {timeout_s} s")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]


def test_previous_start_never_waits_on_a_fifo(tmp_path):
    """Review of issue 10, defect 6: history entries were read with read_text, so a FIFO in
    history/ hung the start (after the cache was prepared)."""
    import os

    save_report(tmp_path, report_at(25, "GPU KV cache size: 600,000 tokens"))
    fifo = replica_state_dir(tmp_path, "s", "r0") / "history" / "2026-11-30T100000Z-1.json"
    os.mkfifo(fifo)
    prev, problems = bounded(lambda: previous_start(tmp_path, "s", "r0"), fifo=fifo)
    assert prev is not None and prev.kv_cache_tokens == 600_000
    assert problems == [f"{fifo}: is a FIFO, not a regular file"]


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"log": []}',
                                  '{"log": {"kv_cache_tokens": true}, "started_at": "x"}',
                                  '{"log": {"kv_cache_tokens": 5}, "started_at": "x", '
                                  '"config_key": []}', "x" * (5 << 20)])
def test_previous_start_skips_any_shape_of_entry(tmp_path, text):
    """Deep nesting crashed the start (RecursionError: exit 3, after the cache was
    prepared); every other shape or size is a skipped entry too, with one line (issue 23: a
    KV pool of `true` and a config_key that is a list are no startup report either)."""
    save_report(tmp_path, report_at(25, "GPU KV cache size: 600,000 tokens"))
    bad = replica_state_dir(tmp_path, "s", "r0") / "history" / "2026-11-30T100000Z-1.json"
    bad.write_text(text)
    prev, problems = previous_start(tmp_path, "s", "r0")
    assert prev is not None and prev.kv_cache_tokens == 600_000
    [problem] = problems
    assert problem.startswith(f"{bad}: ") and len(problem) < 400


def test_a_linked_history_dir_is_refused_and_nothing_elsewhere_is_removed(tmp_path):
    """Review of issue 10, defect 7: a `history` symlink in the replica's state dir made the
    pruning of old entries unlink files wherever it pointed."""
    from rocmseat.errors import ConfigError

    victim = tmp_path / "victim"
    victim.mkdir()
    for i in range(HISTORY_KEEP + 5):
        (victim / f"2020-01-01T00{i:04d}Z-1.json").write_text("precious")
    directory = replica_state_dir(tmp_path / "state", "s", "r0")
    directory.mkdir(parents=True)
    (directory / "history").symlink_to(victim)
    with pytest.raises(ConfigError) as info:
        save_report(tmp_path / "state", report_at(27, "x"))
    assert info.value.message == (f"startup history dir {directory / 'history'} is a symlink to "
                                  f"{victim}: refusing to write, move or remove files through a "
                                  "link")
    assert len(list(victim.iterdir())) == HISTORY_KEEP + 5
    assert previous_start(tmp_path / "state", "s", "r0") == (
        None, [f"{directory / 'history'}: is a symlink: not read"])


@pytest.mark.parametrize("linked", ["seats", "seats/s", "seats/s/r0"])
def test_a_linked_state_dir_is_refused(tmp_path, linked):
    from rocmseat.errors import ConfigError

    state = tmp_path / "state"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (state / linked).parent.mkdir(parents=True, exist_ok=True)
    (state / linked).symlink_to(elsewhere)
    with pytest.raises(ConfigError, match=rf"^state dir {state / linked} is a symlink to "):
        save_report(state, report_at(27, "x"))
    assert list(elsewhere.iterdir()) == []


def test_a_world_writable_history_dir_is_refused(tmp_path):
    from rocmseat.errors import ConfigError

    history = replica_state_dir(tmp_path, "s", "r0") / "history"
    history.mkdir(parents=True)
    history.chmod(0o777)
    with pytest.raises(ConfigError, match="is writable by every user"):
        save_report(tmp_path, report_at(27, "x"))


def test_pruning_never_removes_what_is_not_a_regular_entry(tmp_path):
    import os

    history = replica_state_dir(tmp_path, "s", "r0") / "history"
    history.mkdir(parents=True)
    os.mkfifo(history / "2000-01-01T000000Z-1.json")
    (history / "2000-01-01T000001Z-1.json").mkdir()
    outside = tmp_path / "outside.json"
    outside.write_text("keep")
    (history / "2000-01-01T000002Z-1.json").symlink_to(outside)
    for i in range(HISTORY_KEEP):
        (history / f"2026-01-01T00{i:04d}Z-1.json").write_text("{}")
    save_report(tmp_path, report_at(27, "x"))
    names = sorted(os.listdir(history))
    assert "2000-01-01T000000Z-1.json" in names and "2000-01-01T000001Z-1.json" in names
    assert "2000-01-01T000002Z-1.json" not in names  # the link itself, never its target
    assert outside.read_text() == "keep"


def test_one_startup_summary_serialiser_for_the_report_and_the_gate(tmp_path):
    """Issue 16: launch's startup report ("log") and the gate's arm record ("startup") wrote a
    startup summary with different keys (the report had no per-rank memory, the arm "compile"
    for "components"). Both are StartupSummary.to_json now."""
    from rocmseat.speculation.gate.arms import ArmRecord, arm_json

    text = (FIXTURES / "logs" / "rocm-0.33-aot-hit-eagle3.log").read_text()
    summary = classify_text(text)
    doc = report_at(27, text)
    assert doc["log"] == summary.to_json()
    assert {"model_memory_gib_ranks", "checkpoint_gib", "components"} <= set(doc["log"])
    arm = ArmRecord("base", tmp_path / "seat.toml", tmp_path / "src.toml", 3, None,
                    startup=summary)
    assert arm_json(arm, tmp_path)["startup"] == doc["log"]


def test_the_node_policy_of_the_group_is_reported_read_only(tmp_path):
    from rocmseat.docmodel import parse_doc
    from rocmseat.launch.report_doc import StartupReportDoc
    from rocmseat.sysfs.partition import read_node_policy

    hive = FIXTURES / "sysfs" / "mi300x-hive"
    gpus = ("0000:0c:00.0", "0000:22:00.0")
    before = {p: p.read_bytes() for p in hive.rglob("pm_policy/*")}
    policy = read_node_policy(hive, gpus)
    assert policy == {gpu: {"compute_partition": "SPX", "memory_partition": "NPS1",
                            "soc_pstate": "soc_pstate_default", "xgmi_plpd": "plpd_default"}
                      for gpu in gpus}
    assert {p: p.read_bytes() for p in hive.rglob("pm_policy/*")} == before
    when = dt.datetime(2026, 12, 2, 10, 0, tzinfo=dt.UTC)
    doc = build_report(a_plan(), classify_text(""), [], started_at=when, finished_at=when,
                       moved_aside=None, changed_factors=[], outcome={"ready": True},
                       node_policy=policy)
    assert doc["node_policy"] == policy
    parse_doc(StartupReportDoc, json.loads(json.dumps(doc)), "startup.json")
    assert read_node_policy(FIXTURES / "sysfs" / "x99-r9700", ("0000:05:00.0",)) == {}
    assert "node_policy" not in report_at(27, "")
