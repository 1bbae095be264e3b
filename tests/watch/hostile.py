"""Hostile /metrics servers for the watch tests and the long battery (bench/bench_watch_hostile.py).

`HostileServer` is a raw TCP server on 127.0.0.1 (port 0): each connection reads one request and
plays one scripted `Reply`, byte for byte, with pauses, drips, resets and hangs, so the
scraper meets what a broken proxy or a broken engine really sends. `CASES` builds replies from
the recorded vLLM pages (tests/fixtures/metrics/seq, tests/fixtures/recorded) with a seeded
random generator; each case says what the watcher must conclude:

- "unreadable": the second scrape must be an error (up False), never a window or a verdict;
- "no-window": the counters went backwards (a restart): up, but no window to judge;
- "readable": the mutation keeps the page valid (gzip, chunked, reordered, extra series): up
  with a window (the battery is not passing by refusing everything);
- "any": the outcome depends on where the mutation landed; only no crash and no hang.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import FIXTURES, REPO

SEQ = FIXTURES / "metrics" / "seq"
RECORDED = FIXTURES / "recorded"
TEXT = b"text/plain; version=0.0.4; charset=utf-8"


@dataclass
class Reply:
    """What the server does on one connection: a list of steps.
    ("send", bytes) | ("drip", bytes, seconds_per_byte) | ("sleep", s) | ("reset",) | ("close",)
    """

    steps: list[tuple[object, ...]] = field(default_factory=list)


def http(body: bytes, *, status: bytes = b"200 OK", headers: tuple[tuple[bytes, bytes], ...] = (),
         content_type: bytes = TEXT, length: bool = True) -> Reply:
    head = [b"HTTP/1.1 " + status, b"Content-Type: " + content_type, b"Connection: close"]
    if length:
        head.append(b"Content-Length: " + str(len(body)).encode())
    head += [k + b": " + v for k, v in headers]
    return Reply([("send", b"\r\n".join(head) + b"\r\n\r\n" + body), ("close",)])


def chunked(body: bytes, *, size: int = 4096, bad: bool = False) -> Reply:
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: " + TEXT + b"\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n")
    parts = [head]
    for i in range(0, len(body), size):
        piece = body[i:i + size]
        parts.append((b"zz" if bad and i else f"{len(piece):x}".encode()) + b"\r\n" + piece
                     + b"\r\n")
    parts.append(b"0\r\n\r\n")
    return Reply([("send", b"".join(parts)), ("close",)])


class HostileServer:
    def __init__(self, plan: Callable[[int], Reply]) -> None:
        self.plan = plan
        self.served = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            request = b""
            while b"\r\n\r\n" not in request and len(request) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                request += chunk
            with self._lock:
                n = self.served
                self.served += 1
            self._play(conn, self.plan(n))
        except OSError:
            pass
        finally:
            conn.close()

    def _play(self, conn: socket.socket, reply: Reply) -> None:
        for step in reply.steps:
            if self._stop.is_set():
                return
            kind = step[0]
            if kind == "send":
                conn.sendall(step[1])  # type: ignore[arg-type]
            elif kind == "drip":
                data, every = step[1], float(step[2])  # type: ignore[arg-type]
                for i in range(len(data)):  # type: ignore[arg-type]
                    conn.sendall(data[i:i + 1])  # type: ignore[index]
                    if self._stop.wait(every):
                        return
            elif kind == "sleep":
                self._stop.wait(float(step[1]))  # type: ignore[arg-type]
            elif kind == "reset":
                linger_now = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # l_onoff 1, l_linger 0
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger_now)
                return
            elif kind == "close":
                return

    def close(self) -> None:
        self._stop.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() at once
        except OSError:
            pass
        self._sock.close()
        self._thread.join(2)


# ----- the pages -------------------------------------------------------------------------
def base_pages() -> list[tuple[str, str]]:
    """(first, second) scrape pairs of real pages whose counters move forward."""
    seq = [(SEQ / n).read_text() for n in ("00-healthy.txt", "01-healthy.txt",
                                          "02-collapse.txt", "03-collapse.txt")]
    return [(seq[0], seq[1]), (seq[1], seq[2]), (seq[2], seq[3])]


_WANTED_REQUIRED = re.compile(
    r"^vllm:(spec_decode_num_drafts_total|spec_decode_num_draft_tokens_total|"
    r"spec_decode_num_accepted_tokens_total|spec_decode_num_accepted_tokens_per_pos_total|"
    r"num_requests_running|generation_tokens_total)\{", re.M)


def _required_lines(page: str) -> list[re.Match[str]]:
    return list(_WANTED_REQUIRED.finditer(page))


def _replace_value(page: str, rng: random.Random, value: str) -> str:
    m = rng.choice(_required_lines(page))
    end = page.index("\n", m.start())
    line = page[m.start():end]
    head = line.rsplit(" ", 1)[0]
    return page[:m.start()] + f"{head} {value}" + page[end:]


def _drop_required(page: str, rng: random.Random) -> str:
    m = rng.choice(_required_lines(page))
    end = page.index("\n", m.start()) + 1
    return page[:m.start()] + page[end:]


def _duplicate(page: str, rng: random.Random) -> str:
    m = rng.choice(_required_lines(page))
    end = page.index("\n", m.start())
    line = page[m.start():end]
    head, value = line.rsplit(" ", 1)
    twin = f"{head} {float(value) + rng.randint(1, 999)!r}"
    return page[:end + 1] + twin + "\n" + page[end + 1:]


def _truncate_inside(page: str, rng: random.Random) -> str:
    lines = _required_lines(page)
    last = page.index("\n", lines[-1].start())  # cut before the last required line ends
    return page[:rng.randint(1, last)]


def _bomb(cap: int) -> bytes:
    return gzip.compress(b"#" * (cap + (1 << 20)), compresslevel=9)


def cases(seed: int, count: int, *, cap: int,
          only: frozenset[str] | None = None) -> Iterator[tuple[str, str, Reply, Reply]]:
    """`count` seeded cases: (kind, expectation, reply to scrape 1, reply to scrape 2); `only`:
    draw from these kinds alone."""
    rng = random.Random(seed)
    pairs = base_pages()
    bomb = _bomb(cap)

    def page_case(name: str, expect: str, make: Callable[[str], str]) -> Callable[[], tuple]:
        def build() -> tuple[str, str, Reply, Reply]:
            first, second = rng.choice(pairs)
            return name, expect, http(first.encode()), http(make(second).encode("utf-8",
                                                                                "surrogatepass"))
        return build

    def raw_case(name: str, expect: str, reply: Callable[[bytes], Reply]) -> Callable[[], tuple]:
        def build() -> tuple[str, str, Reply, Reply]:
            first, second = rng.choice(pairs)
            return name, expect, http(first.encode()), reply(second.encode())
        return build

    def backwards() -> tuple[str, str, Reply, Reply]:
        # the later page first: every counter goes down (a restart, or two servers behind one
        # URL); the _created stamps are equal, the counters say it
        first, second = rng.choice(pairs)
        return "backwards", "no-window", http(second.encode()), http(first.encode())

    nonfinite = ("NaN", "nan", "+Inf", "-Inf", "inf", "Infinity")
    kinds: list[Callable[[], tuple]] = [
        page_case("nan-or-inf", "unreadable",
                  lambda p: _replace_value(p, rng, rng.choice(nonfinite))),
        page_case("negative", "unreadable",
                  lambda p: _replace_value(p, rng, f"-{rng.randint(1, 10**6)}.0")),
        page_case("huge", "unreadable", lambda p: _replace_value(p, rng, "1e300")),
        page_case("not-a-number", "unreadable",
                  lambda p: _replace_value(p, rng, rng.choice(("ten", "0x1f", "1,5", "--1",
                                                               "1e", "١٢")))),
        page_case("no-value", "unreadable", lambda p: _replace_value(p, rng, "")),
        page_case("duplicate-series", "unreadable", lambda p: _duplicate(p, rng)),
        page_case("drop-required-series", "unreadable", lambda p: _drop_required(p, rng)),
        page_case("truncated", "unreadable", lambda p: _truncate_inside(p, rng)),
        page_case("html", "unreadable",
                  lambda p: "<!DOCTYPE html><html><body>502 Bad Gateway</body></html>\n"),
        page_case("empty", "unreadable", lambda p: ""),
        page_case("binary", "unreadable",
                  lambda p: bytes(rng.getrandbits(8) for _ in range(2000)).decode("latin-1")),
        page_case("position-rate-above-1", "unreadable",
                  lambda p: re.sub(r'(position="0"\} )[0-9.e+]+',
                                   lambda m: m.group(1) + "1e9", p)),
        backwards,
        page_case("control", "readable", lambda p: p),
        page_case("extra-series", "readable",
                  lambda p: p + "# TYPE zz_other counter\nzz_other_total{a=\"b\"} 4.0\n"),
        page_case("insert-noise", "any", lambda p: _noise(p, rng)),
        raw_case("http-error", "unreadable",
                 lambda b: http(b"oops\n", status=rng.choice((b"500 Internal Server Error",
                                                              b"404 Not Found", b"302 Found",
                                                              b"503 Busy")))),
        raw_case("html-content-type", "unreadable",
                 lambda b: http(b, content_type=b"text/html; charset=utf-8")),
        raw_case("short-body", "unreadable",
                 lambda b: Reply([("send", b"HTTP/1.1 200 OK\r\nContent-Length: "
                                   + str(len(b) + 100).encode() + b"\r\n\r\n" + b),
                                  ("close",)])),
        raw_case("bad-chunking", "unreadable", lambda b: chunked(b, bad=True)),
        raw_case("chunked", "readable", lambda b: chunked(b, size=rng.randint(1, 9000))),
        raw_case("gzip-anyway", "readable",
                 lambda b: http(gzip.compress(b), headers=((b"Content-Encoding", b"gzip"),))),
        raw_case("close-delimited", "readable", lambda b: http(b, length=False)),
        raw_case("gzip-truncated", "unreadable",
                 lambda b: http(gzip.compress(b)[:-rng.randint(9, 4000)],
                                headers=((b"Content-Encoding", b"gzip"),))),
        raw_case("gzip-bomb", "unreadable",
                 lambda b: http(bomb, headers=((b"Content-Encoding", b"gzip"),))),
        raw_case("brotli", "unreadable",
                 lambda b: http(b, headers=((b"Content-Encoding", b"br"),))),
        raw_case("too-big", "unreadable",
                 lambda b: http(b"# " + b"x" * (cap + 10) + b"\n" + b, length=False)),
        raw_case("not-http", "unreadable",
                 lambda b: Reply([("send", b"SSH-2.0-OpenSSH_9.6\r\n"), ("close",)])),
        raw_case("bad-status-line", "unreadable",
                 lambda b: Reply([("send", b"HTTP/1.1 abc\r\n\r\n" + b), ("close",)])),
        raw_case("header-bomb", "unreadable",
                 lambda b: Reply([("send", b"HTTP/1.1 200 OK\r\nX-A: " + b"a" * 200_000
                                   + b"\r\n\r\n" + b), ("close",)])),
        raw_case("reset", "unreadable", lambda b: Reply([("reset",)])),
        raw_case("close-at-once", "unreadable", lambda b: Reply([("close",)])),
        raw_case("hang", "unreadable", lambda b: Reply([("sleep", 30.0)])),
        raw_case("drip", "unreadable",
                 lambda b: Reply([("drip", b"HTTP/1.1 200 OK\r\nContent-Length: "
                                   + str(len(b)).encode() + b"\r\n\r\n" + b, 0.01)])),
        raw_case("not-utf8", "unreadable",
                 lambda b: http(b.replace(b'model_name="tiny"', b'model_name="t\xffny"', 1))),
    ]
    if only is not None:
        kinds = [k for k in kinds if k()[0] in only]  # builds one case per kind to name it
    for _ in range(count):
        yield rng.choice(kinds)()


# The answers that hold a scrape until its deadline or make it big: the ones that used to hold
# every scrape slot and starve a healthy target (issue 11, review 2).
SLOW_KINDS = frozenset({"hang", "drip", "too-big", "gzip-bomb", "header-bomb", "short-body"})


def _noise(page: str, rng: random.Random) -> str:
    at = rng.randint(0, len(page))
    junk = "".join(chr(rng.choice((rng.randint(0, 0x7f), rng.randint(0x80, 0x2fff))))
                   for _ in range(rng.randint(1, 20)))
    return page[:at] + junk.replace("\ud800", "?") + page[at:]


@dataclass
class Outcome:
    kind: str
    expect: str
    up: bool
    window: bool
    restarted: bool
    error: str | None
    seconds: float
    crashed: str | None = None

    @property
    def healthy(self) -> bool:
        """A verdict: read, a window judged, no alert that says it could not check."""
        return self.up and self.window

    @property
    def wrong(self) -> str | None:
        if self.crashed:
            return f"crashed: {self.crashed}"
        if self.expect == "unreadable" and (self.up or self.healthy):
            return "a verdict on unreadable input"
        if self.expect == "no-window" and (self.window or not self.restarted):
            return "a window across a counter reset"
        if self.expect == "readable" and not self.healthy:
            return f"a valid page refused: {self.error}"
        return None


def run_case(watcher_factory: Callable[[str], object], kind: str, expect: str, first: Reply,
             second: Reply, *, tries: int = 3) -> Outcome:
    """Two scrapes (the real page, then the mutated one) through a fresh Watcher. A first
    scrape of the real page that did not come back (a loaded host: it timed out) leaves the
    server's answer count behind the case's premise, so the second scrape could be answered
    with the real page: that case is run again on a fresh server, up to `tries` times."""
    for attempt in range(tries):
        answers = [first, second]
        server = HostileServer(lambda n, a=answers: a[min(n, 1)])
        watcher = watcher_factory(server.url)
        started = time.monotonic()
        try:
            (before,) = watcher.step()  # type: ignore[attr-defined]
            (status,) = watcher.step()  # type: ignore[attr-defined]
        except Exception as exc:  # the battery counts it; the test fails on any
            return Outcome(kind, expect, False, False, False, None, time.monotonic() - started,
                           crashed=f"{type(exc).__name__}: {exc}")
        finally:
            watcher.close()  # type: ignore[attr-defined]
            server.close()
        if before.up or attempt == tries - 1:
            break
    return Outcome(kind, expect, status.up, status.window is not None, status.restarted,
                   status.error, time.monotonic() - started)


@dataclass
class Round:
    """One multi-target evaluation: hostile answers and blackholed ports next to a healthy
    replica, all in one Watcher (one scraper, one deadline)."""

    outcomes: list[Outcome]
    healthy: Outcome
    blackholes: int
    seconds: float


def run_round(watcher_factory: Callable[[list[tuple[str, str]]], object],
              picks: list[tuple[str, str, Reply, Reply]], blackholes: int) -> Round:
    """Two evaluations of one Watcher over `picks` (each its own server), `blackholes` ports
    that accept a connection and never answer, and a healthy replica (real pages), last."""
    servers = [HostileServer(lambda n, a=(first, second): a[min(n, 1)])
               for _, _, first, second in picks]
    first, second = base_pages()[0]
    healthy = HostileServer(lambda n: (http(first.encode()), http(second.encode()))[min(n, 1)])
    holes = []
    for _ in range(blackholes):
        hole = socket.socket()
        hole.bind(("127.0.0.1", 0))
        hole.listen(16)  # never accepted: the kernel completes the handshake, nobody answers
        holes.append(hole)
    named = [(f"x{i}", s.url) for i, s in enumerate(servers)]
    named += [(f"bh{i}", f"http://127.0.0.1:{h.getsockname()[1]}/metrics")
              for i, h in enumerate(holes)]
    named.append(("healthy", healthy.url))
    watcher = watcher_factory(named)
    started = time.monotonic()
    try:
        try:
            watcher.step()  # type: ignore[attr-defined]
            statuses = watcher.step()  # type: ignore[attr-defined]
        except Exception as exc:
            crashed = f"{type(exc).__name__}: {exc}"
            spent = time.monotonic() - started
            return Round([Outcome(k, e, False, False, False, None, spent, crashed)
                          for k, e, _, _ in picks],
                         Outcome("healthy", "readable", False, False, False, None, spent,
                                 crashed), blackholes, spent)
    finally:
        watcher.close()  # type: ignore[attr-defined]
        for server in [*servers, healthy]:
            server.close()
        for hole in holes:
            hole.close()
    spent = time.monotonic() - started
    outs = [Outcome(kind, expect, st.up, st.window is not None, st.restarted, st.error, spent)
            for (kind, expect, _, _), st in zip(picks, statuses, strict=False)]
    holes_out = statuses[len(picks):len(picks) + blackholes]
    outs += [Outcome("blackhole", "unreadable", st.up, st.window is not None, st.restarted,
                     st.error, spent) for st in holes_out]
    last = statuses[-1]
    good = Outcome("healthy", "readable", last.up, last.window is not None, last.restarted,
                   last.error, spent)
    return Round(outs, good, blackholes, spent)


def write_pages(tmp: Path) -> None:  # pragma: no cover - a helper for manual runs
    for i, (a, b) in enumerate(base_pages()):
        (tmp / f"{i}-a.txt").write_text(a)
        (tmp / f"{i}-b.txt").write_text(b)


# ----- shared by the watch tests that run servers and the CLI ---------------------------------
CLI = [sys.executable, "-c", "from rocmseat.cli.main import main; main()"]


GOOD_0, GOOD_1 = ((SEQ / "00-healthy.txt").read_text(), (SEQ / "01-healthy.txt").read_text())
ACCEPTED_1 = 'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"} 20691.0'
DRAFTS_1 = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="tiny"} 10600.0'


@contextmanager
def reaped(proc: subprocess.Popen[str]) -> Iterator[subprocess.Popen[str]]:
    """A `rocmseat watch` child that is killed on the way out if the test did not stop it."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def env() -> dict[str, str]:
    """The environment of a `rocmseat` child that imports this tree."""
    return {**os.environ, "PYTHONPATH": str(REPO), "ROCMSEAT_ERROR_LOG": "/dev/null"}


def serve(*replies: str | Reply) -> HostileServer:
    """A server that plays `replies` in order, the last one from then on."""
    plays = [r if isinstance(r, Reply) else http(r.encode()) for r in replies]
    return HostileServer(lambda n: plays[min(n, len(plays) - 1)])


def once_at(rocmseat_cli: Callable[..., object], url: str, tmp_path: Path, *extra: str) -> object:
    return rocmseat_cli("watch", "--target", f"r0={url}", "--once", "--interval", "0.05",
                        "--state-dir", str(tmp_path / "state"), *extra)


def strict_json(text: str) -> object:
    def refuse(constant: str) -> object:
        raise AssertionError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def hung_listeners(count: int) -> list[socket.socket]:
    """Ports that accept a connection (the kernel completes the handshake) and never answer."""
    out = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(128)
        out.append(s)
    return out
