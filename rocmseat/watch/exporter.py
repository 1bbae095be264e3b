"""The watchdog's own /metrics: a custom collector over the latest statuses, in its own registry.

No global registry (nothing registers at import time); the collector reads an immutable list of
ReplicaStatus that the loop replaces after each evaluation, so a scrape never sees half a step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from rocmseat.watch.alerts import ALERTS
from rocmseat.watch.status import ReplicaStatus

StatusSource = Callable[[], list[ReplicaStatus]]


class WatchCollector:
    def __init__(self, source: StatusSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        statuses = self._source()

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ("replica",)) -> Any:
            return GaugeMetricFamily(name, doc, labels=list(labels))

        up = gauge("rocmseat_replica_up", "1 when the replica's /metrics was scraped and parsed.")
        errors = CounterMetricFamily(
            "rocmseat_scrape_errors", "Failed scrapes of the replica's /metrics.",
            labels=["replica"],
        )
        al = gauge("rocmseat_spec_acceptance_length",
                   "Mean acceptance length (1 + accepted/drafts) of the last judged window.")
        rate = gauge("rocmseat_spec_draft_acceptance_rate",
                     "Accepted draft tokens / draft tokens in the last judged window.")
        pos = gauge("rocmseat_spec_position_acceptance",
                    "Share of drafts whose first position+1 tokens were accepted (last judged "
                    "window).", ("replica", "position"))
        eff_k = gauge("rocmseat_spec_effective_k", "Draft tokens per draft in the last window.")
        drafts = gauge("rocmseat_spec_drafts_per_second", "Drafts per second in the last window.")
        base = gauge("rocmseat_spec_baseline_acceptance_length",
                     "The baseline acceptance length (pinned or learned) at full K.")
        expected = gauge("rocmseat_spec_expected_acceptance_length",
                         "The baseline at the judged window's effective K.")
        cusum = gauge("rocmseat_spec_cusum", "The acceptance-drop CUSUM (alarm at threshold h).")
        gen = gauge("rocmseat_generation_tokens_per_second",
                    "Generated tokens per second in the last window.")
        running = gauge("rocmseat_requests_running", "Requests running (vLLM gauge, summed).")
        waiting = gauge("rocmseat_requests_waiting", "Requests waiting (vLLM gauge, summed).")
        kv = gauge("rocmseat_kv_cache_usage_ratio", "KV-cache usage of the fullest engine (0-1).")
        prefix = gauge("rocmseat_prefix_cache_hit_ratio", "Prefix-cache hits/queries, last window.")
        alert = gauge("rocmseat_alert_active", "1 while the alert is firing.", ("replica", "alert"))
        for s in statuses:
            r = s.replica
            up.add_metric([r], 1.0 if s.up else 0.0)
            errors.add_metric([r], float(s.scrape_errors_total))
            for name in ALERTS:
                alert.add_metric([r, name], 1.0 if name in s.alerts else 0.0)
            if s.baseline is not None:
                base.add_metric([r], s.baseline.acceptance_length)
            if s.expected_al is not None:
                expected.add_metric([r], s.expected_al)
            cusum.add_metric([r], s.cusum)
            judged = s.judged
            if judged is not None:
                _add(al, [r], judged.acceptance_length)
                _add(rate, [r], judged.draft_acceptance_rate)
                for i, value in enumerate(judged.position_acceptance or ()):
                    pos.add_metric([r, str(i)], value)
            window = s.window
            if window is not None:
                _add(eff_k, [r], window.effective_k)
                _add(drafts, [r], window.drafts_per_s)
                _add(gen, [r], window.generation_tokens_per_s)
                _add(running, [r], window.running)
                _add(waiting, [r], window.waiting)
                _add(kv, [r], window.kv_usage)
                _add(prefix, [r], window.prefix_cache_hit_rate)
        yield from (up, errors, al, rate, pos, eff_k, drafts, base, expected, cusum, gen,
                    running, waiting, kv, prefix, alert)


def _add(family: Any, labels: list[str], value: float | None) -> None:
    if value is not None:
        family.add_metric(labels, value)


def make_registry(source: StatusSource) -> Any:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(WatchCollector(source))
    return registry


def render(source: StatusSource) -> str:
    from prometheus_client import generate_latest

    return str(generate_latest(make_registry(source)).decode())


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--exporter-listen {value!r}: expected HOST:PORT")
    return host.strip("[]") or "127.0.0.1", int(port)


def start_exporter(listen: str, source: StatusSource) -> tuple[Any, Any]:
    """Serve the registry on HOST:PORT; returns (server, thread) for shutdown."""
    from prometheus_client import start_http_server

    host, port = parse_listen(listen)
    return start_http_server(port, addr=host, registry=make_registry(source))
