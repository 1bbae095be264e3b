"""The scrapes of one evaluation: bounded in time, size and concurrency.

One event loop on one thread serves every target (asyncio streams + h11, the HTTP/1.1 state
machine httpx itself is built on): no thread per target, one keep-alive connection per target,
at most `concurrency` requests in flight. Limits (docs/watch.md, "Limits"):

- one deadline per evaluation, `timeout_s` after it starts, for the whole response of every
  scrape (connect, headers and body): a server that drips its page at 1 byte/s fails at the
  deadline, never later, and the evaluation does not wait past it;
- a body cap (`MAX_BODY_BYTES`, 16 MiB; a vLLM page is 50-100 KiB) counted on the decoded body:
  a response is asked for uncompressed, and one that is compressed anyway (gzip, deflate) is
  inflated only up to the cap, so a gzip bomb costs the cap and no more;
- headers are capped by h11 (`MAX_HEADER_BYTES`); redirects are not followed;
- a `stop` event (SIGTERM, SIGINT) ends the wait within a tenth of a second.

`fetch_many` returns, per URL, the page text (or, with `parse`, what parse made of it on the
loop thread as the page arrived: a thousand 64 KiB pages are never held at once) or the
RocmseatError that says what went wrong (the URL in a ScrapeError redacted: credentials in a
URL are sent as Basic auth and never shown).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import h11

from rocmseat import __version__
from rocmseat.errors import RocmseatError
from rocmseat.redact import redact_text, redact_url
from rocmseat.watch.scrape import ScrapeError

MAX_BODY_BYTES = 16 << 20
MAX_HEADER_BYTES = 64 << 10
DEFAULT_CONCURRENCY = 64
_READ_BYTES = 1 << 16
# Ask for the classic text format; the reader also copes with OpenMetrics (escaped names).
ACCEPT = "text/plain;version=0.0.4;q=0.9,text/plain;version=1.0.0;q=0.8,*/*;q=0.1"
_POLL_S = 0.1

Result = Any  # the page text (or what `parse` made of it), or the ScrapeError/PageError
Fetch = Callable[[str, float], str]
Parse = Callable[[str], Any]


class Stopped(ScrapeError):
    """The watcher is stopping (SIGTERM/SIGINT) while scrapes were in flight."""


class _Stale(Exception):
    """A kept-alive connection the server had closed: retried once on a fresh one."""


@dataclass(slots=True)
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    http: h11.Connection
    reused: bool = False


def _origin(url: str) -> tuple[str, str, int, str, str | None]:
    """(scheme, host, port, request target, Basic credentials) of a checked URL."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    auth = None
    if parts.username is not None:
        user, password = unquote(parts.username), unquote(parts.password or "")
        auth = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return parts.scheme, host, port, target, auth


class _Inflate:
    """The body as the server encoded it, decoded up to `cap` bytes and no further."""

    def __init__(self, encoding: str, cap: int) -> None:
        self.cap, self.total = cap, 0
        self.parts: list[bytes] = []
        enc = encoding.strip().lower()
        if enc in ("", "identity"):
            self._z: Any = None
        elif enc in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif enc == "deflate":
            self._z = zlib.decompressobj(zlib.MAX_WBITS)
        else:
            raise ScrapeError(f"Content-Encoding {encoding[:40]!r} is not supported")

    def feed(self, data: bytes) -> None:
        if self._z is not None:
            try:
                data = self._z.decompress(data, self.cap + 1 - self.total)
            except zlib.error as exc:
                raise ScrapeError(f"a corrupt compressed body ({exc})") from None
        self.total += len(data)
        if self.total > self.cap:
            raise ScrapeError(f"the page is larger than the limit of {self.cap:,} bytes"
                              + (" (decompressed)" if self._z is not None else ""))
        self.parts.append(data)

    def text(self) -> str:
        if self._z is not None and not self._z.eof:
            raise ScrapeError("the compressed body is truncated")
        body = b"".join(self.parts)
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ScrapeError(f"the page is not UTF-8 text (byte {exc.start})") from None


class AsyncScraper:
    """Scrapes on one event-loop thread. `fetch_many` is called by one evaluation at a time."""

    def __init__(
        self, *, concurrency: int = DEFAULT_CONCURRENCY, max_body_bytes: int = MAX_BODY_BYTES
    ) -> None:
        self.concurrency = concurrency
        self.max_body_bytes = max_body_bytes
        self._idle: dict[tuple[str, str, int], _Conn] = {}
        self._ssl: ssl.SSLContext | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rocmseat-scrape",
                                        daemon=True)
        self._thread.start()
        self._closed = False

    def fetch_many(
        self, urls: Sequence[str], timeout_s: float, stop: threading.Event | None = None, *,
        parse: Parse | None = None,
    ) -> list[Result]:
        if not urls:
            return []
        future = asyncio.run_coroutine_threadsafe(self._all(list(urls), timeout_s, parse),
                                                  self._loop)
        # The coroutines hold the deadline; this bound only guards against a wedged loop.
        limit = time.monotonic() + timeout_s + 2.0
        while True:
            if stop is not None and stop.is_set():
                future.cancel()
                return [Stopped("the watcher is stopping")] * len(urls)
            try:
                return future.result(timeout=_POLL_S)
            except FutureTimeout:
                if time.monotonic() > limit:
                    future.cancel()
                    return [ScrapeError(f"{redact_url(u)}: timed out after {timeout_s:g} s")
                            for u in urls]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        done = asyncio.run_coroutine_threadsafe(self._drop_all(), self._loop)
        with contextlib.suppress(Exception):
            done.result(timeout=0.5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=0.5)
        if not self._thread.is_alive():
            self._loop.close()

    # ----- on the loop thread ------------------------------------------------------------
    async def _all(self, urls: list[str], timeout_s: float, parse: Parse | None) -> list[Result]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        wanted = {_origin(u)[:3] for u in urls}
        for key in [k for k in self._idle if k not in wanted]:  # targets gone (a reload)
            _abort(self._idle.pop(key))
        gate = asyncio.Semaphore(self.concurrency)
        tasks = [asyncio.ensure_future(self._one(u, deadline, timeout_s, gate, parse))
                 for u in urls]
        try:
            return list(await asyncio.gather(*tasks))
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            raise

    async def _one(
        self, url: str, deadline: float, timeout_s: float, gate: asyncio.Semaphore,
        parse: Parse | None,
    ) -> Result:
        shown = redact_url(url)
        async with gate:
            if asyncio.get_running_loop().time() >= deadline:
                return ScrapeError(f"{shown}: timed out after {timeout_s:g} s (not started: "
                                   f"{self.concurrency} scrapes in flight)")
            try:
                async with asyncio.timeout_at(deadline):
                    text = await self._get(url)
            except TimeoutError:
                return ScrapeError(f"{shown}: timed out after {timeout_s:g} s")
            except ScrapeError as exc:
                return ScrapeError(f"{shown}: {exc.message}")
            except h11.ProtocolError as exc:
                return ScrapeError(f"{shown}: not a valid HTTP/1.1 response ({_short(exc)})")
            except ssl.SSLError as exc:
                return ScrapeError(f"{shown}: TLS: {_short(exc)}")
            except OSError as exc:
                # asyncio's "Connect call failed ('127.0.0.1', 8000)" carries errno 111
                why = os.strerror(exc.errno) if exc.errno else (exc.strerror
                                                               or type(exc).__name__)
                return ScrapeError(f"{shown}: {why}")
            except Exception as exc:  # a scrape must never crash the loop: say what it was
                return ScrapeError(f"{shown}: {type(exc).__name__}: {_short(exc)}")
        if parse is None:
            return text
        try:
            return parse(text)
        except RocmseatError as exc:  # PageError: the page, not the transport
            return exc
        except Exception as exc:
            return ScrapeError(f"{shown}: {type(exc).__name__}: {_short(exc)}")

    async def _get(self, url: str) -> str:
        scheme, host, port, target, auth = _origin(url)
        key = (scheme, host, port)
        conn = self._idle.pop(key, None)
        if conn is not None and conn.reader.at_eof():
            _abort(conn)  # the server closed it while idle (uvicorn keeps 5 s)
            conn = None
        if conn is None:
            conn = await self._connect(scheme, host, port)
        try:
            try:
                text, reusable = await self._exchange(conn, host, port, target, auth)
            except _Stale:
                _abort(conn)
                conn = await self._connect(scheme, host, port)
                text, reusable = await self._exchange(conn, host, port, target, auth)
        except _Stale:
            _abort(conn)
            raise ScrapeError("the connection closed before the page was complete") from None
        except BaseException:
            _abort(conn)
            raise
        if reusable and key not in self._idle:
            conn.reused = True
            self._idle[key] = conn
        else:
            _abort(conn)
        return text

    async def _connect(self, scheme: str, host: str, port: int) -> _Conn:
        context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        reader, writer = await asyncio.open_connection(
            host, port, ssl=context, server_hostname=host if context else None,
            limit=_READ_BYTES)
        http = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
        return _Conn(reader, writer, http)

    async def _exchange(
        self, conn: _Conn, host: str, port: int, target: str, auth: str | None
    ) -> tuple[str, bool]:
        authority = f"[{host}]" if ":" in host else host
        headers = [("Host", f"{authority}:{port}"), ("Accept", ACCEPT),
                   ("Accept-Encoding", "identity"), ("User-Agent", f"rocmseat/{__version__}")]
        if auth is not None:
            headers.append(("Authorization", f"Basic {auth}"))
        http = conn.http
        try:
            conn.writer.write(http.send(h11.Request(method="GET", target=target,
                                                    headers=headers)) or b"")
            conn.writer.write(http.send(h11.EndOfMessage()) or b"")
            await conn.writer.drain()
        except (ConnectionResetError, BrokenPipeError):
            if conn.reused:
                raise _Stale() from None
            raise
        body: _Inflate | None = None
        while True:
            event = http.next_event()
            if event is h11.NEED_DATA:
                try:
                    data = await conn.reader.read(_READ_BYTES)
                except ConnectionResetError:
                    if conn.reused and body is None:
                        raise _Stale() from None
                    raise
                if not data and conn.reused and body is None:
                    raise _Stale()
                http.receive_data(data)  # b"" is the end of the stream
                continue
            if isinstance(event, h11.Response):
                body = self._check_head(event)
            elif isinstance(event, h11.Data):
                assert body is not None
                body.feed(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                assert body is not None
                text = body.text()
                reusable = http.our_state is h11.DONE and http.their_state is h11.DONE
                if reusable:
                    http.start_next_cycle()
                return text, reusable
            elif isinstance(event, h11.ConnectionClosed):
                raise ScrapeError("the connection closed before the page was complete")
            # InformationalResponse (1xx) and anything else: read on.

    def _check_head(self, response: h11.Response) -> _Inflate:
        status = response.status_code
        if status != 200:
            raise ScrapeError(f"HTTP {status}")
        fields = {k.decode("latin-1").lower(): v.decode("latin-1")
                  for k, v in response.headers}
        content_type = fields.get("content-type", "")
        if "html" in content_type.lower():
            raise ScrapeError(f"answered {content_type[:60]!r}, not Prometheus metrics")
        length = fields.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            raise ScrapeError(f"the page is {int(length):,} bytes; the limit is "
                              f"{self.max_body_bytes:,}")
        return _Inflate(fields.get("content-encoding", ""), self.max_body_bytes)

    async def _drop_all(self) -> None:
        for conn in self._idle.values():
            _abort(conn)
        self._idle.clear()


def _abort(conn: _Conn) -> None:
    with contextlib.suppress(Exception):
        conn.writer.transport.abort()


def _short(exc: BaseException) -> str:
    return redact_text(str(exc)).replace("\n", " ")[:160]


class CallableScraper:
    """An injected `fetch(url, timeout_s) -> text` (tests, canned pages) behind the same
    deadline: a call that has not returned by then is a timeout (its thread is left to end)."""

    def __init__(self, fetch: Fetch, *, workers: int = 8) -> None:
        self._fetch = fetch
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="rocmseat-fetch")

    def fetch_many(
        self, urls: Sequence[str], timeout_s: float, stop: threading.Event | None = None, *,
        parse: Parse | None = None,
    ) -> list[Result]:
        futures = [self._pool.submit(self._call, u, timeout_s) for u in urls]
        deadline = time.monotonic() + timeout_s
        out: list[Result] = []
        for url, future in zip(urls, futures, strict=True):
            got = _wait(future, deadline, stop, url, timeout_s)
            if parse is not None and isinstance(got, str):
                try:
                    got = parse(got)
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
            return ScrapeError(f"{redact_url(url)}: {type(exc).__name__}: {_short(exc)}")

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
            return future.result(timeout=max(0.0, min(left, _POLL_S)))
        except FutureTimeout:
            continue


def fetch_once(url: str, timeout_s: float) -> str:
    """One scrape with a throwaway scraper (benchmarks, a person at a prompt)."""
    scraper = AsyncScraper(concurrency=1)
    try:
        (result,) = scraper.fetch_many([url], timeout_s)
    finally:
        scraper.close()
    if isinstance(result, Exception):
        raise result
    return str(result)
