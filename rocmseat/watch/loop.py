"""The evaluation loop: scrape every target, window, detect, turn conditions into transitions.

Everything nondeterministic is injected (the scraper or a fetch callable, the clock): tests
drive `step()` against a real local HTTP server or canned pages. The scrapes of one evaluation
share one deadline (`timeout_s` after it starts), all start at once on one event loop and each
page is parsed as it arrives (rocmseat/httpclient.py), so hung replicas can neither hold the
others nor the evaluation past the deadline; sinks get transitions through `on_transition`,
which must not block (sinks.BackgroundSender).

An engine restart (a counter reset, or `_created` stamps that moved) clears the speculation
verdicts of the old process (`_engine_restarted`): `/ready` is not latched at 503 by a dead
drafter that, out of rotation, can never draft again (docs/watch.md, "Sinks", readiness).
"""

from __future__ import annotations

import hashlib
import math
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rocmseat.errors import ConfigError, RocmseatError
from rocmseat.httpclient import AsyncScraper, NewSink, Result, Stopped
from rocmseat.watch import alerts as A
from rocmseat.watch.alerts import AlertBook, Transition
from rocmseat.watch.baseline import (
    UNKEYED,
    baseline_path,
    load_baseline,
    read_config_key,
    save_baseline,
)
from rocmseat.watch.canary import Usage, subtract
from rocmseat.watch.detector import DetectorParams, SpecDetector, SpecVerdict
from rocmseat.watch.fetch import CallableScraper, Fetch
from rocmseat.watch.kernel import HOLD_S as KERNEL_HOLD_S
from rocmseat.watch.kernel import KernelCause, KernelFollower, kernel_node_events
from rocmseat.watch.metrics import PageError, PageReader, Reading, read_page
from rocmseat.watch.scrape import Target
from rocmseat.watch.spawn import SpawnWatch
from rocmseat.watch.status import ReplicaStatus
from rocmseat.watch.uevents import GpuPath, node_events
from rocmseat.watch.window import Snapshot, Window, window_between, window_problem

# The ranges every entry point is held to (docs/watch.md, "Limits"): finite, and sane.
LIMITS: dict[str, tuple[float, float]] = {
    "interval_s": (0.05, 3600.0),
    "timeout_s": (0.05, 300.0),
    "down_after": (1, 10_000),
    "stall_after_s": (0.0, 86_400.0),
    "unstable_after": (1, 10_000),
    "pinned_al": (1.0, 65.0),  # 1 + K, K <= 64
}


class Scraper(Protocol):
    def fetch_many(
        self, urls: Sequence[str], timeout_s: float, stop: threading.Event | None = None, *,
        new_sink: NewSink = ...,
    ) -> list[Result]: ...

    def close(self) -> None: ...


def check_limit(name: str, value: float | None, what: str) -> None:
    """A ConfigError naming `what` unless `value` is finite and within LIMITS[name]."""
    if value is None:
        return
    lo, hi = LIMITS[name]
    if not math.isfinite(value) or not lo <= value <= hi:
        raise ConfigError(f"{what}: {value!r} is not a number in {lo:g}..{hi:g}")


@dataclass(frozen=True, slots=True)
class WatchConfig:
    interval_s: float = 10.0
    timeout_s: float = 5.0
    down_after: int = 3
    stall_after_s: float = 60.0
    pinned_al: float | None = None
    expect_spec: bool = True
    state_dir: Path | None = None
    key_prefix: str = ""  # the seat name: baselines are per seat and replica
    params: DetectorParams = field(default_factory=DetectorParams)
    unstable_after: int = 3  # counter resets in a row before metrics_unstable
    min_ready: int = 1  # the seat's floor for /ready (rocmseat.watch.readiness.seat_readiness)

    def __post_init__(self) -> None:
        for name in LIMITS:
            check_limit(name, getattr(self, name), name)

    @property
    def max_age_s(self) -> float:
        """A verdict older than this is stale (readiness and /healthz say so)."""
        return 2 * self.interval_s + self.timeout_s + 1.0


@dataclass(slots=True)
class _Replica:
    target: Target
    detector: SpecDetector
    previous: Snapshot | None = None
    failures: int = 0
    errors_total: int = 0
    restarts: int = 0  # counter resets in a row
    stall_since: float | None = None
    last_verdict: SpecVerdict | None = None
    held: dict[str, float] = field(default_factory=dict)  # one-shot node alerts: until when
    kernel_cause: KernelCause | None = None  # the kernel's last word on its GPUs
    spawn_factor: float | None = None  # this start against the seat's history, once judged
    canary_in_window: bool = False  # the last window held the drafter canary's requests


class Watcher:
    def __init__(
        self,
        targets: list[Target],
        config: WatchConfig,
        *,
        fetch: Fetch | None = None,
        scraper: Scraper | None = None,
        clock: Callable[[], float] = time.time,
        on_transition: Callable[[Transition], None] = lambda t: None,
        gpu_paths: list[GpuPath] | None = None,
        on_warning: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.config = config
        self.book = AlertBook()
        self.events: queue.Queue[dict[str, str]] = queue.Queue()
        self.gpu_paths = gpu_paths or []
        self.kernel: KernelFollower | None = None  # the kernel log, live (watch/kernel.py)
        self._owns_scraper = scraper is None
        if scraper is None:
            scraper = CallableScraper(fetch) if fetch is not None else AsyncScraper()
        self._scraper: Scraper = scraper
        self._clock = clock
        self._emit = on_transition
        self._warn = on_warning
        self._replicas = [self._new(t) for t in targets]
        self._lock = threading.Lock()
        self._stop: threading.Event | None = None
        self.statuses: list[ReplicaStatus] = []
        self.evaluated_at_s: float | None = None  # clock time at the end of the last step
        self.evaluations = 0
        self.last_duration_s: float | None = None
        # the drafter canary's requests that finished by a scrape's time, per replica: taken
        # out of that window (rocmseat.watch.canary_service.CanaryService.take)
        self.take_canary: Callable[[str, float], Sequence[Usage]] | None = None
        # told of every new engine process (replica, time): the canary judges it at once
        # (rocmseat.watch.canary_service.CanaryService.restarted)
        self.on_restart: Callable[[str, float], None] | None = None
        # the slow-spawn lottery: decode rate at matched load across starts (watch/spawn.py)
        self.spawn = SpawnWatch(state_dir=config.state_dir, prefix=config.key_prefix,
                                log=on_warning)

    def _new(self, target: Target) -> _Replica:
        cfg = self.config
        return _Replica(target, SpecDetector(params=cfg.params, key="", pinned_al=cfg.pinned_al))

    @property
    def targets(self) -> list[Target]:
        return [r.target for r in self._replicas]

    def close(self) -> None:
        if self._owns_scraper:  # a scraper passed in is its owner's to close
            self._scraper.close()

    def step(self) -> list[ReplicaStatus]:
        """One evaluation: scrape all targets under one deadline, then judge each in order."""
        started = time.monotonic()
        replicas = list(self._replicas)
        scraped_at = self._clock()
        results = self._scraper.fetch_many([r.target.url for r in replicas],
                                           self.config.timeout_s, self._stop,
                                           new_sink=PageReader)
        if any(isinstance(r, Stopped) for r in results):
            return self.statuses  # stopping: no verdict from a cut evaluation
        now = self._clock()
        self._drain_node_events(now)
        self._drain_kernel(now)
        statuses = [self._evaluate(r, res, scraped_at, now)
                    for r, res in zip(replicas, results, strict=True)]
        with self._lock:
            self.statuses = statuses
            self.evaluated_at_s = self._clock()
            self.evaluations += 1
            self.last_duration_s = time.monotonic() - started
        return statuses

    def set_targets(self, targets: list[Target]) -> tuple[int, int, int]:
        """Replace the target list (a re-read targets file). A target whose name and URL did not
        change keeps its detector, baseline, previous scrape and alerts; a removed target's
        alerts resolve; a label change re-sends its active alerts under the new labels.
        Returns (added, removed, relabelled)."""
        old = {r.target.name: r for r in self._replicas}
        now = self._clock()
        kept: list[_Replica] = []
        added = relabelled = 0
        for target in targets:
            rep = old.pop(target.name, None)
            if rep is None or (rep.target.url, rep.target.cache_dir) != (target.url,
                                                                          target.cache_dir):
                if rep is not None:
                    self._resolve_all(rep, now, "target-changed")
                kept.append(self._new(target))
                added += 1
                continue
            if rep.target.labels != target.labels:
                self._relabel(rep, target, now)
                relabelled += 1
            rep.target = target
            kept.append(rep)
        for rep in old.values():
            self._resolve_all(rep, now, "target-removed")
        self._replicas = kept
        return added, len(old), relabelled

    def set_alert(self, replica: str, alert: str, on: bool, details: Mapping[str, str]) -> None:
        """An alert raised outside the detector (remediation, rocmseat/watch/remediate): the
        same book, transitions and sinks as the watcher's own."""
        rep = next((r for r in self._replicas if r.target.name == replica), None)
        if rep is None:
            return
        transition = self.book.set(replica, alert, on, self._clock(), details,
                                   labels=rep.target.labels)
        if transition is not None:
            self._emit(transition)

    def _resolve_all(self, rep: _Replica, now: float, why: str) -> None:
        for alert in self.book.for_replica(rep.target.name):
            self._set(rep, alert, False, now, reason=why)

    def _relabel(self, rep: _Replica, target: Target, now: float) -> None:
        name = rep.target.name
        for alert in self.book.for_replica(name):
            started = self.book.started(name, alert) or now
            self._emit(Transition(name, alert, A.RESOLVED, started, now,
                                  (("reason", "labels-changed"),), rep.target.labels))
            self._emit(Transition(name, alert, A.FIRING, started, None,
                                  (("reason", "labels-changed"),), target.labels))

    def _set(self, rep: _Replica, alert: str, on: bool, now: float, **details: str) -> None:
        transition = self.book.set(rep.target.name, alert, on, now, details,
                                   labels=rep.target.labels)
        if transition is not None:
            self._emit(transition)

    def _evaluate(self, rep: _Replica, result: Result, scraped_at: float,
                  now: float) -> ReplicaStatus:
        self._expire_held(rep, now)
        reading: Reading | None = None
        error: str | None = None
        if isinstance(result, Reading):
            reading = result
        elif isinstance(result, RocmseatError):  # ScrapeError, PageError
            error = result.message
        else:
            try:
                reading = read_page(str(result))
            except PageError as exc:
                error = exc.message
        if reading is not None and rep.target.engine not in (None, reading.engine):
            error = (f"the page is {reading.engine}'s, the seat's [engine] kind is "
                     f"{rep.target.engine} (another server on the replica's port?)")
            reading = None
        if reading is None:
            return self._failed(rep, error or "no page", now)
        snapshot = Snapshot(scraped_at, reading)
        window: Window | None = None
        restarted = False
        if rep.previous is not None:
            window = window_between(rep.previous, snapshot)
            restarted = window is None
        rep.canary_in_window = False
        if self.take_canary is not None:
            used = self.take_canary(rep.target.name, scraped_at)
            window = None if window is None else subtract(window, used)
            rep.canary_in_window = bool(used)
        rep.previous = snapshot
        if window is not None and (problem := window_problem(window)) is not None:
            # Both pages parse, the two together are not counts of one server. Start afresh
            # from this scrape; the window is an error, never a verdict.
            return self._failed(rep, problem, now)
        rep.failures = 0
        self._set(rep, A.REPLICA_DOWN, False, now)
        blind = self._expects_spec(rep) and not reading.spec_present
        self._set(rep, A.SPEC_BLIND, blind, now)
        if restarted:
            rep.restarts += 1
            rep.stall_since = None
            self._engine_restarted(rep, now)
            self.spawn.restarted(rep.target.name)
        elif window is not None:
            rep.restarts = 0
        self._set(rep, A.METRICS_UNSTABLE, rep.restarts >= self.config.unstable_after, now,
                  restarts=str(rep.restarts))
        self._check_key(rep)
        if window is not None:
            self._judge(rep, window, now)
            self._judge_stall(rep, window, snapshot, now)
            judged = rep.last_verdict
            spawn = self.spawn.observe(rep.target.name, rep.detector.key, window,
                                       judged is None or not (judged.drop or judged.dead))
            self._set(rep, A.REPLICA_SLOW_SPAWN, spawn.slow, now, **spawn.details())
            rep.spawn_factor = spawn.factor
        return self._status(rep, window, None, restarted=restarted, blind=blind, now=now)

    def _expects_spec(self, rep: _Replica) -> bool:
        own = rep.target.expect_spec
        return self.config.expect_spec if own is None else own

    def _engine_restarted(self, rep: _Replica, now: float) -> None:
        """A new engine process (its counters reset, or its `_created` stamps moved): what the
        old process's drafts said no longer holds. The speculation verdicts resolve and the
        detector judges the new process afresh (the baseline, a property of the config key,
        stays); a drafter still dead shows again on the new process's own drafts. Without this
        a dead drafter latched `/ready` at 503: out of rotation the replica drafts nothing, so
        nothing could ever clear it (docs/watch.md, "Readiness")."""
        rep.detector.restart()
        rep.spawn_factor = None
        for alert in (A.SPEC_DRAFTER_DEAD, A.SPEC_ACCEPTANCE_DROP, A.DRAFTER_CANARY_FAILED,
                      A.SPEC_ACCEPTANCE_IMPLAUSIBLE):
            self._set(rep, alert, False, now, reason="engine-restarted")
        if self.on_restart is not None:
            self.on_restart(rep.target.name, now)

    def _failed(self, rep: _Replica, error: str, now: float) -> ReplicaStatus:
        rep.failures += 1
        rep.errors_total += 1
        down = rep.failures >= self.config.down_after
        self._set(rep, A.REPLICA_DOWN, down, now, failures=str(rep.failures), error=error[:120],
                  **self._kernel_cause(rep, now))
        return self._status(rep, None, error, restarted=False, blind=False, now=now)

    def _judge(self, rep: _Replica, window: Window, now: float) -> None:
        verdict = rep.detector.observe(window, now, canary=rep.canary_in_window)
        rep.last_verdict = verdict
        if verdict.learned is not None and self.config.state_dir is not None:
            try:
                save_baseline(self.config.state_dir, self._baseline_key(rep), verdict.learned)
            except (OSError, RocmseatError) as exc:  # keep it in memory and keep watching
                why = str(getattr(exc, "strerror", None) or exc).replace(" ", "_")
                self._warn(f"rocmseat-watch replica={rep.target.name} baseline-not-saved "
                           f"path={self._baseline_file(rep)} error={why}")
        judged = verdict.judged
        al = judged.acceptance_length if judged is not None else None
        details = {
            "al": _fmt(al),
            "baseline": _fmt(verdict.expected_al),
            "drafts": _fmt(judged.drafts if judged else None, 0),
        }
        self._set(rep, A.SPEC_ACCEPTANCE_DROP, verdict.drop, now, **details,
                  cusum=_fmt(verdict.cusum))
        p0 = None
        if judged is not None and judged.drafts > 0 and judged.accepted_per_pos:
            p0 = judged.accepted_per_pos[0] / judged.drafts
        self._set(rep, A.SPEC_DRAFTER_DEAD, verdict.dead, now, **details, p0=_fmt(p0))
        rate = judged.draft_acceptance_rate if judged is not None else None
        self._set(rep, A.SPEC_ACCEPTANCE_IMPLAUSIBLE, verdict.implausible, now,
                  drafts=details["drafts"], rate=_fmt(rate, 3))

    def _judge_stall(self, rep: _Replica, window: Window, snap: Snapshot, now: float) -> None:
        # Progress is any engine progress, not only generated tokens: a 262k-token prompt is
        # prefilled in chunks for minutes, and vLLM emits nothing for it until its first token
        # (vllm/v1/core/sched/scheduler.py update_from_output: an output only with new tokens;
        # the prompt tokens are counted then), while the KV-cache usage gauge is set from the
        # scheduler's stats every step (vllm/v1/metrics/loggers.py PrometheusStatLogger.record)
        running = window.running or 0.0
        flat = window.generation_tokens is not None and window.progressed is False
        if running > 0 and flat:
            if rep.stall_since is None:
                rep.stall_since = snap.time_s - window.duration_s
        else:
            rep.stall_since = None
        stalled_for = None if rep.stall_since is None else now - rep.stall_since
        stalled = stalled_for is not None and stalled_for >= self.config.stall_after_s
        self._set(rep, A.REPLICA_STALLED, stalled, now, running=_fmt(running, 0),
                  flat_s=_fmt(stalled_for, 0), **self._kernel_cause(rep, now))

    def _check_key(self, rep: _Replica) -> None:
        key = UNKEYED
        if rep.target.cache_dir is not None:
            key = read_config_key(rep.target.cache_dir) or "no-manifest"
        if key == rep.detector.key:
            return
        stored = None
        if self.config.state_dir is not None and self.config.pinned_al is None:
            stored, problem = load_baseline(self.config.state_dir, self._baseline_key(rep))
            if problem is not None:  # named once, then re-learned
                self._warn(f"rocmseat-watch replica={rep.target.name} baseline-refused "
                           f"error={problem[:300].replace(' ', '_')}")
            if stored is not None and stored.key != key:
                stored = None  # learned under another config: relearn
        rep.detector.reset(stored, key)
        self._set(rep, A.SPEC_ACCEPTANCE_DROP, False, self._clock())

    def _baseline_key(self, rep: _Replica) -> str:
        return baseline_key(rep.target, self.config.key_prefix)

    def _baseline_file(self, rep: _Replica) -> Path:
        assert self.config.state_dir is not None
        return baseline_path(self.config.state_dir, self._baseline_key(rep))

    def _drain_node_events(self, now: float) -> None:
        by_name = {r.target.name: r for r in self._replicas}
        while True:
            try:
                props = self.events.get_nowait()
            except queue.Empty:
                return
            for event in node_events(props, self.gpu_paths):
                rep = by_name.get(event.replica)
                if rep is None:
                    continue
                if event.on and event.hold_s is not None:
                    rep.held[event.alert] = now + event.hold_s
                self._set(rep, event.alert, event.on, now, device=event.device,
                          event=event.detail)

    def _drain_kernel(self, now: float) -> None:
        """The kernel log's new lines -> alerts on the replicas whose GPUs they name."""
        if self.kernel is None:
            return
        by_name = {r.target.name: r for r in self._replicas}
        gpus = {r.target.name: r.target.gpus for r in self._replicas}
        for kevent in self.kernel.poll():
            for event in kernel_node_events(kevent, gpus, now):
                rep = by_name[event.replica]
                if event.on:
                    rep.kernel_cause = KernelCause(event.detail, now)
                    if event.hold_s is not None:
                        rep.held[event.alert] = now + event.hold_s
                self._set(rep, event.alert, event.on, now, device=event.device,
                          event=event.detail)

    def _kernel_cause(self, rep: _Replica, now: float) -> dict[str, str]:
        """The kernel's cause for a replica's stall or outage, when it spoke lately."""
        cause = rep.kernel_cause
        if cause is None or now - cause.at_s > KERNEL_HOLD_S:
            return {}
        return {"kernel_cause": cause.text}

    def _expire_held(self, rep: _Replica, now: float) -> None:
        for alert, until in list(rep.held.items()):
            if now >= until:
                del rep.held[alert]
                self._set(rep, alert, False, now)

    def _status(
        self, rep: _Replica, window: Window | None, error: str | None, *, restarted: bool,
        blind: bool, now: float,
    ) -> ReplicaStatus:
        verdict = rep.last_verdict
        det = rep.detector
        return ReplicaStatus(
            replica=rep.target.name,
            url=rep.target.shown_url,
            up=error is None,
            error=error,
            scrape_errors_total=rep.errors_total,
            consecutive_failures=rep.failures,
            key=det.key,
            window=window,
            judged=verdict.judged if verdict else None,
            restarted=restarted,
            blind=blind,
            baseline=det.baseline,
            learning=(verdict.learning if verdict is not None and verdict.mean_only
                      else det.baseline is None),
            expected_al=verdict.expected_al if verdict else None,
            lower_al=verdict.lower_al if verdict else None,
            cusum=det.cusum,
            z=verdict.z if verdict else None,
            stalled_for_s=None if rep.stall_since is None else now - rep.stall_since,
            alerts=self.book.for_replica(rep.target.name),
            labels=rep.target.labels,
            restarts_in_row=rep.restarts,
            gpus=rep.target.gpus,
            speculating=self._expects_spec(rep),
            spawn_factor=rep.spawn_factor,
        )

    def run(self, stop: threading.Event, on_step: Callable[[list[ReplicaStatus]], None]) -> None:
        """Evaluate every `interval_s` on a fixed schedule until `stop` is set. A set `stop`
        also cuts an evaluation's wait for its scrapes (SIGTERM stops within a second)."""
        self._stop = stop
        next_at = time.monotonic()
        while not stop.is_set():
            statuses = self.step()
            if stop.is_set():
                break
            on_step(statuses)
            next_at += self.config.interval_s
            now = time.monotonic()
            next_at = max(next_at, now)  # a step overran (timeouts): skip, do not burst
            stop.wait(next_at - now)


def baseline_key(target: Target, seat: str = "") -> str:
    """Whose baseline a file holds: `<seat>.<replica>` in seat mode (a seat's replica names are
    its own); a `--target` or file_sd replica by its name and a digest of its (redacted) URL,
    so two watchers that give one name to two replicas never share a baseline."""
    if seat:
        return f"{seat}.{target.name}"
    digest = hashlib.sha256(target.shown_url.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{target.name}.{digest[:12]}"


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}"
