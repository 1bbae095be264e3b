"""The whole loop on a real vLLM (CPU build): launch, key, cache store, watch, alert and
readiness (issues 7, 13, 16).

The scenarios run in file order on one seat and share its engine starts (issue 16: one engine
per model and scenario): the healthy replica is the one whose compile cache the store audit
reads and the one that dies; the relaunched one is the one whose drafter is swapped; the one
relaunched with good weights and a changed key is the one whose stale cache was moved aside.
Four engine starts in all; the kernel-log scenario (issue 25) watches the healthy replica's
engine through a second watchdog. `/ready/r0` is read like a load balancer would along the way (200
with a good drafter, 503 while stopped, 503 when the drafter dies, 200 again after a restart
with good weights) and judged in `test_ready_follows_the_drafter`. The seat serves with
`--api-key`: every READY is the canary authenticating, and the last scenario looks for the key
in every file the run wrote. Every wait is bounded and reports what it saw. Only rocmseat's CLI
drives the engine.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from rocmseat.cache.key import ConfigKey
from rocmseat.cache.store import prepare
from rocmseat.seat.load import load_seat
from tests.conftest import FIXTURES, REPO
from tests.e2e.harness import (
    API_KEY,
    ExporterSampler,
    Proc,
    Timeout,
    Traffic,
    Webhook,
    cli,
    complete,
    free_port,
    gauge,
    note,
    scrape,
    tail,
    tree_digest,
    wait_for,
)
from tests.e2e.test_ready_engine import healthz, judged_al, ready
from tests.e2e.world import INTERVAL_S, REPLICA, SERVED, WarmCache, World, dump_toml

pytestmark = pytest.mark.engine

X99 = FIXTURES / "sysfs" / "x99-r9700"
GPU = "0000:05:00.0"
LINES = (
    f"3,90001,8123000000,-;amdgpu {GPU}: ring gfx_0.0.0 timeout, signaled seq=57638, "
    "emitted seq=57641",
    f"3,90002,8123000010,-;amdgpu {GPU}:  Process cosmic-comp pid 2288 thread cosmic-com:cs0 "
    "pid 2316",
    f"3,90003,8123000020,-;amdgpu {GPU}: GPU reset begin!. Source:  1",
)

K = 3
# Alert names (rocmseat.watch.alerts): the drafter-dead signature and replica down.
ALERT_DRAFTER = "spec_drafter_dead"
ALERT_DOWN = "replica_down"
# How long to wait for the drafter alert at most. The assertion is not this clock: it is that
# the alert is active by the watchdog's 2nd evaluation with drafts flowing (ExporterSampler).
ALERT_BOUND_S = 3 * INTERVAL_S + 10


def _json(done: Any, what: str) -> Any:
    assert done.stdout.strip(), f"{what}: no output (exit {done.returncode}):\n{done.stderr}"
    try:
        return json.loads(done.stdout)
    except ValueError as exc:
        raise AssertionError(f"{what}: not JSON ({exc}):\n{done.stdout[-2000:]}") from exc


def _replica_entry(doc: Any) -> dict[str, Any]:
    """The r0 entry of a `watch --once --json` document."""
    replicas = doc.get("replicas", doc)
    if isinstance(replicas, dict):
        replicas = [dict(v, name=k) for k, v in replicas.items() if isinstance(v, dict)]
    for entry in replicas:
        if REPLICA in str(entry.get("replica", entry.get("name", ""))):
            return dict(entry)
    raise AssertionError(f"no replica {REPLICA} in watch JSON: {json.dumps(doc)[:2000]}")


def _alert_active(world: World, alert: str) -> float | None:
    return gauge(world.exporter(), "rocmseat_alert_active", replica=REPLICA, alert=alert)


def _stamp(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _webhook_alert(world: World, alert: str, state: str,
                   after: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The first Alertmanager v2 alert for `alert` on this replica in the state asked for
    (received after `after`, if given), checked field by field.

    v2 POST /api/v2/alerts bodies are JSON lists; an alert is firing while it has no endsAt
    (or one in the future) and resolved once endsAt is present and not in the future.
    """
    seen_after = after is None
    now = dt.datetime.now(dt.UTC)
    for body in list(world.webhook.bodies):
        assert isinstance(body, list), f"webhook body is not an Alertmanager v2 list: {body}"
        for a in body:
            if a is after:
                seen_after = True
                continue
            labels = a.get("labels", {})
            if not seen_after or labels.get("alertname") != alert:
                continue
            assert labels.get("replica") == REPLICA, f"replica label: {a}"
            assert labels.get("severity") in {"warning", "critical"}, a
            starts = _stamp(a["startsAt"])
            ends = _stamp(a["endsAt"]) if a.get("endsAt") else None
            if state == "firing" and (ends is None or ends > now):
                return cast(dict[str, Any], a)  # the received object: `after` is by identity
            if state == "resolved" and ends is not None and ends <= now:
                assert ends >= starts, f"resolved before it started: {a}"
                return cast(dict[str, Any], a)
    return None


def _report(world: World) -> dict[str, Any]:
    path = world.startup_report
    assert path.is_file(), f"no startup report at {path}"
    report = json.loads(path.read_text())
    assert report.get("schema") == "rocmseat.startup/v1", report
    return dict(report)


def _component_outcomes(report: dict[str, Any]) -> dict[str, str]:
    """component (backbone, draft_model ...) -> fresh_compile | cache_load | load_failure."""
    comps = report.get("log", {}).get("components", {})
    return {name: c["outcome"] for name, c in comps.items()}


# ----- /ready/r0 as a load balancer reads it (issue 13) ----------------------------------------
READY_SCENARIO = "ready_follows_the_drafter"
VERDICT_BOUND_S = 60.0  # traffic flows in the meantime; the watch interval is 2 s


@dataclass
class ReadySeen:
    """What one phase of the readiness scenario saw (judged in test_ready_follows_the_drafter,
    so a wrong answer fails that scenario, not the one it rode along with)."""

    body: str | None = None  # the matching answer, None: never seen within the bound
    seconds: float = 0.0
    acceptance_length: float | None = None
    answers: list[tuple[int, str]] = field(default_factory=list)
    healthz: int | None = None
    traffic_errors: list[str] = field(default_factory=list)
    extra: str = ""  # what the scenario it rode along with adds to the note


READY: dict[str, ReadySeen] = {}


def observe_ready(world: World, phase: str, status: int, needle: str, *, traffic: bool,
                  evidence: Callable[[], bool] = lambda: True,
                  bound_s: float = VERDICT_BOUND_S) -> ReadySeen:
    """Wait (bounded, traffic flowing if asked) until /ready/r0 answers `status` with `needle`
    in its line and `evidence` holds (a verdict from judged drafts, not an idle replica);
    record what was seen under `phase`, matched or not."""
    seen = READY[phase] = ReadySeen()
    started = time.monotonic()

    def check() -> str | None:
        code, body = ready(world)
        if not seen.answers or seen.answers[-1] != (code, body):
            seen.answers.append((code, body))
        return body if code == status and needle in body and evidence() else None

    def wait() -> None:
        try:
            seen.body = wait_for(f"/ready/r0 {status} {needle}", check, bound_s, lambda: "")
        except Timeout:
            seen.body = None

    if traffic:
        with Traffic(world.engine_port, SERVED) as flowing:
            wait()
        seen.traffic_errors = flowing.errors[:3]
    else:
        wait()
    seen.seconds = time.monotonic() - started
    seen.acceptance_length = judged_al(world)
    seen.healthz = healthz(world)
    return seen


def _good_drafter(world: World, demo_models: Path) -> None:
    """The session's drafter weights (the target's own) back into this world's drafter."""
    shutil.copyfile(demo_models / "drafter" / "model.safetensors",
                    world.models / "drafter" / "model.safetensors")


# ----- no-op invalidation: refused before any engine starts ------------------------------------
def test_noop_invalidation_refused(world: World) -> None:
    seat = world.write_seat("noop-seat.toml")
    text = seat.read_text().replace("[env]\n", "[env]\nVLLM_CACHE_ROOT = \"/var/tmp/elsewhere\"\n")
    seat.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith("VLLM_CACHE_ROOT"))
    done = cli("launch", seat, "--replica", REPLICA, env=world.env(), timeout_s=120)
    assert done.returncode != 0, f"launch accepted a hard-coded VLLM_CACHE_ROOT:\n{done.stdout}"
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("rocmseat: error")]
    assert len(errors) == 1, done.stderr
    assert "VLLM_CACHE_ROOT" in errors[0] and f":{line}" in errors[0], done.stderr
    cache = world.cache_root / REPLICA
    assert not cache.exists() or not any(cache.iterdir()), "a refused seat touched the cache"
    note("noop_invalidation_refused", f"launch exit {done.returncode}: {errors[0]}")


# ----- healthy ----------------------------------------------------------------------------------
def test_healthy(world: World, warm_cache: WarmCache) -> None:
    seat = world.write_seat()
    proc = world.launch(seat)
    assert world.notify is not None and any("READY=1" in m for m in world.notify.messages)
    # The seat serves with --api-key: the server refuses a client without it, so READY (the
    # canary's completion answered) means the canary authenticated.
    bare = httpx.post(f"http://127.0.0.1:{world.engine_port}/v1/completions", timeout=30,
                      json={"model": SERVED, "prompt": "the", "max_tokens": 1})
    assert bare.status_code == 401, (bare.status_code, bare.text[:200])
    world.healthy_texts = complete(world.engine_port, SERVED)
    assert all(t.strip() for t in world.healthy_texts), world.healthy_texts

    # Drafts keep flowing while `watch --once` takes its window.
    with Traffic(world.engine_port, SERVED) as traffic:
        done = cli("watch", seat, "--once", "--json", env=world.env(), timeout_s=120)
    assert not traffic.errors, traffic.errors[:3]
    doc = _json(done, "rocmseat watch --once --json")
    assert doc.get("schema", "").startswith("rocmseat."), doc
    entry = _replica_entry(doc)
    window = entry.get("window") or {}
    al = window.get("acceptance_length")
    assert al is not None, f"no acceptance length in the window: {entry}"
    assert abs(al - (1 + K)) <= 0.2, f"acceptance length {al}, expected {1 + K}: {entry}"
    assert entry.get("up") is True and entry.get("alerts") == [], entry
    assert done.returncode == 0, f"watch --once exit {done.returncode}: {done.stderr}"

    outcomes = _component_outcomes(_report(world))
    # An empty cache: both the backbone and the drafter compiled.
    assert outcomes == {"backbone": "fresh_compile", "draft_model": "fresh_compile"}, outcomes
    assert proc.alive()
    # this compile is the session's warm cache for the starts that do not test one (WarmCache)
    warm_cache.capture(world, "healthy")
    note("healthy", f"READY=1 after {world.last_ready_s:.0f} s (served with --api-key; a "
         "completion without it: 401); watch --once: acceptance length "
         f"{al} over {window.get('drafts')} drafts, alerts []; startup report {outcomes}")


# ----- the compile cache store, read while the healthy replica serves -------------------------
def test_engine_compiles_into_the_store(world: World) -> None:
    """The real engine compiled into the replica's store, cache-audit sees the running server
    use it, and a changed draft length moves its compiled graphs aside intact."""
    proc = world.running()
    assert proc is not None, "the healthy scenario must run first (its replica serves here)"
    seat = world.root / "seat.toml"
    engines = world.engine_pids(proc)
    assert len(engines) == 1, f"expected one engine under rocmseat launch, found {engines}"
    done = cli("cache-audit", seat, "--json", env=world.env())
    [audited] = _json(done, "rocmseat cache-audit --json")["seats"]
    [entry] = [r for r in audited["replicas"] if r["replica"] == REPLICA]
    live = entry["cache"]
    assert live is not None and live["state"] == "current", entry
    assert live["in_use"]["state"] == "yes" and engines[0] in live["in_use"]["pids"], live
    assert done.returncode == 0, done.stderr

    # A changed draft length, on a copy of the store (the serving replica keeps its own): the
    # key launch would start under (`rocmseat key`) moves the compiled graphs aside intact.
    copy = world.root / "store-copy" / REPLICA
    shutil.copytree(world.cache_root / REPLICA, copy, symlinks=True)
    compiled = tree_digest(copy)
    assert any("torch_compile_cache" in name for name in compiled), sorted(compiled)[:20]
    k2 = world.write_seat("seat-k2.toml", num_speculative_tokens=2)
    key_doc = _json(cli("key", k2, "--json", env=world.env()), "rocmseat key --json")
    assert key_doc["unknown"] == {}, key_doc["unknown"]
    moved = prepare(copy, ConfigKey(key_doc["key"], key_doc["factors"]),
                    seat_name=load_seat(k2).name)
    assert moved.moved_aside is not None
    assert [c.describe() for c in moved.changed] == ["speculative.num_speculative_tokens: 3 -> 2"]
    assert tree_digest(moved.moved_aside) == compiled
    note("engine_compiles_into_the_store",
         f"cache-audit: {REPLICA} current, in use by engine pid {engines[0]}; K 3 -> 2 moves "
         f"all {len(compiled)} files aside intact (sizes + sha256 equal)")


# ----- the kernel log, live, while the healthy replica serves ------------------------------------
def _kernel_watch_seat(world: World, name: str = "r9700-watch",
                       extra: dict[str, Any] | None = None) -> Path:
    doc = tomllib.loads((REPO / "launchers" / "r9700-mxfp4-dflash.toml").read_text())
    doc["name"] = "r9700-on-fixture"
    doc["state_dir"] = str(world.root / f"{name}-state")
    doc["cache_root"] = str(world.root / f"{name}-cache")
    doc["serve"]["port_base"] = world.engine_port  # r0 = the real CPU engine
    doc.update(extra or {})
    # beside the scenarios' own seats, not among them: every seat there serves with the API key
    # (test_api_key_never_in_a_log_or_state_file finds it in each), this one watches only
    path = world.root / "kernel-watch" / f"{name}.toml"
    path.parent.mkdir(exist_ok=True)
    text = dump_toml(doc).replace('"../checks/x99-r9700.toml"',
                                  f'"{REPO / "checks" / "x99-r9700.toml"}"')
    path.write_text(text)
    return path


def _evaluations(port: int) -> float:
    return gauge(scrape(port), "rocmseat_watch_evaluations_total") or 0.0


def _ring_alert(hook: Webhook) -> dict[str, Any] | None:
    for alert in hook.alerts():
        labels = alert.get("labels", {})
        if labels.get("alertname") == "gpu_ring_timeout" and not alert.get("endsAt"):
            return alert
    return None


def test_a_kernel_line_alerts_the_serving_replica_within_one_interval(world: World) -> None:
    """The kernel log, live (issue 25), on the healthy replica's engine: a line written to a
    test kmsg source while the replica serves -> the alert within one interval, naming the GPU
    and the replica. A CPU replica holds no PCI GPU, so a second watchdog watches the R9700
    seat (launchers/r9700-mxfp4-dflash.toml) placed on the x99-r9700 fixture sysfs tree (as a
    monitoring host does for records it cannot read itself), with its port base moved to the
    port the real CPU engine serves on: the placement (rocmseat.placement, from the fixture's
    topology) gives r0 the pair 0000:05:00.0 + 0000:09:00.0, and r0's /metrics is the real
    engine's; r1 has no engine (down). It sends to a webhook of its own (its r1 is down). The
    kernel log is a regular file named by ROCMSEAT_KMSG; the lines appended are real corpus
    lines (tests/fixtures/kernel-log/corpus/cosmic-epoch-3764.log) re-addressed to r0's GPU, in
    the /dev/kmsg record format."""
    seat = world.write_seat()
    world.running() or world.launch(seat)
    hook = Webhook()
    hook.start()
    kmsg = world.root / "kmsg"
    kmsg.write_text("6,90000,8000000000,-;amdgpu 0000:05:00.0: amdgpu: SMU is resumed "
                    "successfully!\n")
    exporter = free_port()
    watch = Proc(["watch", _kernel_watch_seat(world), "--sysfs-root", X99, "--interval",
                  str(INTERVAL_S), "--exporter-listen", f"127.0.0.1:{exporter}",
                  "--webhook", hook.url],
                 world.root / "watch-kernel.log", world.env(ROCMSEAT_KMSG=str(kmsg)))
    try:
        wait_for("the watchdog's kernel follower",
                 lambda: "kernel-events following" in watch.log.read_text(), 90,
                 lambda: tail(watch.log))
        with Traffic(world.engine_port, SERVED) as traffic:
            wait_for("the replica to serve", lambda: traffic.done >= 1, 120,
                     lambda: f"{traffic.errors[-3:]}\n{tail(watch.log)}")
            wait_for("an evaluation", lambda: _evaluations(exporter) >= 2, 30,
                     lambda: tail(watch.log))
            before = _evaluations(exporter)
            written = time.monotonic()
            with kmsg.open("a") as f:
                f.write("\n".join(LINES) + "\n")
            wait_for("the gpu_ring_timeout alert", lambda: _ring_alert(hook) is not None,
                     6 * INTERVAL_S, lambda: f"{hook.alerts()[-4:]}\n{tail(watch.log)}")
            latency_s = time.monotonic() - written
            seen_at = _evaluations(exporter)
            served = traffic.done
        alert = _ring_alert(hook)
        assert alert is not None
        labels, notes = alert["labels"], alert["annotations"]
        assert labels["replica"] == "r0" and labels["severity"] == "critical", alert
        assert notes["device"] == GPU, alert
        assert notes["event"].startswith(f"ring gfx_0.0.0 timeout on {GPU} at "), alert
        # within one interval: the evaluation in flight when the line was written, or the next
        assert seen_at - before <= 2, (before, seen_at)
        resets = [a for a in hook.alerts()
                  if a["labels"].get("alertname") == "gpu_reset"]
        assert resets and resets[0]["labels"]["replica"] == "r0"
        active = gauge(scrape(exporter), "rocmseat_alert_active", replica="r0",
                       alert="gpu_ring_timeout")
        assert active == 1.0
        note("a_kernel_line_alerts_the_serving_replica_within_one_interval",
             f"gpu_ring_timeout on r0 ({GPU}) {latency_s:.2f} s after the line "
             f"was written (interval {INTERVAL_S:g} s; evaluations {before:.0f} -> "
             f"{seen_at:.0f}); {served} completions served meanwhile")
    finally:
        watch.stop(grace_s=30)
        hook.stop()


# issue 34 item 6, re-addressed to r0's pair on the x99 tree (0000:05:00.0 + 0000:09:00.0):
# amdgpu_device.c amdgpu_device_health_check() "device lost from bus!" (6.10+) on one GPU, then
# amdgpu_do_asic_reset() "GPU reset succeeded, trying to resume" on the other; then a fatal AER
# on 05:00.0's root port 0000:00:02.0 (corpus/rocm-32.log, aer.c aer_print_error(), re-addressed)
OTHER_GPU = "0000:09:00.0"
ROOT_PORT = "0000:00:02.0"
LOST = f"3,91001,9000000000,-;amdgpu {GPU}: amdgpu: device lost from bus!"
OTHER_RESET_OK = (f"6,91002,9001000000,-;amdgpu {OTHER_GPU}: amdgpu: GPU reset succeeded, "
                  "trying to resume")
AER_ROOT_PORT = (
    f"3,91003,9002000000,-;pcieport {ROOT_PORT}: PCIe Bus Error: severity=Uncorrected (Fatal), "
    "type=Transaction Layer, id=0010(Receiver ID)",
    f"3,91004,9002000100,-;pcieport {ROOT_PORT}:    [18] Malformed TLP          (First)",
)


def _firing(hook: Webhook, name: str) -> dict[str, Any] | None:
    return next((a for a in hook.alerts() if a.get("labels", {}).get("alertname") == name
                 and not a.get("endsAt")), None)


def test_a_tp2_replicas_lost_gpu_stays_lost_and_remediation_holds(world: World) -> None:
    """Issue 34 item 6 on the healthy replica's engine, watched as the TP2 replica r0 of the
    R9700 seat placed on the x99 fixture (as the kernel-line scenario above; remediation on,
    its restart command a marker file): "device lost from bus!" on 05:00.0 fires `gpu_lost` and
    the remediator says the hold; "GPU reset succeeded" on the replica's other GPU 09:00.0
    resolves nothing (before: it resolved `gpu_lost`, and remediation was free to restart a
    replica whose GPU is gone); a fatal AER naming 05:00.0's root port fires `gpu_aer_fatal` on
    r0 within one interval (before: dropped, it names no GPU). The restart command never runs."""
    seat = world.write_seat()
    world.running() or world.launch(seat)
    started = time.monotonic()  # the scenario's own time: the engine is the module's
    marker = world.root / "kernel-hold-restarted"
    seat_path = _kernel_watch_seat(world, "r9700-hold", {"remediate": {
        "mode": "on",
        "restart_command": [sys.executable, "-c",
                            "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('ran')",
                            str(marker)]}})
    hook = Webhook()
    hook.start()
    kmsg = world.root / "kmsg-hold"
    kmsg.write_text("6,90000,8000000000,-;amdgpu 0000:05:00.0: amdgpu: SMU is resumed "
                    "successfully!\n")
    exporter = free_port()
    watch = Proc(["watch", seat_path, "--sysfs-root", X99, "--interval", str(INTERVAL_S),
                  "--exporter-listen", f"127.0.0.1:{exporter}", "--webhook", hook.url],
                 world.root / "watch-hold.log", world.env(ROCMSEAT_KMSG=str(kmsg)))

    def seen() -> str:
        return f"{hook.alerts()[-4:]}\n{tail(watch.log)}"

    def write(*lines: str) -> None:
        with kmsg.open("a") as f:
            f.write("\n".join(lines) + "\n")

    def active(alert: str) -> float | None:
        return gauge(scrape(exporter), "rocmseat_alert_active", replica="r0", alert=alert)

    try:
        following = wait_for("the watchdog's kernel follower", lambda: next(
            (ln for ln in watch.log.read_text().splitlines() if "kernel-events following" in ln),
            None), 90, seen)
        assert "gpus=4 bridges=" in following and "bridges=0" not in following, following
        wait_for("an evaluation", lambda: _evaluations(exporter) >= 2, 30, seen)
        written = time.monotonic()
        write(LOST)
        lost = wait_for("gpu_lost", lambda: _firing(hook, "gpu_lost"), 6 * INTERVAL_S, seen)
        lost_s = time.monotonic() - written
        assert lost["labels"]["replica"] == "r0" and lost["annotations"]["device"] == GPU, lost
        held = wait_for("the remediator's hold", lambda: next(
            (ln for ln in watch.log.read_text().splitlines() if " held why=gpu_lost" in ln),
            None), 6 * INTERVAL_S, seen)
        assert "replica=r0" in held and GPU in held, held
        # the replica's other GPU comes back: nothing of 05:00.0's loss is resolved
        write(OTHER_RESET_OK)
        after = _evaluations(exporter)
        wait_for("three evaluations after the other GPU's reset",
                 lambda: _evaluations(exporter) >= after + 3, 10 * INTERVAL_S, seen)
        assert active("gpu_lost") == 1.0
        assert [a for a in hook.alerts() if a["labels"]["alertname"] == "gpu_lost"
                and a.get("endsAt")] == []
        assert "hold-lifted" not in watch.log.read_text()
        # a fatal AER naming the root port above 05:00.0
        before = _evaluations(exporter)
        written = time.monotonic()
        write(*AER_ROOT_PORT)
        aer = wait_for("gpu_aer_fatal", lambda: _firing(hook, "gpu_aer_fatal"), 6 * INTERVAL_S,
                       seen)
        aer_s = time.monotonic() - written
        seen_at = _evaluations(exporter)
        assert aer["labels"]["replica"] == "r0" and aer["labels"]["severity"] == "critical"
        assert aer["annotations"]["device"] == ROOT_PORT, aer
        assert f"(upstream of {GPU})" in aer["annotations"]["event"], aer
        assert seen_at - before <= 2, (before, seen_at)  # within one interval
        assert active("gpu_lost") == 1.0 and active("gpu_aer_fatal") == 1.0
        assert gauge(scrape(exporter), "rocmseat_alert_active", replica="r1",
                     alert="gpu_aer_fatal") in (None, 0.0)
        assert not marker.exists(), "remediation ran its restart command"
        note("a_tp2_replicas_lost_gpu_stays_lost_and_remediation_holds",
             f"gpu_lost on r0 ({GPU}) {lost_s:.2f} s after the line; held by the remediator; "
             f"still firing {_evaluations(exporter) - after:.0f} evaluations after 'GPU reset "
             f"succeeded' on {OTHER_GPU}; gpu_aer_fatal from root port {ROOT_PORT} "
             f"{aer_s:.2f} s after the line (evaluations {before:.0f} -> {seen_at:.0f}, "
             f"interval {INTERVAL_S:g} s); {time.monotonic() - started:.0f} s beside the running "
             "engine")
    finally:
        watch.stop(grace_s=30)
        hook.stop()


# ----- replica dies -----------------------------------------------------------------------------
def test_replica_dies_then_resolves(world: World) -> None:
    seat = world.write_seat()
    proc = world.running() or world.launch(seat)
    world.start_watch(seat)
    wait_for("replica_down inactive while the replica serves",
             lambda: _alert_active(world, ALERT_DOWN) == 0.0, 30, world.seen)
    good = observe_ready(world, "good", 200, "ready", traffic=True,
                         evidence=lambda: (judged_al(world) or 0.0) >= 3.5)
    good.extra = f"READY after {world.last_ready_s:.0f} s"

    engines = world.engine_pids(proc)
    assert len(engines) == 1, f"expected one engine under rocmseat launch, found {engines}"
    os.kill(engines[0], signal.SIGKILL)
    killed = time.monotonic()
    rc = proc.wait_exit(120)
    exited_s = time.monotonic() - killed
    assert rc != 0, f"rocmseat launch exited 0 after its engine was killed:\n{tail(proc.log)}"

    wait_for("replica_down firing (exporter)", lambda: _alert_active(world, ALERT_DOWN) == 1.0,
             60, world.seen)
    fired_s = time.monotonic() - killed
    firing = wait_for("replica_down firing (webhook)",
                      lambda: _webhook_alert(world, ALERT_DOWN, "firing"), 30, world.seen)
    observe_ready(world, "stopped", 503, "replica_down", traffic=False, bound_s=30)

    world.launch(seat)
    wait_for("replica_down resolved (exporter)", lambda: _alert_active(world, ALERT_DOWN) == 0.0,
             60, world.seen)
    resolved = wait_for("replica_down resolved (webhook)",
                        lambda: _webhook_alert(world, ALERT_DOWN, "resolved", after=firing),
                        30, world.seen)
    assert resolved["startsAt"] == firing["startsAt"], (firing, resolved)
    note("replica_dies_then_resolves",
         f"kill -9 engine pid {engines[0]}: launch exit {rc} after {exited_s:.1f} s; replica_down "
         f"firing on the exporter {fired_s:.1f} s after the kill and on the webhook; relaunch "
         f"READY after {world.last_ready_s:.0f} s; resolved on both (webhook startsAt "
         f"{resolved['startsAt']} endsAt {resolved['endsAt']}, labels {resolved['labels']})")


# ----- drafter lost its mind --------------------------------------------------------------------
def test_drafter_lost_its_mind(world: World) -> None:
    assert world.healthy_texts, "the healthy scenario must run first (it records the completions)"
    seat = world.write_seat()
    key_before = cli("key", seat, "--json", env=world.env())
    assert key_before.returncode == 0, key_before.stderr

    drafter, other = world.models / "drafter", world.models / "drafter-other"
    shutil.copyfile(other / "model.safetensors", drafter / "model.safetensors")
    key_after = cli("key", seat, "--json", env=world.env())
    assert key_after.returncode == 0, key_after.stderr
    # Same shapes, same config, same safetensors header: the key rightly does not change.
    assert _json(key_after, "key")["unknown"] == {}, key_after.stdout
    assert _json(key_after, "key") == _json(key_before, "key")

    world.stop_replica()
    world.launch(seat)
    world.start_watch(seat)
    wait_for("the watchdog sees the relaunched replica, drafter alert inactive",
             lambda: _alert_active(world, ALERT_DOWN) == 0.0
             and _alert_active(world, ALERT_DRAFTER) == 0.0, 60, world.seen)
    with ExporterSampler(world.exporter_port, REPLICA, ALERT_DRAFTER) as sampler:
        # the evaluation current as traffic begins, seen by the test itself: the drafting
        # evaluations are counted from it even if the poll thread is starved (a loaded host)
        assert sampler.observe(world.exporter()) == 0.0, sampler.shown()
        started = time.monotonic()
        texts = complete(world.engine_port, SERVED)
        assert texts == world.healthy_texts, "greedy output changed with the drafter"
        with Traffic(world.engine_port, SERVED) as traffic:
            wait_for(f"{ALERT_DRAFTER} firing (exporter)",
                     lambda: sampler.observe(world.exporter()) == 1.0, ALERT_BOUND_S,
                     lambda: f"{world.seen()}\nexporter evaluations:\n{sampler.shown()}")
            since_traffic_s = time.monotonic() - started
            hook = wait_for(f"{ALERT_DRAFTER} firing (webhook)",
                            lambda: _webhook_alert(world, ALERT_DRAFTER, "firing"), 30,
                            world.seen)
    assert not traffic.errors, traffic.errors[:3]
    # the seat's one replica stays in rotation with its alert: the seat's floor ([watch]
    # min_ready, docs/monitoring.md) never takes the last replica out for a drafter verdict
    observe_ready(world, "dead", 200, "alert spec_drafter_dead", traffic=True)
    # "Within two intervals" of drafts flowing, counted in the watchdog's own evaluations.
    windows, latency_s = sampler.windows_until_firing()
    assert 1 <= windows <= 2, (f"{ALERT_DRAFTER} fired on drafting evaluation {windows}, "
                               f"expected the 1st or 2nd:\n{sampler.shown()}")
    al = gauge(world.exporter(), "rocmseat_spec_acceptance_length", replica=REPLICA)
    note("drafter_lost_its_mind",
         f"key unchanged ({_digest(key_after)[:12]}); 3 greedy completions byte-identical; "
         f"{ALERT_DRAFTER} active on the exporter on drafting evaluation {windows} "
         f"({latency_s if latency_s is None else round(latency_s, 1)} s after the first "
         f"record with drafts, {since_traffic_s:.1f} s after traffic began; interval "
         f"{INTERVAL_S:.0f} s); webhook labels {hook['labels']} startsAt {hook['startsAt']} "
         f"(no endsAt: firing); exporter acceptance length "
         f"{al if al is None else round(al, 3)}")


def _digest(done: Any) -> str:
    return str(_json(done, "rocmseat key --json")["key"])


# ----- stale cache ------------------------------------------------------------------------------
def test_stale_cache_moved_aside(world: World, demo_models: Path) -> None:
    world.stop_replica()
    _good_drafter(world, demo_models)  # the drafter recovers (readiness), the key unchanged by it
    cache = world.cache_root / REPLICA
    assert cache.is_dir(), f"no replica cache at {cache}"
    before = tree_digest(cache)
    assert any("torch_compile_cache" in p for p in before), sorted(before)[:20]
    siblings_before = set(world.cache_root.glob(f"{REPLICA}.stale-*"))

    seat = world.write_seat(feature="b")
    world.launch(seat)
    # The restart clears the dead-drafter verdict (a replica out of rotation drafts nothing,
    # so only a restart can): ready before any traffic, and still ready on its own drafts.
    restarted = observe_ready(world, "restarted", 200, "ready", traffic=False, bound_s=30)
    restarted.extra = f"READY after {world.last_ready_s:.0f} s"
    observe_ready(world, "recovered", 200, "ready", traffic=True,
                  evidence=lambda: (judged_al(world) or 0.0) >= 3.5)
    moved = set(world.cache_root.glob(f"{REPLICA}.stale-*")) - siblings_before
    assert len(moved) == 1, f"expected one moved-aside cache, found {sorted(moved)}"
    aside = moved.pop()
    assert tree_digest(aside) == before, "the moved-aside cache lost or changed files"

    report = _report(world)
    assert report["cache"]["moved_aside"] == str(aside), report["cache"]
    assert any("E2E_FEATURE" in f for f in report["cache"]["changed_factors"]), report["cache"]
    outcomes = _component_outcomes(report)
    assert outcomes == {"backbone": "fresh_compile", "draft_model": "fresh_compile"}, report["log"]
    # rocmseat's own judgement of the start: the invalidation did not hit a warm cache.
    judged = {f["check_id"]: f["severity"] for f in report.get("findings", [])}
    assert judged.get("launch.cache.fresh_after_invalidation") == "ok", report.get("findings")
    note("stale_cache_moved_aside",
         f"E2E_FEATURE a -> b: {aside.name} keeps all {len(before)} files (sizes + sha256 equal); "
         f"changed {report['cache']['changed_factors']}; startup report {outcomes}; "
         f"READY after {world.last_ready_s:.0f} s")
    world.stop_replica()


# ----- readiness followed the drafter all along (issue 13) -------------------------------------
def test_ready_follows_the_drafter(world: World) -> None:
    """`/ready/r0`: 200 with a good drafter, 503 while the replica is stopped, 200 with the
    `spec_drafter_dead` alert when the drafter dies (same key: only the counters can tell; the
    seat's floor keeps its last replica in rotation, issue 26), 200 right after a restart with
    good weights and still 200 on its own judged drafts; the watcher's /healthz 200 throughout."""
    phases = ("good", "stopped", "dead", "restarted", "recovered")
    missing = [p for p in phases if p not in READY]
    assert not missing, f"phases not observed (an earlier scenario failed first): {missing}"

    def shown(phase: str) -> str:
        seen = READY[phase]
        return (f"{phase}: /ready answers {seen.answers[-6:]}, traffic errors "
                f"{seen.traffic_errors}\n{world.seen()}")

    good, stopped, dead, restarted, recovered = (READY[p] for p in phases)
    assert good.body == f"{REPLICA}: ready", shown("good")
    assert stopped.body is not None and "replica_down" in stopped.body, shown("stopped")
    assert dead.body is not None and dead.body.startswith(
        f"{REPLICA}: ready, kept in rotation by the seat's floor"), shown("dead")
    assert "alert spec_drafter_dead: the drafter's first token" in dead.body, shown("dead")
    assert restarted.body is not None and restarted.body.startswith(f"{REPLICA}: ready"), \
        shown("restarted")
    assert recovered.body is not None and recovered.body.startswith(f"{REPLICA}: ready"), \
        shown("recovered")
    assert (recovered.acceptance_length or 0.0) >= 3.5, shown("recovered")
    for phase in phases:
        assert READY[phase].healthz == 200, shown(phase)  # the watcher itself is fine
        assert READY[phase].traffic_errors == [], shown(phase)
    note(READY_SCENARIO, f"good drafter: 200 '{good.body}' with a judged acceptance length of "
         f"{good.acceptance_length} after {good.seconds:.1f} s of traffic ({good.extra}); "
         f"engine stopped: 503 '{stopped.body}'")
    note(READY_SCENARIO, f"other weights, same key, relaunched: 200 '{dead.body}' after "
         f"{dead.seconds:.1f} s of traffic")
    note(READY_SCENARIO, f"good weights, relaunched ({restarted.extra}): 200 "
         f"'{restarted.body}' before any traffic (the restart cleared the verdict), still 200 "
         f"'{recovered.body}' with a judged acceptance length of "
         f"{recovered.acceptance_length} after {recovered.seconds:.1f} s of traffic; /healthz "
         "200 throughout")


# ----- the API key never leaves the seat file (issue 16) ----------------------------------------
def test_api_key_never_in_a_log_or_state_file(world: World,
                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every file this session wrote (launch and watch logs, startup reports, placement and
    state files, the cache store and its manifests, rocmseat's error logs), except seat files
    (*.toml: every e2e seat serves with the key, on purpose): the key is in none of them."""
    assert world.launches, "no launch ran: nothing to look at"
    secret = API_KEY.encode()
    seat_files = sorted(world.root.glob("*.toml"))
    assert seat_files and all(secret in p.read_bytes() for p in seat_files)  # found where it is
    looked, found = 0, []
    for path in sorted(tmp_path_factory.getbasetemp().rglob("*")):
        if path.suffix == ".toml" or path.is_symlink() or not path.is_file():
            continue
        looked += 1
        if secret in path.read_bytes():
            found.append(str(path))
    assert found == [], f"the API key is in {found}"
    logs = [p for p in world.root.glob("*.log")]
    assert len(logs) >= 5, logs  # four launches and the watch
    note("api_key_never_in_a_log_or_state_file",
         f"served with --api-key: {len(world.launches)} launches READY (the canary "
         f"authenticated); the key in none of {looked} files written "
         f"({len(logs)} logs, the state dir, the cache store), only in the seat files")
