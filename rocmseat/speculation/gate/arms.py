"""`rocmseat spec gate`: launch each arm cold, run the battery with a benchmark client while the
watchdog runs beside it, and judge (docs/spec.md).

The client follows the seat's `[engine] kind`: vLLM's own `vllm bench serve` (procs.BenchClient,
in the engine's Python) for a vLLM seat, rocmseat's own OpenAI-compatible streaming client
(openai_bench.OpenAIBench, the same result file and figures) for any other engine (llama.cpp's
llama-server, SGLang), which has no `vllm bench serve`.

One arm at a time, on the same replica slot (the base seat's port), each a fresh start of
`rocmseat launch ARM_SEAT --replica R` whose seat is the arm's seat file rewritten under
`--out/arms/<arm>/seat.toml`: its own cache root and state dir under `--out` (the seats' own
caches and state are never touched; every arm compiles cold, as after an invalidation), the
base seat's port, and for the schedule arm the proposed `num_speculative_tokens_per_batch_size`.
Nothing is left running on any way out: every child is stopped in a `finally`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rocmseat import jsonio
from rocmseat.atomic import WriteRefused, exclusive_lock, write_into
from rocmseat.errors import ConfigError, ReadError, RocmseatError
from rocmseat.findings import Finding, Severity
from rocmseat.httpclient import fetch_once
from rocmseat.launch.memplan import CHECK_ID as MEMORY_PLAN
from rocmseat.launch.readiness import served_api_key
from rocmseat.launch.report import STARTUP_REPORT
from rocmseat.launch.startuplog import StartupSummary, classify_text
from rocmseat.placement.record import ReplicaPlacement
from rocmseat.placement.rules import known_names, replica_index
from rocmseat.redact import redact_text
from rocmseat.runner import run
from rocmseat.safeio import read_regular_text
from rocmseat.seat.load import load_seat
from rocmseat.seat.model import Seat
from rocmseat.speculation.advise.acceptance import Counters
from rocmseat.speculation.advise.schedule import Schedule, as_lists
from rocmseat.speculation.advise.seatedit import dump_toml
from rocmseat.speculation.documents import DocumentError, load_document
from rocmseat.speculation.gate import battery as battery_mod
from rocmseat.speculation.gate.benchresult import BenchResult, parse_bench_result
from rocmseat.speculation.gate.judge import ArmFigures, GateConfig, Series
from rocmseat.speculation.gate.openai_bench import OpenAIBench
from rocmseat.speculation.gate.procs import (
    BENCH_PROGRAM,
    AlertEvent,
    BenchClient,
    ChildError,
    NotifyListener,
    WatchChild,
    port_in_use,
    read_log,
    start_launch,
    wait_ready,
)
from rocmseat.speculation.gate.settings import Battery, SeatWithGate
from rocmseat.statedir import StateDir
from rocmseat.text import printable
from rocmseat.watch.metrics import read_page
from rocmseat.watch.window import Snapshot, Window, window_between

WATCH_INTERVAL_S = 2.0
WATCH_START_S = 60.0  # the watchdog's start (a Python start and rocmseat's imports)
WATCH_SCRAPE_TIMEOUT_S = 5.0  # `rocmseat watch --timeout` (its default)
STOP_GRACE_S = 20.0
RESULT_LIMIT_BYTES = 64 << 20  # a --save-detailed result of thousands of requests fits


class ArmError(RocmseatError):
    """An arm could not be measured (never ready, no benchmark client, blind, a base hang).
    `document`: the partial gate.json written for it, once the gate has one (gateflow)."""

    exit_code = 2
    document: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Progress:
    arm: str
    phase: str
    done: int  # runs finished on this arm
    total: int  # runs of this arm's battery
    elapsed_s: float  # since the gate started
    left_s: float | None  # estimate for the whole gate
    message: str = ""


@dataclass
class RunRecord:
    name: str
    phase: str
    concurrency: int
    repeat: int
    result_file: str | None  # relative to --out
    result: BenchResult | None
    window: Window | None
    seconds: float
    error: str | None = None


@dataclass
class ArmRecord:
    name: str
    seat_file: Path
    source_seat: Path
    k: int
    schedule: Schedule | None
    startup: StartupSummary | None = None
    startup_report: dict[str, Any] | None = None
    ready_after_s: float | None = None
    memory: Finding | None = None
    runs: list[RunRecord] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # runs the watchdog did not watch (it died, never started, or never scraped during the
    # run): a hang there would have gone unseen, so the `hang` gate cannot PASS
    watch_gaps: list[str] = field(default_factory=list)


def check_bench_client(python: Path) -> dict[str, Any]:
    """Ask the engine's Python whether vLLM's benchmark client can run (seconds, no server)."""
    done = run([str(python), str(BENCH_PROGRAM), "--check"], timeout_s=300.0)
    last = (done.stdout.strip().splitlines() or [""])[-1]
    try:
        info = json.loads(last)
    except ValueError:
        info = None
    if done.timed_out or not isinstance(info, dict) or "error" in info:
        why = (info or {}).get("error") if isinstance(info, dict) else None
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise ArmError(f"vllm bench serve is not available with {python}: "
                       f"{why or ('timed out' if done.timed_out else tail)}",
                       hint="the gate drives load with the engine's own benchmark client; "
                            "install vLLM (and its bench extra) in the seat's engine Python")
    if not info.get("pandas"):
        raise ArmError(f"vllm bench serve with {python} cannot read the prompt file: its "
                       "`custom` dataset needs pandas (vLLM's bench extra)",
                       hint=f"{python} -m pip install pandas")
    return info


def api_key(seat: Seat) -> str | None:
    """The API key the server will require: `--api-key` in serve.extra_args, else VLLM_API_KEY
    in [env], read as launch's canary reads it (rocmseat.launch.readiness.served_api_key)."""
    return served_api_key(seat.serve.extra_args, seat.env)


def replica_slot(seat: Seat, replica: str) -> int:
    """The index of `replica` in an arm's seat by the seat's naming rule (rocmseat.placement)."""
    index = replica_index(seat, replica)
    if index is None:
        raise ConfigError(f"--replica {printable(replica, 40)!r}: not a replica of seat "
                          f"{seat.name}", hint=f"its replicas: {known_names(seat)}")
    return index


def arm_placement(seat: Seat, replica: str, state_dir: Path, *,
                  sysfs_root: Path | None = None) -> ReplicaPlacement:
    """Where the arm's replica runs and listens: its placement record (rocmseat.placement.place,
    which launch, watch, key and cache-audit read too), on this node's sysfs root (or
    `sysfs_root`) and the arm's state dir, never the gate's own reading of the seat."""
    from rocmseat.placement.place import place, seat_roots

    sysfs, state = seat_roots(seat, sysfs_root, state_dir)
    placement = place(seat, sysfs_root=sysfs, state_root=state)
    record = placement.known(replica)
    if record is None:
        raise ArmError(f"replica {printable(replica, 40)} of seat {seat.name}: not placed on "
                       f"this node: {placement.why}")
    return record


def arm_seat_text(source: SeatWithGate, *, arm_dir: Path, port_base: int,
                  schedule: Schedule | None, extra_args: Sequence[str] = (),
                  k: int | None = None, cache_root: Path | None = None) -> str:
    """The arm's seat file: the source seat without [gate], absolute paths, its own cache root
    (or `cache_root`, one arm's caches kept across its starts) and state dir under the arm's
    directory, the base seat's port, the schedule if any."""
    for path in (arm_dir, cache_root):
        if path is not None and not path.is_absolute():
            # the seat loader resolves a relative path against the seat file's own directory: a
            # relative --out once nested every arm's cache under itself (out/arms/x/out/...)
            raise ValueError(f"arm directory or cache root {path} must be absolute")
    seat = source.seat
    data = json.loads(json.dumps(source.data))
    data.pop("gate", None)
    data["cache_root"] = str(cache_root or arm_dir / "cache")
    data["state_dir"] = str(arm_dir / "state")
    data["engine"]["python"] = str(seat.engine.python)
    data["model"]["path"] = str(seat.model.path)
    data["model"]["served_name"] = seat.model.served_name
    data["serve"]["port_base"] = port_base
    if extra_args:
        data["serve"]["extra_args"] = [*data["serve"].get("extra_args", []), *extra_args]
    if seat.preflight.profile is not None:
        data.setdefault("preflight", {})["profile"] = str(seat.preflight.profile)
    if seat.drafter is not None:
        if seat.drafter.path is not None:
            data["drafter"]["path"] = str(seat.drafter.path)
        if schedule is not None:
            data["drafter"]["num_speculative_tokens_per_batch_size"] = as_lists(schedule)
        if k is not None:
            data["drafter"]["num_speculative_tokens"] = k
    header = (f"Written by rocmseat spec gate from {seat.source_path}: this arm's own cache and "
              "state,\nthe gate's port" + (", the proposed schedule" if schedule else "") + ".")
    return dump_toml(data, header)


def _memory_plan(startup_report: dict[str, Any] | None, subject: str) -> Finding:
    """The arm's memory plan as launch judged it in its startup report (rocmseat.launch.memplan:
    the one place that compares model memory per rank with the checkpoint's share)."""
    for doc in (startup_report or {}).get("findings", []):
        if isinstance(doc, dict) and doc.get("check_id") == MEMORY_PLAN:
            try:
                return Finding.from_json(doc)
            except (KeyError, ValueError, TypeError):
                break
    return Finding(MEMORY_PLAN, Severity.UNKNOWN, subject,
                   "the arm's startup report holds no memory plan")


def _snapshot(url: str) -> tuple[Snapshot | None, str | None]:
    try:
        text = fetch_once(url, 10.0)
        return Snapshot(time.monotonic(), read_page(text)), None
    except RocmseatError as exc:
        return None, redact_text(exc.message)


@dataclass
class GateRun:
    """Everything one `spec gate` invocation measures; `run_arm` adds an arm at a time."""

    out: Path
    replica: str
    battery: Battery
    config: GateConfig
    port_base: int
    on_progress: Callable[[Progress], None]
    arms_planned: int
    run_id: str | None = None  # the run's identity, in every arm.json
                               # (rocmseat.speculation.gate.outdir)
    started: float = field(default_factory=time.monotonic)
    arm_seconds: list[float] = field(default_factory=list)

    def _estimate(self, done: int, total: int, arm_started: float, arms_done: int) -> float | None:
        spent = time.monotonic() - arm_started
        remaining_arms = self.arms_planned - arms_done - 1
        if done == 0:
            per_arm = self.arm_seconds[0] if self.arm_seconds else None
            return None if per_arm is None else per_arm * (remaining_arms + 1)
        this_arm = spent / done * total
        per_arm = self.arm_seconds[0] if self.arm_seconds else this_arm
        return max(this_arm - spent, 0.0) + per_arm * remaining_arms

    def run_arm(self, name: str, source: SeatWithGate, *, schedule: Schedule | None = None,  # noqa: PLR0912, PLR0915
                expect_spec: bool | None = None, k: int | None = None,
                cache_root: Path | None = None) -> ArmRecord:
        arm_dir = self.out / "arms" / name
        arm_dir.mkdir(parents=True, exist_ok=True)
        seat_file = arm_dir / "seat.toml"
        # 0600: the seat may hold an --api-key or a token in [env] (it stays the seat's own)
        text = arm_seat_text(source, arm_dir=arm_dir, port_base=self.port_base,
                             schedule=schedule, k=k, cache_root=cache_root)
        try:
            write_into(arm_dir, seat_file.name, text.encode("utf-8"), mode=0o600)
        except WriteRefused as exc:
            raise ArmError(f"arm {name}: {exc.message}") from None
        seat = load_seat(seat_file)
        k = seat.drafter.num_speculative_tokens if seat.drafter else 0
        record = ArmRecord(name, seat_file, Path(str(source.seat.source_path)), k,
                           seat.drafter.num_speculative_tokens_per_batch_size
                           if seat.drafter else None)
        spec_expected = seat.drafter is not None if expect_spec is None else expect_spec
        state_dir = arm_dir / "state"
        placed = arm_placement(seat, self.replica, state_dir)
        port, base_url = placed.port, placed.base_url
        if port_in_use(seat.engine.host if seat.engine.host not in ("0.0.0.0", "::")
                       else "127.0.0.1", port):
            raise ArmError(f"{base_url}: something already listens on the replica slot's port "
                           f"{port}: stop the replica there before gating")
        runs = battery_mod.plan(self.battery, seat.serve.max_model_len)  # sized again once up
        arm_started = time.monotonic()
        arms_done = len(self.arm_seconds)

        def progress(phase: str, done: int, message: str = "") -> None:
            self.on_progress(Progress(name, phase, done, len(runs),
                                      time.monotonic() - self.started,
                                      self._estimate(done, len(runs), arm_started, arms_done),
                                      message))

        notify = NotifyListener()
        launch = watch = client = None
        try:
            progress("launch", 0, "starting cold")
            # vLLM's client loads (~10 s) while the engine starts; any other engine: ours
            client = (BenchClient(seat.engine.python, arm_dir / "bench.log",
                                  api_key=api_key(seat)) if uses_vllm_bench(seat)
                      else OpenAIBench(api_key=api_key(seat)))
            launch = start_launch(seat_file, self.replica, state_dir, arm_dir / "launch.log",
                                  notify, stop_grace_s=STOP_GRACE_S)
            try:
                record.ready_after_s = wait_ready(
                    launch, notify, seat.readiness.timeout_s + 120.0,
                    lambda status: progress("launch", 0, status), also=client.gone)
            except ChildError as exc:
                if (gone := client.gone()) is not None:
                    raise ArmError(f"arm {name}: {gone}") from None
                raise ArmError(f"arm {name}: the replica never became ready: {exc.message}",
                               hint=f"see {arm_dir / 'launch.log'}") from None
            record.startup = _startup_summary(arm_dir / "launch.log", record)
            report = StateDir(state_dir).replica(seat.name, self.replica).startup
            try:  # through the door: a trusted state file, the startup report's strict model
                doc = StateDir(state_dir).read(STARTUP_REPORT, seat=seat.name,
                                               replica=self.replica)
                record.startup_report = None if doc is None else doc.model_dump(
                    mode="json", by_alias=True, exclude_unset=True)
                if doc is None:
                    record.problems.append(f"startup report {report}: not written")
            except RocmseatError as exc:  # ReadError, DocumentInvalid: one line naming it
                record.problems.append(f"startup report: {exc.message}")
            record.memory = _memory_plan(record.startup_report, f"{name}/{self.replica}")
            try:
                page = fetch_once(base_url + "/metrics", 10.0)
            except RocmseatError as exc:
                raise ArmError(f"arm {name}: {base_url}/metrics unreadable after the start: "
                               f"{exc.message}") from None
            try:
                reading = read_page(page)
            except RocmseatError as exc:
                raise ArmError(f"arm {name}: {base_url}/metrics is not a metrics page of the "
                               f"seat's engine ({seat.engine.kind}): "
                               f"{exc.message}: acceptance and the prefix cache cannot be "
                               "measured") from None
            if spec_expected and not reading.spec_present:
                raise _blind(name)
            block = battery_mod.block_size_from_page(page)
            runs = battery_mod.plan(self.battery, seat.serve.max_model_len, block_size=block)
            if not any(r.phase == "prefix" for r in runs):
                record.problems.append(
                    f"prefix cache not measured: no shared prefix of one full KV block "
                    f"({block} tokens) fits max_model_len {seat.serve.max_model_len}")
            watch = WatchChild(seat_file, state_dir, arm_dir / "watch.log",
                               interval_s=WATCH_INTERVAL_S,
                               stall_after_s=self.battery.stall_after_s)
            progress("bench client", 0, "loading vllm bench serve" if uses_vllm_bench(seat)
                     else "rocmseat's OpenAI-compatible client")
            try:
                client.wait_ready()
            except ChildError as exc:
                raise ArmError(f"arm {name}: {exc.message}") from None
            if (why := watch.wait_started(WATCH_START_S)) is not None:
                record.watch_gaps.append(f"the watchdog never watched this arm: {why}")
            self._battery(record, runs, client=client, watch=watch, seat=seat,
                          base_url=base_url, spec_expected=spec_expected, progress=progress)
            record.alerts = [e.line for e in watch.alerts()]
            if watch.bad_alerts:
                # an alert the gate could not read may have been a hang: the `hang` gate
                # cannot PASS on this arm
                record.watch_gaps.append(f"{len(watch.bad_alerts)} alert documents unreadable: "
                                         f"{watch.bad_alerts[0]}")
        finally:
            for child in (client, watch):
                if child is not None:
                    child.stop()
            if launch is not None:
                launch.stop(STOP_GRACE_S + 30.0)
            notify.close()
            self.arm_seconds.append(time.monotonic() - arm_started)
            _save_arm(record, self.out, self.run_id)
        return record

    def _battery(self, record: ArmRecord, runs: Sequence[battery_mod.RunSpec], *,
                 client: BenchClient | OpenAIBench, watch: Watchdog, seat: Seat, base_url: str,
                 spec_expected: bool, progress: Callable[..., None]) -> None:
        results_dir = self.out / "arms" / record.name / "results"
        results_dir.mkdir(parents=True, exist_ok=True)
        metrics_url = base_url + "/metrics"

        def abort() -> str | None:
            hangs = watch.hangs()
            return hangs[0].line if hangs else None

        for index, spec in enumerate(runs):
            progress(spec.phase if spec.phase != "decode" else f"decode@{spec.concurrency}",
                     index, f"repeat {spec.repeat + 1}")
            before, scrape_error = _snapshot(metrics_url)
            watched = watch.scrapes()
            argv = battery_mod.bench_argv(
                spec, base_url=base_url, model=str(seat.model.path),
                served_name=seat.model.served_name or seat.name, result_dir=results_dir,
                arm=record.name, k=record.k)
            started = time.monotonic()
            result_path = results_dir / f"{spec.name}.json"
            result_path.unlink(missing_ok=True)
            try:
                if isinstance(client, OpenAIBench):
                    reply = client.run_spec(
                        spec, base_url=base_url, model=seat.model.served_name or seat.name,
                        result_dir=results_dir, timeout_s=self.battery.run_timeout_s,
                        abort=abort, metadata=_metadata(record, spec))
                else:
                    reply = client.run(argv, self.battery.run_timeout_s, abort, spec.name)
            except ChildError as exc:
                record.runs.append(RunRecord(spec.name, spec.phase, spec.concurrency,
                                             spec.repeat, None, None, None,
                                             time.monotonic() - started, exc.message))
                if abort() is not None:
                    record.hangs.extend(e.line for e in watch.hangs())
                    return  # the engine hung: the rest of the battery cannot run
                raise ArmError(f"arm {record.name}: {spec.name}: {exc.message}") from None
            seconds = time.monotonic() - started
            after, error_after = _snapshot(metrics_url)
            window = (window_between(before, after)
                      if before is not None and after is not None else None)
            if not reply.get("ok"):
                if abort() is not None:  # ours stops sending when the watchdog saw a hang
                    record.runs.append(RunRecord(spec.name, spec.phase, spec.concurrency,
                                                 spec.repeat, None, None, window, seconds,
                                                 redact_text(str(reply.get("error")))))
                    record.hangs.extend(e.line for e in watch.hangs())
                    return
                raise ArmError(f"arm {record.name}: the benchmark client failed in {spec.name}: "
                               f"{redact_text(str(reply.get('error')))}",
                               hint=f"see {self.out / 'arms' / record.name / 'bench.log'}")
            try:
                result = parse_bench_result(read_regular_text(result_path,
                                                              limit_bytes=RESULT_LIMIT_BYTES),
                                            str(result_path))
            except ReadError as exc:
                raise ArmError(f"arm {record.name}: {spec.name}: vllm bench serve wrote no "
                               f"result file {result_path}: {exc.cause}") from None
            record.runs.append(RunRecord(
                spec.name, spec.phase, spec.concurrency, spec.repeat,
                str(result_path.relative_to(self.out)), result, window, seconds,
                scrape_error or error_after))
            if spec.phase == "decode" and spec_expected:
                _check_not_blind(record, window, scrape_error or error_after)
            if watch.hangs():
                record.hangs.extend(e.line for e in watch.hangs())
                return
            if (gap := watch_gap(watch, watched)) is not None:
                record.watch_gaps.append(f"{spec.name}: {gap}")


def _metadata(record: ArmRecord, spec: battery_mod.RunSpec) -> dict[str, str]:
    """What bench_argv hands vLLM's client as --metadata (benchresult.METADATA_KEYS)."""
    return {"rocmseat_arm": record.name, "rocmseat_phase": spec.phase,
            "rocmseat_repeat": str(spec.repeat), "rocmseat_k": str(record.k)}


class Watchdog(Protocol):
    """What the battery asks of the watchdog beside it (procs.WatchChild)."""

    interval_s: float

    def hangs(self) -> list[AlertEvent]: ...

    def alerts(self) -> list[AlertEvent]: ...

    def gone(self) -> str | None: ...

    def scrapes(self) -> int | None: ...


def watch_gap(watch: Watchdog, before: int | None) -> str | None:
    """Why the watchdog did not watch the run that just ended, or None: it must still run and
    have scraped the replica successfully at least once since the run started. A run shorter
    than the watch interval waits for the next scrape (at most two intervals and a scrape's
    timeout)."""
    if (gone := watch.gone()) is not None:
        return gone
    if before is None:
        return "the watchdog's own /metrics could not be read when the run started"
    deadline = time.monotonic() + 2 * watch.interval_s + WATCH_SCRAPE_TIMEOUT_S
    while True:
        now = watch.scrapes()
        if now is not None and now > before:
            return None
        if (gone := watch.gone()) is not None:
            return gone
        if time.monotonic() > deadline:
            if now is None:
                return "the watchdog's own /metrics could not be read after the run"
            return ("the watchdog did not scrape the replica successfully during the run "
                    f"({now} successful scrapes before and after)")
        time.sleep(0.5)


def _check_not_blind(record: ArmRecord, window: Window | None, error: str | None) -> None:
    if window is None:
        raise ArmError(f"arm {record.name}: /metrics could not be read around a decode run "
                       f"({error or 'the server restarted'}): acceptance cannot be measured")
    if not window.spec_present or window.drafts <= 0:
        raise _blind(record.name)


def _blind(arm: str) -> ArmError:
    return ArmError(f"arm {arm}: blind: /metrics shows no spec-decode drafts while the arm "
                    "drafts (speculation off, or --disable-log-stats): acceptance cannot be "
                    "measured",
                    hint="the gate reads vllm:spec_decode_* counters; remove "
                         "--disable-log-stats from the seat's serve.extra_args")


def figures(record: ArmRecord) -> ArmFigures:
    """The battery's runs -> what the gates compare."""
    throughput: dict[int, list[float]] = {}
    itl: dict[int, list[float]] = {}
    tpot: dict[int, list[float]] = {}
    warm: list[float] = []
    hits: list[float] = []
    cold: float | None = None
    failed = 0
    counters: Counters | None = None
    for r in record.runs:
        if r.result is None:
            continue
        failed += r.result.failed
        if r.phase == "cold_ttft" and r.result.ttfts_s:
            cold = r.result.ttfts_s[0] * 1000.0
        elif r.phase == "warm_ttft" and r.result.ttfts_s:
            warm.extend(t * 1000.0 for t in r.result.ttfts_s)
        elif r.phase == "decode":
            c = r.concurrency
            throughput.setdefault(c, []).append(r.result.output_tokens_per_s)
            if r.result.mean_itl_ms is not None:
                itl.setdefault(c, []).append(r.result.mean_itl_ms)
            if r.result.mean_tpot_ms is not None:
                tpot.setdefault(c, []).append(r.result.mean_tpot_ms)
            if r.window is not None and r.window.spec_present and r.window.drafts > 0:
                w = r.window
                more = Counters(w.drafts, w.draft_tokens, w.accepted_tokens, w.accepted_per_pos)
                counters = more if counters is None else counters + more
        elif r.phase == "prefix" and r.window is not None:
            rate = r.window.prefix_cache_hit_rate
            if rate is not None:
                hits.append(rate)
    startup = record.startup
    return ArmFigures(
        name=record.name, k=record.k,
        throughput={c: Series(tuple(v)) for c, v in throughput.items()},
        itl_ms={c: Series(tuple(v)) for c, v in itl.items()},
        tpot_ms={c: Series(tuple(v)) for c, v in tpot.items()},
        cold_ttft_ms=cold, warm_ttft_ms=Series(tuple(warm)), prefix_hit_rate=Series(tuple(hits)),
        kv_tokens=startup.kv_cache_tokens if startup else None,
        max_concurrency=startup.max_concurrency if startup else None,
        failed_requests=failed, hangs=tuple(record.hangs), counters=counters,
        schedule=record.schedule, problems=tuple(record.problems),
        watch_gaps=tuple(record.watch_gaps),
    )


def _startup_summary(launch_log: Path, record: ArmRecord) -> StartupSummary | None:
    """The startup summary from the arm's launch log (capped, never through a link or a FIFO);
    None, and a problem of the arm, when it cannot be read."""
    try:
        return classify_text(read_log(launch_log))
    except OSError as exc:
        record.problems.append(f"{launch_log}: {exc.strerror or exc}")
        return None


def _save_arm(record: ArmRecord, out: Path, run_id: str | None) -> None:
    """arm.json of the arm, written into its directory (a link or a FIFO planted at the name
    is refused); a write that fails is one of the arm's problems, and the gate goes on."""
    doc = {**arm_json(record, out), "run_id": run_id}
    try:
        write_into(out / "arms" / record.name, "arm.json",
                   (jsonio.dumps(doc, indent=2) + "\n").encode())
    except WriteRefused as exc:
        record.problems.append(exc.message)


def new_run_id() -> str:
    """A gate run's identity: when it started and 48 random bits."""
    return dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ-") + secrets.token_hex(6)


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def window_json(w: Window | None) -> dict[str, Any] | None:
    if w is None:
        return None
    return {
        "duration_s": round(w.duration_s, 3), "spec_present": w.spec_present,
        "drafts": w.drafts, "draft_tokens": w.draft_tokens, "accepted_tokens": w.accepted_tokens,
        "accepted_per_position": list(w.accepted_per_pos),
        "generation_tokens": w.generation_tokens, "prompt_tokens": w.prompt_tokens,
        "prefix_queries": w.prefix_queries, "prefix_hits": w.prefix_hits,
        "preemptions": w.preemptions,
    }


def arm_json(record: ArmRecord, out: Path) -> dict[str, Any]:
    startup = record.startup
    return {
        "name": record.name,
        "seat_file": str(record.seat_file.relative_to(out)) if record.seat_file.is_relative_to(
            out) else str(record.seat_file),
        "source_seat": str(record.source_seat),
        "num_speculative_tokens": record.k,
        "schedule": as_lists(record.schedule) if record.schedule else None,
        "ready_after_s": _finite(record.ready_after_s),
        "startup": None if startup is None else startup.to_json(),  # launch's serialiser
        "config_key": (record.startup_report or {}).get("config_key"),
        "memory_plan": record.memory.to_json() if record.memory else None,
        "runs": [{
            "name": r.name, "phase": r.phase, "concurrency": r.concurrency, "repeat": r.repeat,
            "result_file": r.result_file, "seconds": round(r.seconds, 3), "error": r.error,
            "metrics_window": window_json(r.window),
        } for r in record.runs],
        "hangs": record.hangs,
        "alerts": record.alerts,
        "problems": record.problems,
        "watch_gaps": record.watch_gaps,
    }


def gate_lock(out: Path) -> Any:
    """One gate per --out directory at a time (its result files would mix)."""
    return exclusive_lock(out / ".gate.lock", timeout_s=0.5)


def now_utc() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def uses_vllm_bench(seat: Seat) -> bool:
    """Whether the gate drives `seat` with `vllm bench serve` (a vLLM seat) or with rocmseat's
    own OpenAI-compatible client (every other engine kind)."""
    return seat.engine.kind == "vllm"


def engine_pythons(*seats: Seat) -> list[Path]:
    """The engine Pythons whose `vllm bench serve` the gate checks first (vLLM seats only)."""
    seen: list[Path] = []
    for seat in seats:
        if uses_vllm_bench(seat) and seat.engine.python not in seen:
            seen.append(seat.engine.python)
    return seen


def load_arm_record(out: Path, name: str) -> ArmRecord:
    """An arm's record read back from --out (arm.json through its strict model, its seat and
    its result files): the gate judged from what it saved, without running anything.
    ConfigError naming the file and the key for a record that is not one."""
    from rocmseat.speculation.documents import ArmDoc, DocumentInvalid, parse

    arm_dir = out / "arms" / name
    shown = str(arm_dir / "arm.json")
    try:
        doc = parse(ArmDoc, load_document(read_regular_text(arm_dir / "arm.json",
                                                            limit_bytes=64 << 20)), shown)
    except (DocumentError, DocumentInvalid) as exc:
        raise ConfigError(f"{shown}: {exc}" if isinstance(exc, DocumentError) else str(exc)
                          ) from None
    record = ArmRecord(name, arm_dir / "seat.toml", Path(doc.source_seat), doc.k, doc.schedule)
    launch_log = arm_dir / "launch.log"
    if launch_log.exists():
        record.startup = _startup_summary(launch_log, record)
    record.ready_after_s = doc.ready_after_s
    if doc.memory_plan is not None:
        try:
            record.memory = Finding.from_json(doc.memory_plan)
        except (KeyError, ValueError, TypeError):
            raise ConfigError(f"{shown}: key 'memory_plan': not a finding") from None
    record.hangs = list(doc.hangs)
    record.alerts = list(doc.alerts)
    record.problems = list(doc.problems)
    record.watch_gaps = list(doc.watch_gaps)  # absent in older gates
    for entry in doc.runs:
        result = None
        if entry.result_file:
            path = out / entry.result_file
            result = parse_bench_result(read_regular_text(path, limit_bytes=64 << 20), str(path))
        w = entry.metrics_window
        window = None if w is None else Window(
            duration_s=w.duration_s, drafts=w.drafts, draft_tokens=w.draft_tokens,
            accepted_tokens=w.accepted_tokens,
            accepted_per_pos=tuple(w.accepted_per_position),
            generation_tokens=w.generation_tokens, prompt_tokens=w.prompt_tokens,
            preemptions=w.preemptions, prefix_queries=w.prefix_queries,
            prefix_hits=w.prefix_hits, running=None, waiting=None, kv_usage=None,
            spec_present=w.spec_present)
        record.runs.append(RunRecord(entry.name, entry.phase, entry.concurrency, entry.repeat,
                                     entry.result_file, result, window, entry.seconds,
                                     entry.error))
    return record
