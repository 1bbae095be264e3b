"""rocmseat's one HTTP client: the scrapes of one evaluation, bounded in time, size and memory
(no target waits on another), and `request`, one exchange for the readiness canary, webhooks and
the gate's probes on the same transport, and `fetch_once`, one scrape made of it
(docs/architecture.md, "HTTP").

One event loop on one thread serves every target (asyncio streams + h11, the HTTP/1.1 state
machine httpx itself is built on): no thread per target, one keep-alive connection per target.
Limits (docs/watch.md, "Limits"):

- every scrape of an evaluation starts when the evaluation starts, each with the whole
  deadline (`timeout_s` after the start) for its whole response (connect, headers, body and
  parse): a hung, blackholed or dripping target fails at the deadline and never holds a slot
  another target waits for (a connection attempt is one socket; the watcher holds one
  descriptor per target anyway, for its kept-alive connection, `ensure_descriptors`);
- the page is parsed as it arrives (`sink` is fed each chunk off the socket, the targeted
  reader keeps its sums and one partial line): a scrape holds a read buffer, not a page, and
  the parse of a big page is spread over its reads, so it never holds the loop for long;
- a finished scrape's result is kept whatever the others do; the evaluation never waits past
  the deadline (plus a beat for the loop to hand the results over);
- a body cap (`MAX_BODY_BYTES`, 16 MiB; a vLLM page is 50-100 KiB) on the bytes received and on
  the decoded body: a response is asked for uncompressed, one compressed anyway (gzip, deflate)
  is inflated only up to the cap; a gzip body may hold several members (RFC 1952; Go's
  gzip.Reader, which Prometheus uses, reads them all), anything else after the end of the
  compressed data is an error;
- headers are capped by h11 (`MAX_HEADER_BYTES`); redirects are not followed;
- a `stop` event (SIGTERM, SIGINT) ends the wait within a tenth of a second; `close` cancels
  whatever is still in flight (Ctrl-C during `--once` leaves no task behind).

`fetch_many` returns, per URL, what the sink made of the page (`new_sink`: the page text by
default, or e.g. a `Reading` from rocmseat.watch.metrics.PageReader) or the RocmseatError that
says what went wrong (the URL in a ScrapeError redacted: credentials in a URL are sent as Basic
auth and never shown). `request` returns any status with the body as bytes (capped at
`MAX_RESPONSE_BYTES`) or raises a TransportError, one line with the URL redacted.
"""

from __future__ import annotations

import asyncio
import base64
import codecs
import contextlib
import functools
import os
import resource
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError as FutureCancelled
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import h11

from rocmseat import __version__
from rocmseat.errors import RocmseatError
from rocmseat.redact import redact_text, redact_url

MAX_BODY_BYTES = 16 << 20
MAX_HEADER_BYTES = 64 << 10
_READ_BYTES = 1 << 16
# Ask for the classic text format; the reader also copes with OpenMetrics (escaped names).
ACCEPT = "text/plain;version=0.0.4;q=0.9,text/plain;version=1.0.0;q=0.8,*/*;q=0.1"
# What a scrape asks for, kept-alive (AsyncScraper) or one-shot (`fetch_once`)
SCRAPE_HEADERS = (("Accept", ACCEPT), ("Accept-Encoding", "identity"))
POLL_S = 0.1
# After the deadline, the loop hands over what it has: cancelled scrapes unwind within a beat.
_HANDOVER_S = 0.25
# Descriptors kept for everything that is not a scrape (the listener, sinks, files, stdio).
FD_RESERVE = 256
_GZIP_MAGIC = b"\x1f\x8b"
# The most a scrape inflates, decodes and parses before it gives the loop back.
_PIECE = 1 << 16
_MEMBERS_PER_PIECE = 64
# A gzip body may hold several members (a server that flushes one per chunk); each member costs
# a copy of what follows it, so their number is bounded like everything else.
MAX_GZIP_MEMBERS = 1024

Result = Any  # what the sink made of the page, or the ScrapeError/PageError


class Sink(Protocol):
    """Where a page goes as it arrives: `feed` per decoded chunk, `finish` at its end."""

    def feed(self, text: str) -> None: ...

    def finish(self) -> Any: ...


NewSink = Callable[[], Sink]


class TextSink:
    """The page text itself (benchmarks, `fetch_once`): bounded by the body cap."""

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[str] = []

    def feed(self, text: str) -> None:
        self._parts.append(text)

    def finish(self) -> str:
        return "".join(self._parts)


class ScrapeError(RocmseatError):
    """The page could not be fetched: refused, timed out, HTTP error, too big, HTML (the
    client's one failure; `request` raises its subclass TransportError)."""


class Stopped(ScrapeError):
    """The watcher is stopping (SIGTERM/SIGINT) while scrapes were in flight."""


class TransportError(ScrapeError):
    """An exchange that failed: `<the URL, redacted>: <why>`; `why` alone for a caller that
    names the URL itself."""

    def __init__(self, shown_url: str, why: str) -> None:
        super().__init__(f"{shown_url}: {why}")
        self.why = why


class _Stale(Exception):
    """A kept-alive connection the server had closed: retried once on a fresh one."""


@dataclass(slots=True)
class _Conn:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    http: h11.Connection
    reused: bool = False


def ensure_descriptors(targets: int) -> tuple[bool, int]:
    """Every target holds one descriptor (its kept-alive connection) and every scrape of an
    evaluation starts at once: lift the soft descriptor limit toward the hard one (a 1,024 soft
    limit is common). Returns (enough, the limit now)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = targets + FD_RESERVE
    if soft == resource.RLIM_INFINITY or soft >= want:
        return True, soft
    new = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if new > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    return soft >= want, soft


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


class _Body:
    """The body as the server sent it -> inflated (gzip, deflate) -> UTF-8 text -> the sink,
    within `cap` bytes received and `cap` bytes decoded. `feed` takes what was read; `pump`
    does the work a piece at a time (at most `_PIECE` bytes out), so a scrape that inflates a
    bomb or parses a big page gives the loop back between pieces."""

    def __init__(self, encoding: str, cap: int, sink: Sink | None) -> None:
        self.cap, self.received, self.decoded = cap, 0, 0
        self._sink = sink
        # No sink: the inflated bytes as they are, `finish` joins them (`request`: JSON, an
        # error page); still within the cap.
        self._raw: list[bytes] = []
        self._text = (codecs.getincrementaldecoder("utf-8")("strict") if sink is not None
                      else None)
        enc = encoding.strip().lower()
        self._gzip = enc in ("gzip", "x-gzip")
        self._compressed = self._gzip or enc == "deflate"
        if not self._compressed and enc not in ("", "identity"):
            raise ScrapeError(f"Content-Encoding {encoding[:40]!r} is not supported")
        self._z: Any = self._inflater() if self._compressed else None
        self._input = b""  # received, not yet worked on
        self._members = 1

    def _inflater(self) -> Any:
        return zlib.decompressobj(16 + zlib.MAX_WBITS if self._gzip else zlib.MAX_WBITS)

    def feed(self, data: bytes) -> None:
        self.received += len(data)
        if self.received > self.cap:
            raise ScrapeError(f"the response is larger than the limit of {self.cap:,} bytes"
                              + (" (compressed)" if self._compressed else ""))
        self._input = self._input + data if self._input else data

    def pump(self) -> bool:
        """One piece of work on what was fed (about `_PIECE` bytes out, or a few hundred tiny
        gzip members); True while more is left."""
        if not self._compressed:
            data = self._input
            self._input = data[_PIECE:]
            self._decoded(data[:_PIECE])
            return bool(self._input)
        out_total = 0
        for _ in range(_MEMBERS_PER_PIECE):
            data = self._input
            if not data or out_total >= _PIECE:
                break
            if self._z is None:  # gzip, between two members: the next one must start here
                if not self._next_member(data):
                    return False  # wait for more (finish() refuses a stray byte)
            elif self._z.eof:  # deflate: one stream, nothing after it
                raise ScrapeError("data after the end of the compressed body")
            room = self.cap - self.decoded
            try:
                out = self._z.decompress(data, min(room + 1, _PIECE))
            except zlib.error as exc:
                raise ScrapeError(f"a corrupt compressed body ({exc})") from None
            if len(out) > room:
                raise ScrapeError(f"the page is larger than the limit of {self.cap:,} bytes "
                                  "(decompressed)")
            out_total += len(out)
            self._decoded(out)
            if self._z.eof:
                self._input = self._z.unused_data
                if self._gzip:
                    self._z = None  # the member ended: what follows must be another member
            else:
                self._input = self._z.unconsumed_tail
        return bool(self._input)

    def _next_member(self, data: bytes) -> bool:
        """Start the gzip member `data` begins with (False: too few bytes to tell yet)."""
        if len(data) < len(_GZIP_MAGIC):
            return False
        if not data.startswith(_GZIP_MAGIC):
            raise ScrapeError("data after the end of the compressed body")
        self._members += 1
        if self._members > MAX_GZIP_MEMBERS:
            raise ScrapeError(f"more than {MAX_GZIP_MEMBERS:,} gzip members in the body")
        self._z = self._inflater()
        return True

    def _decoded(self, data: bytes) -> None:
        start = self.decoded
        self.decoded += len(data)
        sink, decoder = self._sink, self._text
        if sink is None or decoder is None:
            self._raw.append(data)
            return
        try:
            text = decoder.decode(data)
        except UnicodeDecodeError as exc:
            raise _not_utf8(start + exc.start) from None
        if text:
            sink.feed(text)

    def finish(self) -> Any:
        while self.pump():
            pass
        if self._compressed:
            if self._input:  # a stray byte after a gzip member
                raise ScrapeError("data after the end of the compressed body")
            if self._z is not None and not self._z.eof:
                raise ScrapeError("the compressed body is truncated")
        sink, decoder = self._sink, self._text
        if sink is None or decoder is None:
            return b"".join(self._raw)
        try:
            tail = decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise _not_utf8(self.decoded) from None
        if tail:
            sink.feed(tail)
        return sink.finish()


class AsyncScraper:
    """Scrapes on one event-loop thread. `fetch_many` is called by one evaluation at a time."""

    def __init__(self, *, max_body_bytes: int = MAX_BODY_BYTES) -> None:
        self.max_body_bytes = max_body_bytes
        self._idle: dict[tuple[str, str, int], _Conn] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="rocmseat-scrape",
                                        daemon=True)
        self._thread.start()
        self._closed = False

    def fetch_many(
        self, urls: Sequence[str], timeout_s: float, stop: threading.Event | None = None, *,
        new_sink: NewSink = TextSink,
    ) -> list[Result]:
        if not urls:
            return []
        pending = object()
        slots: list[Result] = [pending] * len(urls)
        future = asyncio.run_coroutine_threadsafe(
            self._all(list(urls), timeout_s, new_sink, slots), self._loop)
        # Each scrape holds the deadline itself; this bound only hands over what is there if
        # the loop could not finish in time (it never waits past the deadline and a beat).
        limit = time.monotonic() + timeout_s + _HANDOVER_S
        try:
            while True:
                if stop is not None and stop.is_set():
                    future.cancel()
                    return [Stopped("the watcher is stopping")] * len(urls)
                try:
                    future.result(timeout=max(0.0, min(POLL_S, limit - time.monotonic())))
                    break
                except FutureTimeout:
                    if time.monotonic() >= limit:
                        future.cancel()
                        break
                except FutureCancelled:
                    break
        except BaseException:  # KeyboardInterrupt in `--once`: leave nothing running
            future.cancel()
            raise
        done = list(slots)  # a copy: the loop may still write a late slot
        return [ScrapeError(f"{redact_url(u)}: timed out after {timeout_s:g} s")
                if r is pending else r for u, r in zip(urls, done, strict=True)]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._loop.is_running():
            done = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
            with contextlib.suppress(Exception):
                done.result(timeout=1.0)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=1.0)
        if not self._thread.is_alive():
            self._loop.close()

    # ----- on the loop thread ------------------------------------------------------------
    async def _all(self, urls: list[str], timeout_s: float, new_sink: NewSink,
                   slots: list[Result]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        wanted = {_origin(u)[:3] for u in urls}
        for key in [k for k in self._idle if k not in wanted]:  # targets gone (a reload)
            _abort(self._idle.pop(key))
        tasks = [loop.create_task(self._one(i, u, deadline=deadline, timeout_s=timeout_s,
                                            new_sink=new_sink, slots=slots))
                 for i, u in enumerate(urls)]
        try:
            await asyncio.wait(tasks, timeout=max(0.0, deadline - loop.time()) + _HANDOVER_S)
        finally:
            late = [t for t in tasks if not t.done()]
            for task in late:
                task.cancel()
            if late:  # let them unwind (close their sockets) before the loop goes idle
                await asyncio.wait(late, timeout=_HANDOVER_S)

    async def _one(
        self, index: int, url: str, *, deadline: float, timeout_s: float, new_sink: NewSink,
        slots: list[Result],
    ) -> None:
        result: Result
        try:
            async with asyncio.timeout_at(deadline):
                result = await self._get(url, new_sink)
        except RocmseatError as exc:  # PageError: the page, not the transport
            result = exc if not isinstance(exc, ScrapeError) else _failed(url, exc, timeout_s)
        except Exception as exc:  # a scrape must never crash the loop: say what it was
            result = _failed(url, exc, timeout_s)
        slots[index] = result

    async def _get(self, url: str, new_sink: NewSink) -> Any:
        scheme, host, port, target, auth = _origin(url)
        key = (scheme, host, port)
        conn = self._idle.pop(key, None)
        if conn is not None and conn.reader.at_eof():
            _abort(conn)  # the server closed it while idle (uvicorn keeps 5 s)
            conn = None
        if conn is None:
            conn = await _connect(scheme, host, port)
        head = _request_head("GET", host, port, target, auth=auth, headers=SCRAPE_HEADERS)

        def on_head(response: h11.Response) -> _Body:
            return self._check_head(response, new_sink())

        try:
            try:
                page, reusable = await _exchange(conn, head, None, on_head)
            except _Stale:
                _abort(conn)
                conn = await _connect(scheme, host, port)
                page, reusable = await _exchange(conn, head, None, on_head)
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
        return page

    def _check_head(self, response: h11.Response, sink: Sink) -> _Body:
        fields = _fields(response)
        check_page_head(response.status_code, fields)
        _check_length(fields, self.max_body_bytes)
        return _Body(fields.get("content-encoding", ""), self.max_body_bytes, sink)

    async def _shutdown(self) -> None:
        """Cancel every scrape still in flight and close every connection (close())."""
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=0.5)
        for conn in self._idle.values():
            _abort(conn)
        self._idle.clear()


def check_page_head(status: int, fields: dict[str, str]) -> None:
    """What a scrape refuses as soon as the head arrives: not 200, or an HTML page."""
    if status != 200:
        raise ScrapeError(f"HTTP {status}")
    content_type = fields.get("content-type", "")
    if "html" in content_type.lower():
        raise ScrapeError(f"answered {content_type[:60]!r}, not Prometheus metrics")


def _not_utf8(byte: int) -> ScrapeError:
    return ScrapeError(f"the page is not UTF-8 text (byte {byte})")


def _abort(conn: _Conn) -> None:
    with contextlib.suppress(Exception):
        conn.writer.transport.abort()


def short_why(exc: BaseException) -> str:
    return redact_text(str(exc)).replace("\n", " ")[:160]


def _failed(url: str, exc: BaseException, timeout_s: float) -> TransportError:
    """The one line a failed exchange is: the URL redacted, then what went wrong."""
    return TransportError(redact_url(url), _why(exc, timeout_s))


def _why(exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, TimeoutError):
        return f"timed out after {timeout_s:g} s"
    if isinstance(exc, ScrapeError):
        return exc.message
    if isinstance(exc, h11.ProtocolError):
        return f"not a valid HTTP/1.1 response ({short_why(exc)})"
    if isinstance(exc, ssl.SSLError):
        return f"TLS: {short_why(exc)}"
    if isinstance(exc, OSError):
        # asyncio's "Connect call failed ('127.0.0.1', 8000)" carries errno 111
        return os.strerror(exc.errno) if exc.errno else (exc.strerror or type(exc).__name__)
    return f"{type(exc).__name__}: {short_why(exc)}"


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    return ssl.create_default_context()


async def _connect(scheme: str, host: str, port: int) -> _Conn:
    context = _ssl_context() if scheme == "https" else None
    reader, writer = await asyncio.open_connection(
        host, port, ssl=context, server_hostname=host if context else None, limit=_READ_BYTES)
    http = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEADER_BYTES)
    return _Conn(reader, writer, http)


def _request_head(method: str, host: str, port: int, target: str, *, auth: str | None,
                  headers: Sequence[tuple[str, str]]) -> h11.Request:
    authority = f"[{host}]" if ":" in host else host
    fields = [("Host", f"{authority}:{port}"), ("User-Agent", f"rocmseat/{__version__}"),
              *headers]
    if auth is not None:
        fields.append(("Authorization", f"Basic {auth}"))
    return h11.Request(method=method, target=target, headers=fields)


def _fields(response: h11.Response) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in response.headers}


def _check_length(fields: dict[str, str], cap: int) -> None:
    length = fields.get("content-length")
    if length is not None and length.isdigit() and int(length) > cap:
        raise ScrapeError(f"the response is {int(length):,} bytes; the limit is {cap:,}")


async def _exchange(conn: _Conn, head: h11.Request, body: bytes | None,
                    on_head: Callable[[h11.Response], _Body]) -> tuple[Any, bool]:
    """One request and its whole response on `conn`: (what the body made, reusable)."""
    http = conn.http
    try:
        conn.writer.write(http.send(head) or b"")
        if body:
            conn.writer.write(http.send(h11.Data(data=body)) or b"")
        conn.writer.write(http.send(h11.EndOfMessage()) or b"")
        await conn.writer.drain()
    except (ConnectionResetError, BrokenPipeError):
        if conn.reused:
            raise _Stale() from None
        raise
    received: _Body | None = None
    while True:
        event = http.next_event()
        if event is h11.NEED_DATA:
            await _receive(conn, started=received is not None)
            continue
        if isinstance(event, h11.Response):
            received = on_head(event)
        elif isinstance(event, h11.Data):
            assert received is not None
            received.feed(bytes(event.data))
            while received.pump():  # a bomb or a big page: in turns with the other scrapes
                await asyncio.sleep(0)
            await asyncio.sleep(0)
        elif isinstance(event, h11.EndOfMessage):
            assert received is not None
            made = received.finish()
            reusable = http.our_state is h11.DONE and http.their_state is h11.DONE
            if reusable:
                http.start_next_cycle()
            return made, reusable
        elif isinstance(event, h11.ConnectionClosed):
            raise ScrapeError("the connection closed before the page was complete")
        # InformationalResponse (1xx) and anything else: read on.


async def _receive(conn: _Conn, *, started: bool) -> None:
    """Feed the parser the next bytes. A reused connection the server closed before any
    response (`started` False) raises _Stale: the caller retries on a fresh one."""
    try:
        data = await conn.reader.read(_READ_BYTES)
    except ConnectionResetError:
        if conn.reused and not started:
            raise _Stale() from None
        raise
    if not data and conn.reused and not started:
        raise _Stale()
    conn.http.receive_data(data)  # b"" is the end of the stream


# ----- one request (readiness canary, webhooks, the gate's probes) ---------------------------
MAX_RESPONSE_BYTES = 1 << 20  # a completion, an error page, a receiver's answer


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: dict[str, str]  # names lower-cased
    body: bytes


HeadCheck = Callable[[int, dict[str, str]], None]


def request(method: str, url: str, *, timeout_s: float, body: bytes | None = None,
            headers: Sequence[tuple[str, str]] = (),
            max_body_bytes: int = MAX_RESPONSE_BYTES, check: HeadCheck | None = None) -> Response:
    """rocmseat's one one-shot exchange: one HTTP/1.1 request on a fresh connection, with the
    scraper's transport: `timeout_s` for all of it (connect, send, headers, body), the body
    capped (compressed or not), URL userinfo sent as Basic auth, redirects not followed. Any
    status is returned unless `check` (status, lower-cased headers) raises a ScrapeError on the
    head, before the body is read; a failure raises TransportError (one line, the URL redacted).
    Headers are the caller's to keep out of logs (an `Authorization` value is never in an error
    line: none quotes a header). Runs its own event loop: not for a thread that already runs
    one."""
    head, data = asyncio.run(_request(method, url, timeout_s=timeout_s, body=body,
                                      headers=headers, max_body_bytes=max_body_bytes,
                                      check=check, sink=None))
    return Response(head.status, head.headers, data)


def request_into(method: str, url: str, sink: Sink, *, timeout_s: float,
                 body: bytes | None = None, headers: Sequence[tuple[str, str]] = (),
                 max_body_bytes: int = MAX_RESPONSE_BYTES,
                 check: HeadCheck | None = None) -> tuple[Response, Any]:
    """`request` with the body fed to `sink` as UTF-8 text as it arrives (a streamed
    completion: the gate's OpenAI-compatible client times each server-sent event), under the
    same deadline, cap and head check: (the head with an empty body, what `sink.finish` made).
    A body that is not UTF-8 is a TransportError like a page that is not."""
    head, made = asyncio.run(_request(method, url, timeout_s=timeout_s, body=body,
                                      headers=headers, max_body_bytes=max_body_bytes,
                                      check=check, sink=sink))
    return head, made


def fetch_once(url: str, timeout_s: float) -> str:
    """One scrape as a one-shot `request`: the scraper's headers, head checks, body cap and
    UTF-8 rule, and its messages (benchmarks, the gate, a person at a prompt)."""
    done = request("GET", url, timeout_s=timeout_s, headers=SCRAPE_HEADERS,
                   max_body_bytes=MAX_BODY_BYTES, check=check_page_head)
    try:
        return done.body.decode("utf-8")
    except UnicodeDecodeError as exc:
        # where the scraper's incremental decoder says it: a sequence cut at the end of the
        # body is found at its end
        cut = exc.end == len(done.body) and exc.reason == "unexpected end of data"
        why = _not_utf8(len(done.body) if cut else exc.start).message
        raise TransportError(redact_url(url), why) from None


async def _request(method: str, url: str, *, timeout_s: float, body: bytes | None,
                   headers: Sequence[tuple[str, str]], max_body_bytes: int,
                   check: HeadCheck | None, sink: Sink | None) -> tuple[Response, Any]:
    scheme, host, port, target, auth = _origin(url)
    if scheme not in ("http", "https") or not host:
        raise ScrapeError(f"{redact_url(url)}: not an http(s) URL")
    fields = [*headers, *([("Content-Length", str(len(body)))] if body is not None else [])]
    head = _request_head(method, host, port, target, auth=auth, headers=fields)
    got: list[Response] = []

    def on_head(response: h11.Response) -> _Body:
        found = _fields(response)
        if check is not None:
            check(response.status_code, found)
        _check_length(found, max_body_bytes)
        got.append(Response(response.status_code, found, b""))
        return _Body(found.get("content-encoding", ""), max_body_bytes, sink)

    conn: _Conn | None = None
    try:
        async with asyncio.timeout(timeout_s):
            conn = await _connect(scheme, host, port)
            data, _ = await _exchange(conn, head, body, on_head)
    except Exception as exc:
        raise _failed(url, exc, timeout_s) from None
    finally:
        if conn is not None:
            _abort(conn)
    return got[0], data
