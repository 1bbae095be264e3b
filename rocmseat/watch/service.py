"""The two ways to run the watchdog: one window (`run_once`) and the service (`run_service`).

Output goes through the injected `log` callable (the CLI passes stderr): this module neither
prints nor exits. The service stops when `stop` is set (the CLI sets it on SIGTERM/SIGINT):
the evaluation in flight is cut, and the listener and sinks close within a second.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rocmseat import exitcodes
from rocmseat.errors import ConfigError
from rocmseat.httpclient import FD_RESERVE, ensure_descriptors
from rocmseat.watch import alerts as A
from rocmseat.watch.alerts import iso
from rocmseat.watch.canary_service import CanaryService
from rocmseat.watch.exporter import START_LINE, ExportState, listen_address, start_exporter
from rocmseat.watch.filesd import BackgroundPoll, Reload, TargetsFile
from rocmseat.watch.kernel import KernelFollower, upstream_paths
from rocmseat.watch.loop import WatchConfig, Watcher
from rocmseat.watch.remediate.service import Remediator
from rocmseat.watch.scrape import Target
from rocmseat.watch.sinks import AlertFanout, BackgroundSender, command_deliver, webhook_deliver
from rocmseat.watch.status import ReplicaStatus
from rocmseat.watch.uevents import UeventMonitor

# --once: these mean "could not check" (exit 2); any other active alert is a problem (exit 1).
CANNOT_CHECK = frozenset({A.REPLICA_DOWN, A.SPEC_BLIND, A.METRICS_UNSTABLE})


@dataclass(frozen=True, slots=True)
class Sinks:
    exporter_listen: str = "127.0.0.1:9464"  # "off": no exporter
    webhook_url: str | None = None
    command_hook: tuple[str, ...] | None = None
    seat_name: str | None = None
    node: str | None = None  # the node label on alerts (seat mode: this host)


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
    """1 a problem; 2 could not check (a scrape error, blind, no window: restarted between the
    two scrapes or an impossible window; requests served with no draft, so no acceptance to
    judge); 0 nothing active."""
    active = {a for s in statuses for a in s.alerts}
    if active - CANNOT_CHECK:
        return exitcodes.PROBLEM
    if active or any(not s.up or s.restarted or s.undrafted for s in statuses):
        return exitcodes.CANNOT_CHECK
    return exitcodes.OK


def under_journald(environ: Mapping[str, str], fd: int = 2) -> bool:
    """True when `fd` is the journal stream systemd connected (systemd.exec(5),
    $JOURNAL_STREAM: "the device and inode numbers of the file descriptor", `DEV:INODE`, set
    when stdout or stderr is connected to the journal): journald stamps each line itself."""
    dev, sep, ino = environ.get("JOURNAL_STREAM", "").partition(":")
    if not (sep and dev.isdigit() and ino.isdigit()):
        return False
    try:
        info = os.fstat(fd)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == (int(dev), int(ino))


def stamped(line: str, now_s: float) -> str:
    """A log line with its time first, logfmt style (`ts=2026-12-01T09:44:27.123Z ...`), for
    a log that is not the journal."""
    return f"ts={iso(now_s)} {line}"


def check_targets(targets: list[Target], where: str = "") -> None:
    """A watcher needs something to watch, and one descriptor per target (its kept-alive
    connection; every scrape of an evaluation starts at once): a ConfigError (exit 2) if not."""
    if not targets:
        raise ConfigError(f"{where or 'rocmseat watch'}: no targets to watch",
                          hint="give --target URLs, a --targets-file that lists targets, or a "
                          "seat")
    enough, limit = ensure_descriptors(len(targets))
    if not enough:
        raise ConfigError(
            f"{len(targets):,} targets need {len(targets) + FD_RESERVE:,} file descriptors; "
            f"the limit is {limit:,}",
            hint="raise it (LimitNOFILE= in the unit, ulimit -n) or split the targets file")


def raise_fd_limit(targets: int) -> bool:
    """Lift the soft descriptor limit toward the hard one for `targets`; True if enough."""
    return ensure_descriptors(targets)[0]


@dataclass(frozen=True, slots=True)
class Parts:
    """What a watch service runs beside its watcher, each optional: the targets file re-read
    when it changes (its targets come after `extra_targets`), the seat's remediator and drafter
    canary (made once the watcher exists), and this node's kernel log, followed for the
    replicas' GPUs (watch/kernel.py)."""

    targets_file: TargetsFile | None = None
    extra_targets: list[Target] | None = None
    remediate: Callable[[Callable[[str], None]], Remediator] | None = None
    kernel_log: Path | None = None
    canary: Callable[[Watcher, Callable[[str], None]], CanaryService] | None = None
    # the node's sysfs root: each GPU's bridges up to its root port, so that an AER line naming
    # the root port reaches the replica below it (rocmseat.watch.kernel.upstream_paths)
    sysfs_root: Path | None = None


def run_service(  # noqa: PLR0915
    targets: list[Target],
    config: WatchConfig,
    sinks: Sinks,
    *,
    log: Callable[[str], None],
    stop: threading.Event,
    parts: Parts = Parts(),
) -> None:
    """Evaluate every interval until `stop`; log, export, post and hook every alert change."""
    targets_file, extra_targets = parts.targets_file, parts.extra_targets
    remediate, kernel_log, canary = parts.remediate, parts.kernel_log, parts.canary
    fanout = AlertFanout(
        log,
        webhook=BackgroundSender("webhook", webhook_deliver(sinks.webhook_url), on_error=log)
        if sinks.webhook_url else None,
        hook=BackgroundSender("command-hook", command_deliver(sinks.command_hook),
                              on_error=log, batch=False) if sinks.command_hook else None,
        seat=sinks.seat_name,
        node=sinks.node,
    )
    raise_fd_limit(len(targets))
    watcher = Watcher(targets, config, on_transition=fanout, on_warning=log)
    remediator = remediate(log) if remediate is not None else None  # docs/remediate.md
    canary_service = canary(watcher, log) if canary is not None else None  # [canary]
    if canary_service is not None:
        watcher.take_canary = canary_service.take
        watcher.on_restart = canary_service.restarted
        if remediator is not None:  # step 1 judged by the canary's first round on the new engine
            remediator.canary_round = canary_service.last_round
        canary_service.start()
    started = time.time()

    def state() -> ExportState:
        return ExportState(
            statuses=tuple(watcher.statuses), evaluated_at_s=watcher.evaluated_at_s,
            started_at_s=started, max_age_s=config.max_age_s, evaluations=watcher.evaluations,
            last_duration_s=watcher.last_duration_s,
            sink_failures=tuple((n, c, f) for n, (c, f) in sorted(fanout.failures().items())),
            remediations=None if remediator is None else tuple(
                (*k, n) for k, n in sorted(remediator.counts.items())),
            remediation_halted=() if remediator is None else tuple(remediator.halted_scopes()),
            min_ready=config.min_ready,
        )

    monitor: UeventMonitor | None = None
    follower: KernelFollower | None = None
    server = None
    try:
        if sinks.exporter_listen != "off":
            try:
                server, _ = start_exporter(sinks.exporter_listen, state)
            except OSError as exc:
                raise ConfigError(
                    f"--exporter-listen {sinks.exporter_listen}: {exc.strerror or exc}",
                    hint="choose another HOST:PORT, or 'off'",
                ) from None
        monitor = _start_node_events(targets, watcher, log)
        follower = _start_kernel_events(targets, watcher, log, kernel_log, parts.sysfs_root)
        names = ",".join(t.name for t in targets) if len(targets) <= 20 else (
            f"{len(targets)} targets")
        where = sinks.exporter_listen
        if server is not None:
            where = listen_address(server)
        log(f"{START_LINE} replicas={names} interval_s={config.interval_s:g} "
            f"timeout_s={config.timeout_s:g} exporter={where}")

        # the file is re-read on a thread of its own; a finished read is applied here, between
        # two evaluations (the watcher's targets change only on its own thread)
        polling = BackgroundPoll(targets_file) if targets_file is not None else None

        def after_step(statuses: list[ReplicaStatus]) -> None:
            if remediator is not None:
                remediator.after_step(watcher)
            fanout.keepalive(time.time())
            if polling is not None:
                done = polling.take()
                if done is not None:
                    _reload(polling.source, done, watcher, extra_targets or [], log)
                polling.request()

        watcher.run(stop, after_step)
    finally:
        if monitor is not None:
            monitor.stop()
        if follower is not None:
            follower.close()
        if server is not None:
            server.shutdown()
            server.server_close()
        if remediator is not None:
            remediator.close()
        if canary_service is not None:
            canary_service.close()
        fanout.close()
        watcher.close()
        log("rocmseat-watch stop")


def _reload(
    source: TargetsFile, reload: Reload, watcher: Watcher, extra: list[Target],
    log: Callable[[str], None],
) -> None:
    if reload.error is not None:
        log(f"rocmseat-watch targets-file-error keeping={len(watcher.targets)} "
            f"error={'_'.join(reload.error.split())}")
        return
    if reload.targets is None:
        return
    taken = {t.name for t in extra}
    clash = next((t.name for t in reload.targets if t.name in taken), None)
    if clash is not None:
        log(f"rocmseat-watch targets-file-error keeping={len(watcher.targets)} "
            f"error={source.path}:_replica_{clash!r}_is_also_a_--target")
        return
    if not raise_fd_limit(len(extra) + len(reload.targets)):
        log(f"rocmseat-watch targets-file-error keeping={len(watcher.targets)} "
            f"error={source.path}:_{len(extra) + len(reload.targets)}_targets_need_more_file_"
            "descriptors_than_the_limit")
        return
    added, removed, relabelled = watcher.set_targets([*extra, *reload.targets])
    log(f"rocmseat-watch targets-file-reloaded path={source.path} "
        f"targets={len(extra) + len(reload.targets)} added={added} removed={removed} "
        f"relabelled={relabelled}")


def this_node() -> str:
    return socket.gethostname() or "localhost"


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


def _start_kernel_events(
    targets: list[Target], watcher: Watcher, log: Callable[[str], None], path: Path | None,
    sysfs_root: Path | None = None,
) -> KernelFollower | None:
    """Follow the kernel log for the replicas that have GPUs (their placement's PCI pair), and
    the bridges above each GPU as the node's sysfs tree shows them."""
    gpus = sum(len(t.gpus) for t in targets)
    if path is None or not gpus:
        return None
    addresses = sorted({g for t in targets for g in t.gpus})
    upstream = upstream_paths(sysfs_root, addresses) if sysfs_root is not None else {}
    follower = KernelFollower(path, upstream)
    problem = follower.start()
    if problem is not None:  # not root, dmesg_restrict: say so, keep watching the rest
        log(f"rocmseat-watch kernel-events unavailable path={path} "
            f"error={'_'.join(problem.split())}")
        return None
    watcher.kernel = follower
    bridges = len({b for chain in upstream.values() for b in chain})
    log(f"rocmseat-watch kernel-events following path={path} gpus={gpus} bridges={bridges}")
    return follower
