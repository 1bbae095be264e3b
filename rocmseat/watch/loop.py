"""The evaluation loop: scrape every target, window, detect, turn conditions into transitions.

Everything nondeterministic is injected (fetch, clock): tests drive `step()` against a real
local HTTP server or canned pages. Scrapes run in a thread pool so one hung replica cannot hold
the others' evaluation past its timeout; sinks get transitions through `on_transition`, which
must not block (sinks.BackgroundSender).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from rocmseat.errors import RocmseatError
from rocmseat.watch import alerts as A
from rocmseat.watch.alerts import AlertBook, Transition
from rocmseat.watch.baseline import (
    UNKEYED,
    baseline_path,
    load_baseline,
    read_config_key,
    save_baseline,
)
from rocmseat.watch.detector import DetectorParams, SpecDetector, SpecVerdict
from rocmseat.watch.metrics import Reading, read_page
from rocmseat.watch.scrape import Target, fetch_metrics
from rocmseat.watch.status import ReplicaStatus
from rocmseat.watch.uevents import GpuPath, node_events
from rocmseat.watch.window import Snapshot, Window, window_between

Fetch = Callable[[str, float], str]


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


@dataclass(slots=True)
class _Replica:
    target: Target
    detector: SpecDetector
    previous: Snapshot | None = None
    failures: int = 0
    errors_total: int = 0
    stall_since: float | None = None
    last_verdict: SpecVerdict | None = None
    held: dict[str, float] = field(default_factory=dict)  # one-shot node alerts: until when


class Watcher:
    def __init__(
        self,
        targets: list[Target],
        config: WatchConfig,
        *,
        fetch: Fetch = fetch_metrics,
        clock: Callable[[], float] = time.time,
        on_transition: Callable[[Transition], None] = lambda t: None,
        gpu_paths: list[GpuPath] | None = None,
        on_warning: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.config = config
        self.book = AlertBook()
        self.events: queue.Queue[dict[str, str]] = queue.Queue()
        self.gpu_paths = gpu_paths or []
        self._fetch = fetch
        self._clock = clock
        self._emit = on_transition
        self._warn = on_warning
        self._replicas = [
            _Replica(t, SpecDetector(params=config.params, key="", pinned_al=config.pinned_al))
            for t in targets
        ]
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(targets)))
        self._lock = threading.Lock()
        self.statuses: list[ReplicaStatus] = []

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def step(self) -> list[ReplicaStatus]:
        """One evaluation: scrape all targets concurrently, then judge each in order."""
        futures = [
            self._pool.submit(self._scrape, r.target.url) for r in self._replicas
        ]
        results = [f.result() for f in futures]
        now = self._clock()
        self._drain_node_events(now)
        pairs = zip(self._replicas, results, strict=True)
        statuses = [self._evaluate(r, res, now) for r, res in pairs]
        with self._lock:
            self.statuses = statuses
        return statuses

    def _scrape(self, url: str) -> tuple[float, Reading | None, str | None]:
        started = self._clock()
        try:
            return started, read_page(self._fetch(url, self.config.timeout_s)), None
        except RocmseatError as exc:
            return started, None, exc.message
        except Exception as exc:  # a scrape must never crash the loop: garbage is an error
            return started, None, f"{type(exc).__name__}: {exc}"

    def _set(self, replica: str, alert: str, on: bool, now: float, **details: str) -> None:
        transition = self.book.set(replica, alert, on, now, details)
        if transition is not None:
            self._emit(transition)

    def _evaluate(
        self, rep: _Replica, result: tuple[float, Reading | None, str | None], now: float
    ) -> ReplicaStatus:
        name = rep.target.name
        scraped_at, reading, error = result
        self._expire_held(rep, now)
        if reading is None:
            rep.failures += 1
            rep.errors_total += 1
            down = rep.failures >= self.config.down_after
            self._set(name, A.REPLICA_DOWN, down, now, failures=str(rep.failures),
                      error=(error or "")[:120])
            return self._status(rep, None, error, restarted=False, blind=False, now=now)
        rep.failures = 0
        self._set(name, A.REPLICA_DOWN, False, now)
        blind = self.config.expect_spec and not reading.spec_present
        self._set(name, A.SPEC_BLIND, blind, now)
        self._check_key(rep)
        snapshot = Snapshot(scraped_at, reading)
        window: Window | None = None
        restarted = False
        if rep.previous is not None:
            window = window_between(rep.previous, snapshot)
            restarted = window is None
        rep.previous = snapshot
        if restarted:
            rep.stall_since = None
        if window is not None:
            self._judge(rep, window, now)
            self._judge_stall(rep, window, snapshot, now)
        return self._status(rep, window, None, restarted=restarted, blind=blind, now=now)

    def _judge(self, rep: _Replica, window: Window, now: float) -> None:
        verdict = rep.detector.observe(window, now)
        rep.last_verdict = verdict
        if verdict.learned is not None and self.config.state_dir is not None:
            path = self._baseline_file(rep)
            try:
                save_baseline(path, verdict.learned)
            except OSError as exc:  # keep it in memory and keep watching; say so once
                why = str(exc.strerror or exc).replace(" ", "_")
                self._warn(f"rocmseat-watch replica={rep.target.name} baseline-not-saved "
                           f"path={path} error={why}")
        judged = verdict.judged
        al = judged.acceptance_length if judged is not None else None
        details = {
            "al": _fmt(al),
            "baseline": _fmt(verdict.expected_al),
            "drafts": _fmt(judged.drafts if judged else None, 0),
        }
        self._set(rep.target.name, A.SPEC_ACCEPTANCE_DROP, verdict.drop, now, **details,
                  cusum=_fmt(verdict.cusum))
        p0 = None
        if judged is not None and judged.drafts > 0 and judged.accepted_per_pos:
            p0 = judged.accepted_per_pos[0] / judged.drafts
        self._set(rep.target.name, A.SPEC_DRAFTER_DEAD, verdict.dead, now, **details,
                  p0=_fmt(p0))

    def _judge_stall(self, rep: _Replica, window: Window, snap: Snapshot, now: float) -> None:
        running = window.running or 0.0
        flat = window.generation_tokens is not None and window.generation_tokens <= 0
        if running > 0 and flat:
            if rep.stall_since is None:
                rep.stall_since = snap.time_s - window.duration_s
        else:
            rep.stall_since = None
        stalled_for = None if rep.stall_since is None else now - rep.stall_since
        stalled = stalled_for is not None and stalled_for >= self.config.stall_after_s
        self._set(rep.target.name, A.REPLICA_STALLED, stalled, now, running=_fmt(running, 0),
                  flat_s=_fmt(stalled_for, 0))

    def _check_key(self, rep: _Replica) -> None:
        key = UNKEYED
        if rep.target.cache_dir is not None:
            key = read_config_key(rep.target.cache_dir) or "no-manifest"
        if key == rep.detector.key:
            return
        stored = None
        if self.config.state_dir is not None and self.config.pinned_al is None:
            stored = load_baseline(self._baseline_file(rep))
            if stored is not None and stored.key != key:
                stored = None  # learned under another config: relearn
        rep.detector.reset(stored, key)
        self._set(rep.target.name, A.SPEC_ACCEPTANCE_DROP, False, self._clock())

    def _baseline_file(self, rep: _Replica) -> Path:
        assert self.config.state_dir is not None
        prefix = f"{self.config.key_prefix}." if self.config.key_prefix else ""
        return baseline_path(self.config.state_dir, prefix + rep.target.name)

    def _drain_node_events(self, now: float) -> None:
        while True:
            try:
                props = self.events.get_nowait()
            except queue.Empty:
                return
            for event in node_events(props, self.gpu_paths):
                rep = next((r for r in self._replicas if r.target.name == event.replica), None)
                if rep is None:
                    continue
                if event.on and event.hold_s is not None:
                    rep.held[event.alert] = now + event.hold_s
                self._set(event.replica, event.alert, event.on, now, device=event.device,
                          event=event.detail)

    def _expire_held(self, rep: _Replica, now: float) -> None:
        for alert, until in list(rep.held.items()):
            if now >= until:
                del rep.held[alert]
                self._set(rep.target.name, alert, False, now)

    def _status(
        self, rep: _Replica, window: Window | None, error: str | None, *, restarted: bool,
        blind: bool, now: float,
    ) -> ReplicaStatus:
        verdict = rep.last_verdict
        det = rep.detector
        return ReplicaStatus(
            replica=rep.target.name,
            url=rep.target.url,
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
            learning=det.baseline is None,
            expected_al=verdict.expected_al if verdict else None,
            lower_al=verdict.lower_al if verdict else None,
            cusum=det.cusum,
            z=verdict.z if verdict else None,
            stalled_for_s=None if rep.stall_since is None else now - rep.stall_since,
            alerts=self.book.for_replica(rep.target.name),
        )

    def run(self, stop: threading.Event, on_step: Callable[[list[ReplicaStatus]], None]) -> None:
        """Evaluate every `interval_s` on a fixed schedule until `stop` is set."""
        next_at = time.monotonic()
        while not stop.is_set():
            on_step(self.step())
            next_at += self.config.interval_s
            now = time.monotonic()
            next_at = max(next_at, now)  # a step overran (timeouts): skip, do not burst
            stop.wait(next_at - now)


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}"
