"""Alert sinks that must never block the evaluation loop: webhook and command hook.

Each sink owns one daemon thread and a pending map keyed by alert identity: `submit` only takes a
lock for a dict assignment, so a stuck receiver cannot delay an evaluation. A newer state of an
alert replaces an older one still pending (deduplication); a failed delivery is retried with
exponential backoff, and dropped with one line after `max_attempts`.

A receiver that fails is said while it fails, not only when a retry gives up (the 60 s re-send
of a firing alert supersedes a retry before its 8th attempt): one line when deliveries start
failing, one when they work again, and every failed attempt counted (`failures`, exported as
`rocmseat_webhook_failures_total` / `rocmseat_command_hook_failures_total`). URLs in these lines
are redacted (rocmseat/redact.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from rocmseat.errors import CommandError
from rocmseat.httpclient import ScrapeError
from rocmseat.jsonio import dumps_line
from rocmseat.redact import redact_argv, redact_text, redact_url
from rocmseat.runner import run
from rocmseat.watch.alerts import FIRING, Transition

Deliver = Callable[[list[dict[str, Any]]], None]


class BackgroundSender:
    def __init__(
        self,
        name: str,
        deliver: Deliver,
        *,
        on_error: Callable[[str], None],
        backoff_s: Sequence[float] = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0),
        max_attempts: int = 8,
        batch: bool = True,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        self.name = name
        self._deliver = deliver
        self._on_error = on_error
        self._backoff = tuple(backoff_s)
        self._max_attempts = max_attempts
        self._batch = batch
        self._pending: dict[str, dict[str, Any]] = {}
        self._cond = threading.Condition()
        self._stop = threading.Event()
        # Sleeps between attempts; returns True when the sender is closing. Injected in tests.
        self._wait = wait or self._stop.wait
        self.delivered = 0
        self.failures = 0  # failed attempts, ever
        self.failing = False  # the last attempt failed
        self._failed_since = 0  # failed attempts since the last success
        self._inflight = 0
        self._thread = threading.Thread(target=self._work, name=f"rocmseat-{name}", daemon=True)
        self._thread.start()

    def submit(self, key: str, payload: dict[str, Any]) -> None:
        with self._cond:
            self._pending.pop(key, None)  # keep order: the newest state goes last
            self._pending[key] = payload
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    def close(self, timeout_s: float = 0.3) -> None:
        """Stop the worker; what is still pending after `timeout_s` is reported, not kept.
        Short: the watcher stops within a second of SIGTERM, a hung receiver included."""
        self.begin_close()
        self.finish_close(timeout_s)

    def begin_close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify()

    def finish_close(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        with self._cond:
            left = len(self._pending) + (self._inflight if self._thread.is_alive() else 0)
        if left:
            self._on_error(f"rocmseat-watch sink={self.name} not-delivered-at-exit alerts={left}")

    def _take(self) -> list[tuple[str, dict[str, Any]]]:
        with self._cond:
            while not self._pending and not self._stop.is_set():
                self._cond.wait()
            items = list(self._pending.items())
            if not self._batch:
                items = items[:1]
            for key, _ in items:
                del self._pending[key]
            self._inflight = len(items)
            return items

    def _work(self) -> None:
        while not self._stop.is_set():
            items = self._take()
            if not items:
                continue
            self._send(items)
            with self._cond:
                self._inflight = 0

    def _send(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        """Deliver one batch: retry with backoff until it goes through, is superseded by a newer
        state of the same alerts, or `max_attempts` are spent."""
        attempt = 0
        while True:
            try:
                self._deliver([payload for _, payload in items])
                self.delivered += len(items)
                self._succeeded()
                return
            except Exception as exc:  # a sink must never kill its thread
                attempt += 1
                self._failed(exc)
                if attempt >= self._max_attempts:
                    self._on_error(f"rocmseat-watch sink={self.name} gave-up attempts={attempt} "
                                   f"alerts={len(items)} error={_one_token(exc)}")
                    return
                delay = self._backoff[min(attempt - 1, len(self._backoff) - 1)]
                if self._wait(delay):
                    self._requeue(items)
                    return
                # A newer state submitted meanwhile supersedes the one being retried.
                with self._cond:
                    items = [(k, p) for k, p in items if k not in self._pending]
                if not items:
                    return

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        self._failed_since += 1
        if not self.failing:
            self.failing = True
            self._on_error(f"rocmseat-watch sink={self.name} delivery-failing "
                           f"error={_one_token(exc)}")

    def _succeeded(self) -> None:
        if self.failing:
            self.failing = False
            self._on_error(f"rocmseat-watch sink={self.name} delivery-recovered "
                           f"failed_attempts={self._failed_since}")
        self._failed_since = 0

    def _requeue(self, items: list[tuple[str, dict[str, Any]]]) -> None:
        with self._cond:
            for key, payload in items:
                self._pending.setdefault(key, payload)


def _one_token(exc: BaseException) -> str:
    text = redact_text(str(exc) or type(exc).__name__)
    return "_".join(text.split())[:200]


def webhook_deliver(url: str, *, timeout_s: float = 10.0) -> Deliver:
    """POST the batch as Alertmanager v2 expects it: a JSON list of alerts, with rocmseat's one
    HTTP client (rocmseat.httpclient.request). Userinfo in the URL is sent as Basic auth and
    redacted in every error; a redirect is not followed (a 3xx is a failed delivery)."""
    from rocmseat.httpclient import request

    shown = redact_url(url)

    def deliver(batch: list[dict[str, Any]]) -> None:
        body = dumps_line(batch).encode()
        try:
            response = request("POST", url, timeout_s=timeout_s, body=body,
                               headers=[("Content-Type", "application/json")])
        except ScrapeError as exc:  # the message names the redacted URL already
            raise RuntimeError(f"POST {exc.message}") from None
        if response.status >= 300:
            raise RuntimeError(f"POST {shown}: HTTP {response.status}")

    return deliver


def command_deliver(argv: Sequence[str], *, timeout_s: float = 30.0) -> Deliver:
    """Run the hook once per alert state change, the alert's JSON on stdin (argv, no shell)."""
    command = list(argv)

    def deliver(batch: list[dict[str, Any]]) -> None:
        for payload in batch:
            done = run(command, timeout_s=timeout_s,
                       input_text=dumps_line(payload) + "\n")
            if not done.ok:
                raise CommandError(redact_argv(command), done.returncode, done.stdout,
                                   done.stderr)

    return deliver


class AlertFanout:
    """Route each transition to the log line, the webhook and the command hook.

    Alertmanager resolves an alert whose endsAt is unset after its resolve_timeout (5 min by
    default) unless the client re-sends it, as Prometheus does; `keepalive` re-submits firing
    alerts every `resend_s` (the pending map keeps that deduplicated).
    """

    def __init__(
        self,
        log: Callable[[str], None],
        *,
        webhook: BackgroundSender | None = None,
        hook: BackgroundSender | None = None,
        seat: str | None = None,
        node: str | None = None,
        resend_s: float = 60.0,
    ) -> None:
        self._log = log
        self._webhook = webhook
        self._hook = hook
        self._seat = seat
        self._node = node
        self._resend_s = resend_s
        self._firing: dict[str, tuple[Transition, float]] = {}

    def __call__(self, transition: Transition) -> None:
        self._log(transition.log_line())
        key = f"{transition.replica}/{transition.alert}"
        if transition.state == FIRING:
            self._firing[key] = (transition, transition.starts_at_s)
        else:
            self._firing.pop(key, None)
        if self._webhook is not None:
            self._webhook.submit(key, self._payload(transition))
        if self._hook is not None:
            self._hook.submit(f"{key}/{transition.state}", transition.to_json())

    def keepalive(self, now_s: float) -> None:
        if self._webhook is None:
            return
        for key, (transition, last) in list(self._firing.items()):
            if now_s - last >= self._resend_s:
                self._firing[key] = (transition, now_s)
                self._webhook.submit(key, self._payload(transition))

    def _payload(self, transition: Transition) -> dict[str, Any]:
        return transition.to_alertmanager(seat=self._seat, node=self._node)

    def failures(self) -> dict[str, tuple[int, bool]]:
        """sink name -> (failed attempts, failing now), for the exporter."""
        return {s.name: (s.failures, s.failing)
                for s in (self._webhook, self._hook) if s is not None}

    def close(self, timeout_s: float = 0.3) -> None:
        senders = [s for s in (self._webhook, self._hook) if s is not None]
        for sender in senders:
            sender.begin_close()
        for sender in senders:  # joined together: one bound for both
            sender.finish_close(timeout_s)
