"""The two ways to run the watchdog: one window (`run_once`) and the service (`run_service`).

Output goes through the injected `log` callable (the CLI passes stderr): this module neither
prints nor exits. The service stops when `stop` is set (the CLI sets it on SIGTERM/SIGINT).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rocmseat import exitcodes
from rocmseat.errors import ConfigError
from rocmseat.watch import alerts as A
from rocmseat.watch.exporter import start_exporter
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.scrape import HttpFetch, Target
from rocmseat.watch.sinks import AlertFanout, BackgroundSender, command_deliver, webhook_deliver
from rocmseat.watch.status import ReplicaStatus
from rocmseat.watch.uevents import UeventMonitor

# --once: these mean "could not check" (exit 2); any other active alert is a problem (exit 1).
_CANNOT_CHECK = frozenset({A.REPLICA_DOWN, A.SPEC_BLIND})


@dataclass(frozen=True, slots=True)
class Sinks:
    exporter_listen: str = "127.0.0.1:9464"  # "off": no exporter
    webhook_url: str | None = None
    command_hook: tuple[str, ...] | None = None
    seat_name: str | None = None


def run_once(
    targets: list[Target], config: WatchConfig, *, sleep: Callable[[float], None] = time.sleep
) -> list[ReplicaStatus]:
    """Two scrapes `interval_s` apart; the statuses of that one window."""
    watcher = Watcher(targets, config)
    try:
        watcher.step()
        sleep(config.interval_s)
        return watcher.step()
    finally:
        watcher.close()


def once_exit_code(statuses: list[ReplicaStatus]) -> int:
    active = {a for s in statuses for a in s.alerts}
    if active - _CANNOT_CHECK:
        return exitcodes.PROBLEM
    if active or any(not s.up for s in statuses):
        return exitcodes.CANNOT_CHECK
    return exitcodes.OK


def run_service(
    targets: list[Target],
    config: WatchConfig,
    sinks: Sinks,
    *,
    log: Callable[[str], None],
    stop: threading.Event,
) -> None:
    """Evaluate every interval until `stop`; log, export, post and hook every alert change."""
    fanout = AlertFanout(
        log,
        webhook=BackgroundSender("webhook", webhook_deliver(sinks.webhook_url), on_error=log)
        if sinks.webhook_url else None,
        hook=BackgroundSender("command-hook", command_deliver(sinks.command_hook),
                              on_error=log, batch=False) if sinks.command_hook else None,
        seat=sinks.seat_name,
    )
    fetch = HttpFetch()
    watcher = Watcher(targets, config, fetch=fetch, on_transition=fanout, on_warning=log)
    monitor: UeventMonitor | None = None
    server = None
    try:
        if sinks.exporter_listen != "off":
            try:
                server, _ = start_exporter(sinks.exporter_listen, lambda: watcher.statuses)
            except OSError as exc:
                raise ConfigError(
                    f"--exporter-listen {sinks.exporter_listen}: {exc.strerror or exc}",
                    hint="choose another HOST:PORT, or 'off'",
                ) from None
        monitor = _start_node_events(targets, watcher, log)
        names = ",".join(t.name for t in targets)
        log(f"rocmseat-watch start replicas={names} interval_s={config.interval_s:g} "
            f"exporter={sinks.exporter_listen}")
        watcher.run(stop, lambda statuses: fanout.keepalive(time.time()))
    finally:
        if monitor is not None:
            monitor.stop()
        if server is not None:
            server.shutdown()
            server.server_close()
        fanout.close()
        watcher.close()
        fetch.close()
        log("rocmseat-watch stop")


def _start_node_events(
    targets: list[Target], watcher: Watcher, log: Callable[[str], None]
) -> UeventMonitor | None:
    gpus = {t.name: t.gpus for t in targets if t.gpus}
    if not gpus:
        return None
    try:
        monitor = UeventMonitor(watcher.events)
        watcher.gpu_paths = monitor.resolve(gpus)
        monitor.start()
    except Exception as exc:  # no udev netlink in this container: say so, keep watching
        log(f"rocmseat-watch node-events unavailable: {exc}")
        return None
    log(f"rocmseat-watch node-events watching {len(watcher.gpu_paths)} GPU(s)")
    return monitor
