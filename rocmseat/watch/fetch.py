"""The watch's scrapes other than over the network client: an injected `fetch(url, timeout_s)`
(tests, canned pages) behind the same deadline as rocmseat's one HTTP client
(rocmseat.httpclient); one scrape on a fresh connection is `rocmseat.httpclient.fetch_once`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from rocmseat.errors import RocmseatError
from rocmseat.httpclient import (
    POLL_S,
    NewSink,
    Result,
    ScrapeError,
    Stopped,
    TextSink,
    short_why,
)
from rocmseat.redact import redact_url

Fetch = Callable[[str, float], str]


class CallableScraper:
    """An injected `fetch(url, timeout_s) -> text` (tests, canned pages) behind the same
    deadline: a call that has not returned by then is a timeout (its thread is left to end)."""

    def __init__(self, fetch: Fetch, *, workers: int = 8) -> None:
        self._fetch = fetch
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rocmseat-fetch")

    def fetch_many(
        self, urls: Sequence[str], timeout_s: float, stop: threading.Event | None = None, *,
        new_sink: NewSink = TextSink,
    ) -> list[Result]:
        futures = [self._pool.submit(self._call, u, timeout_s) for u in urls]
        deadline = time.monotonic() + timeout_s
        out: list[Result] = []
        for url, future in zip(urls, futures, strict=True):
            got = _wait(future, deadline, stop, url, timeout_s)
            if isinstance(got, str):
                try:
                    sink = new_sink()
                    sink.feed(got)
                    got = sink.finish()
                except RocmseatError as exc:
                    got = exc
            out.append(got)
        return out

    def _call(self, url: str, timeout_s: float) -> Result:
        try:
            return self._fetch(url, timeout_s)
        except ScrapeError as exc:
            return exc
        except RocmseatError as exc:
            return ScrapeError(exc.message)
        except Exception as exc:
            return ScrapeError(f"{redact_url(url)}: {type(exc).__name__}: {short_why(exc)}")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _wait(future: Future[Result], deadline: float, stop: threading.Event | None, url: str,
          timeout_s: float) -> Result:
    while True:
        if stop is not None and stop.is_set():
            return Stopped("the watcher is stopping")
        left = deadline - time.monotonic()
        if left <= 0 and not future.done():
            return ScrapeError(f"{redact_url(url)}: timed out after {timeout_s:g} s")
        try:
            return future.result(timeout=max(0.0, min(left, POLL_S)))
        except FutureTimeout:
            continue

