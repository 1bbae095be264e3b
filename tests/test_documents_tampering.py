"""Issue 23, item 3, and issue 32, item 2: every document rocmseat reads back is a strict
model. Each of the ten is
written by its real writer, then tampered with (an unknown key, NaN, 1e400, a -1e11 or
year-10000 timestamp, a 400-digit integer, a wrong type, truncated JSON, a control character, a
file over the reader's limit) and read back by its real reader: refused, with one line naming
the file and (where the document has one) the key, never a traceback; the CLI that reads a
profile exits 2 (could not check).

A document without a timestamp or a float gets the same tampering at the nearest key of the
kind it has (a count, an address): every case must still be refused.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, REPO

SYSFS = FIXTURES / "sysfs"
NOW = dt.datetime(2026, 11, 25, 10, 0, tzinfo=dt.UTC)
RAW = "@@raw@@"  # a string value replaced by a raw JSON token (NaN, 1e400, 400 digits)
YEAR_10000_S = 253_402_300_800  # 10000-01-01T00:00:00Z in seconds since 1970
DIGITS_400 = "9" * 400


@dataclass(frozen=True)
class Doc:
    """Where each kind of value sits in one document (key paths), and its reader's limit."""

    float_key: tuple[str | int, ...]
    stamp_key: tuple[str | int, ...]
    stamp_is_text: bool  # an ISO stamp ("YYYY-MM-DDTHH:MM:SSZ") rather than epoch seconds
    int_key: tuple[str | int, ...]
    text_key: tuple[str | int, ...]
    limit_bytes: int
    wrong_key: tuple[str | int, ...] = ()  # a typed key for "wrong type" (default: int_key)


def _shown(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _put(doc: Any, loc: tuple[str | int, ...], value: Any) -> None:
    for part in loc[:-1]:
        doc = doc[part]
    doc[loc[-1]] = value


def _raw(doc: dict[str, Any], loc: tuple[str | int, ...], token: str) -> str:
    _put(doc, loc, RAW)
    return json.dumps(doc, indent=2).replace(f'"{RAW}"', token)


def tampered(doc: dict[str, Any], spec: Doc, case: str) -> tuple[str, str | None]:
    """(the tampered text, the key its refusal must name; None: the file as a whole)."""
    text = json.dumps(doc, indent=2)
    stamp_of = (lambda s: json.dumps(s)) if spec.stamp_is_text else (lambda s: s)
    if case == "unknown key":
        doc["surprise"] = 1
        return json.dumps(doc), "surprise"
    if case == "NaN":
        return _raw(doc, spec.float_key, "NaN"), _shown(spec.float_key)
    if case == "1e400":
        return _raw(doc, spec.float_key, "1e400"), _shown(spec.float_key)
    if case == "-1e11 timestamp":
        return _raw(doc, spec.stamp_key, "-1e11"), _shown(spec.stamp_key)
    if case == "year 10000":
        token = stamp_of("10000-01-01T00:00:00Z" if spec.stamp_is_text else str(YEAR_10000_S))
        return _raw(doc, spec.stamp_key, token), _shown(spec.stamp_key)
    if case == "400-digit integer":
        return _raw(doc, spec.int_key, DIGITS_400), _shown(spec.int_key)
    if case == "wrong type":
        # a number's place gets a string, a string's place a number
        wrong = spec.wrong_key or spec.int_key
        _put(doc, wrong, 5 if wrong == spec.wrong_key else "5")
        return json.dumps(doc), _shown(wrong)
    if case == "truncated":
        return text[: len(text) // 2], None
    if case == "control character":
        _put(doc, spec.text_key, "a\x1b[31mb\nc")
        return json.dumps(doc), _shown(spec.text_key)
    assert case == "huge"
    return text + " " * (spec.limit_bytes + 1), None


CASES = ["unknown key", "NaN", "1e400", "-1e11 timestamp", "year 10000", "400-digit integer",
         "wrong type", "truncated", "control character", "huge"]


def one_line(message: str, path: Path, key: str | None) -> None:
    assert "\n" not in message and "Traceback" not in message, message
    assert message.startswith(str(path)), message
    if key is not None:
        assert f"key '{key}'" in message, message


# --- 1. watch baselines ----------------------------------------------------------------------
BASELINE = Doc(float_key=("acceptance_length",), stamp_key=("learned_at_s",),
               stamp_is_text=False, int_key=("windows",), text_key=("key",),
               limit_bytes=1 << 20)


@pytest.mark.parametrize("case", CASES)
def test_a_tampered_baseline_is_refused_and_relearned(tmp_path, case):
    from rocmseat.watch.baseline import (
        baseline_path,
        learned_baseline,
        load_baseline,
        save_baseline,
    )

    path = baseline_path(tmp_path, "seat.r0")
    save_baseline(tmp_path, "seat.r0", learned_baseline(
        drafts=1e4, per_pos=(8e3, 6.4e3), accepted=14_400.0, windows=9, key="k",
        now_s=NOW.timestamp()))
    assert load_baseline(tmp_path, "seat.r0") == (load_baseline(tmp_path, "seat.r0")[0], None)
    assert load_baseline(tmp_path, "seat.r0")[0] is not None  # the writer's document reads back
    text, key = tampered(json.loads(path.read_text()), BASELINE, case)
    path.write_text(text)
    stored, problem = load_baseline(tmp_path, "seat.r0")
    assert stored is None  # re-learned, never judged against
    assert problem is not None and problem.endswith(": not used, re-learned")  # and said
    from rocmseat.errors import RocmseatError
    from rocmseat.watch.baseline import read_baseline

    with pytest.raises(RocmseatError) as info:
        read_baseline(tmp_path, "seat.r0")
    one_line(str(info.value), path, key)


# --- 2. the cache manifest -------------------------------------------------------------------
MANIFEST = Doc(float_key=("factors", "gpu_memory_utilization"), stamp_key=("created",),
               stamp_is_text=True, int_key=("factors", "tp"), text_key=("seat",),
               limit_bytes=1 << 20, wrong_key=("key",))


@pytest.mark.parametrize("case", CASES)
def test_a_tampered_cache_manifest_is_no_manifest(tmp_path, case):
    from rocmseat.cache.key import ConfigKey, digest_of
    from rocmseat.cache.layout import MANIFEST_NAME
    from rocmseat.cache.store import prepare, read_manifest

    factors = {"model": "target", "tp": 2, "gpu_memory_utilization": 0.9}
    result = prepare(tmp_path / "cache" / "r0", ConfigKey(digest_of(factors), factors),
                     seat_name="s", now=NOW)
    path = result.replica_dir / MANIFEST_NAME
    assert read_manifest(result.replica_dir) is not None
    text, key = tampered(json.loads(path.read_text()), MANIFEST, case)
    path.write_text(text)
    assert read_manifest(result.replica_dir) is None  # unkeyed: moved aside, never reused
    from rocmseat.cache.store import read_manifest_doc
    from rocmseat.errors import RocmseatError

    with pytest.raises(RocmseatError) as info:
        read_manifest_doc(result.replica_dir)
    one_line(str(info.value), path, key)


# --- 3. the error readings -------------------------------------------------------------------
ADDRESS = "0000:05:00.0"
READINGS = Doc(float_key=("devices", ADDRESS, 0, "counters", "aer.badtlp"),
               stamp_key=("devices", ADDRESS, 0, "first"), stamp_is_text=True,
               int_key=("devices", ADDRESS, 0, "counters", "aer.badtlp"),
               text_key=("boot_id",), limit_bytes=16 << 20)


@pytest.mark.parametrize("case", CASES)
def test_tampered_error_readings_are_one_line_and_a_window_since_boot(tmp_path, case):
    from rocmseat.preflight.windows import load_ring, save_readings, state_path

    root = SYSFS / "x99-r9700"
    boot = "0f0e0d0c-0b0a-4909-8807-060504030201"
    assert save_readings(tmp_path, root, boot, {ADDRESS: {"aer.badtlp": 3}},
                         NOW.strftime("%Y-%m-%dT%H:%M:%SZ")) is None
    path = state_path(tmp_path)
    assert load_ring(tmp_path, root, boot).ring is not None
    text, key = tampered(json.loads(path.read_text()), READINGS, case)
    path.write_text(text)
    loaded = load_ring(tmp_path, root, boot)
    assert loaded.ring is None and loaded.problem is not None
    one_line(loaded.problem, path, key)


# --- 4. preflight-sysfs.json ------------------------------------------------------------------
SYSFS_RESULT = Doc(float_key=("findings", 0, "data", "ratio"), stamp_key=("pair", 0),
                   stamp_is_text=True, int_key=("findings", 0, "data", "count"),
                   text_key=("findings", 0, "message"), limit_bytes=4 << 20,
                   wrong_key=("findings", 0, "severity"))


def _launch_seat(tmp_path: Path) -> tuple[Any, Any]:
    from rocmseat.launch import flow
    from rocmseat.launch.plan import plan_replica
    from rocmseat.placement.resolve import pick
    from tests.launch.test_plan import R9700, seat_from

    text = R9700.replace('profile = "../checks/x99-r9700.toml"',
                         f'profile = "{REPO / "checks" / "x99-r9700.toml"}"')
    seat = seat_from(tmp_path, text.replace("hip = true", "hip = false"))
    record = pick(flow.place_for_launch(seat, SYSFS / "x99-r9700",
                                        state_dir=tmp_path / "state").records, "r0")
    return seat, plan_replica(seat, record, numactl=None)


@pytest.mark.parametrize("case", CASES)
def test_a_tampered_saved_sysfs_result_is_said_and_the_checks_run_again(tmp_path, case):
    from rocmseat.launch import gate

    seat, plan = _launch_seat(tmp_path)
    env = {"INVOCATION_ID": "5f0c" * 8}
    gate.sysfs_gate(seat, plan, SYSFS / "x99-r9700", tmp_path / "state", environ=env,
                        say=lambda _: None)
    path = plan.placement.state_dir / "preflight-sysfs.json"
    doc = json.loads(path.read_text())
    doc["findings"][0]["data"] = {"ratio": 0.5, "count": 3}
    text, key = tampered(doc, SYSFS_RESULT, case)
    path.write_text(text)
    said: list[str] = []
    findings = gate.launch_gate(seat, plan, SYSFS / "x99-r9700", tmp_path / "state",
                                environ=env, say=said.append)
    assert {f.family for f in findings} >= {"pcie", "numa", "aer"}  # run again, not reused
    [line] = [x for x in said if str(path) in x]
    assert line.endswith("; running the sysfs preflight again")
    one_line(line, path, key)


# --- 5. the startup history, 6. startup.json ----------------------------------------------
REPORT = Doc(float_key=("log", "max_concurrency"), stamp_key=("started_at",), stamp_is_text=True,
             int_key=("log", "kv_cache_tokens"), text_key=("seat",), limit_bytes=4 << 20)


def _report(day: int) -> dict[str, Any]:
    from tests.launch.test_report import report_at

    return report_at(day, "GPU KV cache size: 600,000 tokens\nMaximum concurrency for 8,192 "
                          "tokens per request: 73.24x\n")


@pytest.mark.parametrize("case", CASES)
def test_a_tampered_history_entry_is_skipped_with_one_line(tmp_path, case):
    from rocmseat.launch.report import previous_start, replica_state_dir, save_report

    save_report(tmp_path, _report(24))
    newest = Path(save_report(tmp_path, _report(25))).parent / "history"
    [_, path] = sorted(newest.iterdir())
    text, key = tampered(json.loads(path.read_text()), REPORT, case)
    path.write_text(text)
    prev, problems = previous_start(tmp_path, "s", "r0")
    assert prev is not None and prev.started_at == "2026-11-24T10:00:00Z"  # the older entry
    [problem] = problems
    one_line(problem, path, key)
    assert replica_state_dir(tmp_path, "s", "r0") in path.parents


@pytest.mark.parametrize("case", CASES)
def test_a_tampered_startup_report_is_no_startup_fact(tmp_path, case):
    from rocmseat.launch.report import save_report
    from rocmseat.watch.remediate.service import startup_facts

    path = save_report(tmp_path, _report(25))
    assert startup_facts(tmp_path, "s", "r0")[1] == "2026-11-25T10:00:00Z"
    text, key = tampered(json.loads(path.read_text()), REPORT, case)
    path.write_text(text)
    assert startup_facts(tmp_path, "s", "r0") == (None, None)
    from rocmseat.docmodel import load_json_doc
    from rocmseat.errors import RocmseatError
    from rocmseat.launch.report_doc import StartupReportDoc
    from rocmseat.safeio import read_regular_text

    with pytest.raises(RocmseatError) as info:
        load_json_doc(StartupReportDoc, read_regular_text(path, limit_bytes=4 << 20),
                      str(path))
    one_line(str(info.value), path, key)


# --- 7. the node expectation profile (TOML, read by `rocmseat preflight --profile`) -----------
GOOD_PROFILE = ('name = "x99"\n[thresholds]\nreplay_fail = 100\nwindow_h = 24\n[[gpu]]\n'
                'pci_address = "05:00.0"\nspeed_gts = 8.0\nwidth = 8\nsocket = 0\n[[pair]]\n'
                'gpus = ["05:00.0", "09:00.0"]\n')
PROFILE_CASES: list[tuple[str, Callable[[str], str], str | None]] = [
    ("unknown key", lambda t: t.replace("socket = 0\n", "socket = 0\nslot = 3\n"),
     "gpu[0].slot"),
    ("unknown key in a pair", lambda t: t + "colour = \"red\"\n", "pair[0].colour"),
    ("NaN", lambda t: t.replace("speed_gts = 8.0", "speed_gts = nan"), "gpu[0].speed_gts"),
    ("1e400", lambda t: t.replace("speed_gts = 8.0", "speed_gts = 1e400"), "gpu[0].speed_gts"),
    ("-1e11 timestamp", lambda t: t.replace("window_h = 24", "window_h = -1e11"),
     "thresholds.window_h"),
    ("year 10000", lambda t: t.replace("window_h = 24", "window_h = 87600000"),
     "thresholds.window_h"),
    ("a date for a name", lambda t: t.replace('name = "x99"', "name = 2026-11-25"), "name"),
    ("400-digit integer", lambda t: t.replace("socket = 0", f"socket = {DIGITS_400}"),
     "gpu[0].socket"),
    ("wrong type", lambda t: t.replace("width = 8", 'width = "8"'), "gpu[0].width"),
    ("a note that is no string", lambda t: t.replace("socket = 0\n", "socket = 0\nnote = 1\n"),
     "gpu[0].note"),
    ("truncated", lambda t: t[: t.index("gpus")] + 'gpus = ["05:0', None),
    ("control character", lambda t: t.replace('name = "x99"', 'name = "x\\u001b[31m"'), "name"),
    ("a name of 10,000 characters", lambda t: t.replace('name = "x99"', f'name = "{"n" * 10_000}"'),
     "name"),
    ("huge", lambda t: t + "#" * (1 << 20), None),
]


@pytest.mark.parametrize(("case", "tamper", "key"), PROFILE_CASES,
                         ids=[c[0] for c in PROFILE_CASES])
def test_a_tampered_profile_exits_2_with_one_line(tmp_path, rocmseat_cli, case, tamper, key):
    from rocmseat.preflight.profile import load_profile

    path = tmp_path / "p.toml"
    path.write_text(GOOD_PROFILE)
    assert load_profile(path).gpus[0].link == (8.0, 8)  # the untouched profile loads
    path.write_text(tamper(GOOD_PROFILE))
    result = rocmseat_cli("preflight", "--profile", str(path), "--sysfs-root",
                          str(SYSFS / "x99-r9700"), "--state-dir", str(tmp_path / "state"))
    assert result.exit_code == 2, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    first = result.stderr.splitlines()[0]
    one_line(first.removeprefix("rocmseat: error: "), path, key)


# The readings' model is the one written without pydantic (every preflight run reads it: the
# start-up budget), so each of its own rules is shown here too.
READINGS_RULES = [
    (lambda d: d.pop("devices"), "devices", "missing"),
    (lambda d: d.update(schema="rocmseat.error-readings/v2"), "schema", "expected"),
    (lambda d: d["devices"].update({"05:00.0": []}), "devices.05:00.0", "not a PCI address"),
    (lambda d: d["devices"].update({ADDRESS: {}}), f"devices.{ADDRESS}", "a list of at most"),
    (lambda d: d["devices"][ADDRESS][0].pop("last"), f"devices.{ADDRESS}[0].last", "missing"),
    (lambda d: d["devices"][ADDRESS][0]["counters"].update({"a\tb": 1}),
     f"devices.{ADDRESS}[0].counters.a\\tb", "not a counter name"),
    (lambda d: d["devices"][ADDRESS][0]["counters"].update({"x": True}),
     f"devices.{ADDRESS}[0].counters.x", "whole number"),
    (lambda d: d["devices"][ADDRESS][0]["counters"].update({"x": 3.0}),
     f"devices.{ADDRESS}[0].counters.x", "whole number"),
    (lambda d: d["devices"][ADDRESS][0]["counters"].update({"x": -1}),
     f"devices.{ADDRESS}[0].counters.x", "a count from 0"),
    (lambda d: d["devices"][ADDRESS][0].update(first="1999-12-31T23:59:59Z"),
     f"devices.{ADDRESS}[0].first", "between 2000-01-01 and 2200-01-01"),
    (lambda d: d["devices"][ADDRESS][0].update(first="2026-02-30T00:00:00Z"),
     f"devices.{ADDRESS}[0].first", "no such date"),
    (lambda d: d.update(sysfs_root="x" * 5000), "sysfs_root", "longer than 4096"),
]


@pytest.mark.parametrize(("tamper", "key", "why"), READINGS_RULES,
                         ids=[r[1] + ": " + r[2] for r in READINGS_RULES])
def test_each_rule_of_the_readings_model(tmp_path, tamper, key, why):
    from rocmseat.preflight.windows import load_ring, save_readings, state_path

    root = SYSFS / "x99-r9700"
    save_readings(tmp_path, root, None, {ADDRESS: {"aer.badtlp": 3}},
                  NOW.strftime("%Y-%m-%dT%H:%M:%SZ"))
    path = state_path(tmp_path)
    doc = json.loads(path.read_text())
    tamper(doc)
    path.write_text(json.dumps(doc))
    loaded = load_ring(tmp_path, root, None)
    assert loaded.ring is None and loaded.problem is not None
    one_line(loaded.problem, path, key)
    assert why in loaded.problem


# --- the slow-spawn history, the canary's baselines, the cache's move intent ----------------
# None of them has a timestamp: the stamp cases land on a number that must stay in its bounds
# (a rate > 0, a share 0..1) or on a name (the intent's moved_to).
SPAWN = Doc(float_key=("keys", "k1", "4", 0), stamp_key=("keys", "k1", "4", 0),
            stamp_is_text=False, int_key=("keys", "k1", "4", 1),
            text_key=("keys", "k1", "4", 0), limit_bytes=1 << 20)


def _said(lines: list[str], what: str, path: Path, key: str | None) -> None:
    """One watchdog line naming the file (and the key) of a refused document."""
    assert len(lines) == 1, lines
    line = lines[0]
    assert "\n" not in line and "Traceback" not in line, line
    assert f" {what} error={str(path).replace(' ', '_')}" in line, line
    if key is not None:
        assert f"key_'{key.replace(' ', '_')}'" in line, line


@pytest.mark.parametrize("case", CASES)
def test_a_tampered_spawn_history_is_named_and_learned_afresh(tmp_path, case):
    from rocmseat.watch.baseline import baseline_path
    from rocmseat.watch.spawn import SpawnWatch

    SpawnWatch(state_dir=tmp_path, prefix="demo")._save("r0", {"k1": {4: [19.5, 20.0]}})
    path = baseline_path(tmp_path, "spawn-demo.r0")
    lines: list[str] = []
    assert SpawnWatch(state_dir=tmp_path, prefix="demo", log=lines.append)._load("r0") == {
        "k1": {4: [19.5, 20.0]}} and lines == []  # the writer's document reads back
    text, key = tampered(json.loads(path.read_text()), SPAWN, case)
    path.write_text(text)
    assert SpawnWatch(state_dir=tmp_path, prefix="demo", log=lines.append)._load("r0") == {}
    _said(lines, "spawn-history-refused", path, key)


CANARY = Doc(float_key=("rates", 0), stamp_key=("rates", 0), stamp_is_text=False,
             int_key=("prompts",), text_key=("key",), limit_bytes=1 << 20)


@pytest.mark.parametrize("case", CASES)
def test_tampered_canary_baselines_are_named_and_learned_afresh(tmp_path, case):
    from rocmseat.seat.canary_schema import Canary
    from rocmseat.watch.baseline import baseline_path
    from rocmseat.watch.canary_service import CanaryService

    lines: list[str] = []

    def service() -> CanaryService:
        return CanaryService(Canary(enabled=True, prompts=["a", "b"]), [],
                             statuses=lambda: [], set_alert=lambda *a: None,
                             state_dir=tmp_path, seat="demo", log=lines.append)

    service()._save("r0", "k1", [0.5, None])
    path = baseline_path(tmp_path, "canary-demo.r0")
    assert service()._load("r0", "k1") == [0.5, None] and lines == []
    text, key = tampered(json.loads(path.read_text()), CANARY, case)
    path.write_text(text)
    assert service()._load("r0", "k1") is None
    _said(lines, "canary-baseline-refused", path, key)


INTENT = Doc(float_key=("changed", 0, 1), stamp_key=("moved_to",), stamp_is_text=True,
             int_key=("changed", 0, 2), text_key=("moved_to",), limit_bytes=1 << 20,
             wrong_key=("new_key",))


@pytest.mark.parametrize("case", CASES)
def test_a_tampered_move_intent_is_named_and_dropped(tmp_path, case, caplog):
    from rocmseat.cache.key import ConfigKey, digest_of
    from rocmseat.cache.store import prepare
    from rocmseat.errors import RocmseatError

    live = tmp_path / "cache" / "r0"
    old = {"model": "target", "tp": 2}
    new = {"model": "target", "tp": 4}
    prepare(live, ConfigKey(digest_of(old), old), seat_name="s", now=NOW)

    class Killed(Exception):
        pass

    def kill(step: str) -> None:
        if step == "intent-written":
            raise Killed(step)

    with pytest.raises(Killed):  # the writer's intent, left by a kill before the first rename
        prepare(live, ConfigKey(digest_of(new), new), seat_name="s", now=NOW, crash_hook=kill)
    path = tmp_path / "cache" / ".r0.intent.json"
    text, key = tampered(json.loads(path.read_text()), INTENT, case)
    path.write_text(text)
    if case == "huge":  # not read at all: named, and the launch stops until it is looked at
        with pytest.raises(RocmseatError) as info:
            prepare(live, ConfigKey(digest_of(new), new), seat_name="s", now=NOW)
        one_line(info.value.message, path, None)
        return
    caplog.set_level("WARNING", logger="rocmseat.cache")
    result = prepare(live, ConfigKey(digest_of(new), new), seat_name="s", now=NOW)
    assert not path.exists() and result.state_before == "stale"  # judged afresh: moved aside
    named = [r.getMessage() for r in caplog.records if "judged afresh" in r.getMessage()]
    assert len(named) == 1, caplog.records
    one_line(named[0], path, key)
