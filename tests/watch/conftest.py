"""A real HTTP server on 127.0.0.1 (port 0) that serves a scripted sequence of /metrics answers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import FIXTURES

METRICS = FIXTURES / "metrics"
SEQ = METRICS / "seq"
TEXT_004 = "text/plain; version=0.0.4; charset=utf-8"
TEXT_100 = "text/plain; version=1.0.0; charset=utf-8"
OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"


@dataclass
class Answer:
    body: str
    status: int = 200
    content_type: str = TEXT_004
    hang: threading.Event | None = None  # wait on this before answering (a hung server)


class PageServer:
    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self.served = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with outer.lock:
                    index = min(outer.served, len(outer.answers) - 1)
                    answer = outer.answers[index]
                    outer.served += 1
                if answer.hang is not None:
                    answer.hang.wait(30)
                data = answer.body.encode()
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", answer.content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"

    def play(self, *answers: Answer) -> None:
        with self.lock:
            self.answers = list(answers)
            self.served = 0

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def page_server() -> Iterator[PageServer]:
    server = PageServer()
    yield server
    server.close()


def page(name: str) -> str:
    path = SEQ / name if (SEQ / name).exists() else METRICS / name
    return Path(path).read_text()


class FakeClock:
    def __init__(self, start: float = 1_790_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds
