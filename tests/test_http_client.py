"""rocmseat's one HTTP client (rocmseat.httpclient): the scraper's transport and `request`, used
by the readiness canary, the webhook sink and the gate's probes; the canary authenticates to a
server that requires an API key (issue 16)."""

from __future__ import annotations

import ast
import base64
import gzip
import hashlib
import json
import secrets
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rocmseat.httpclient import (
    ACCEPT,
    MAX_BODY_BYTES,
    MAX_RESPONSE_BYTES,
    AsyncScraper,
    ScrapeError,
    TransportError,
    fetch_once,
    request,
)
from rocmseat.launch.readiness import Canary, probe, served_api_key
from rocmseat.watch.sinks import webhook_deliver
from tests.conftest import REPO

KEY = "sk-canary-" + "7" * 24


class Seen:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []


def _server(handler: type[BaseHTTPRequestHandler]) -> Iterator[tuple[str, Seen]]:
    seen = Seen()
    handler.seen = seen  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


class VllmLike(BaseHTTPRequestHandler):
    """/health open, /v1/* guarded by a Bearer key as vLLM's AuthenticationMiddleware does
    (vllm/entrypoints/serve/middleware/authenticate.py: sha256 digests compared, 401 JSON)."""

    tokens = [hashlib.sha256(KEY.encode()).digest()]
    seen: Seen

    def _record(self, body: bytes) -> None:
        self.seen.requests.append({"path": self.path, "method": self.command,
                                   "headers": dict(self.headers.items()), "body": body})

    def _answer(self, status: int, doc: Any) -> None:
        raw = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        self._record(b"")
        if self.path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._answer(404, {"error": "not found"})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self._record(body)
        scheme, _, param = (self.headers.get("Authorization") or "").partition(" ")
        digest = hashlib.sha256(param.encode()).digest()
        if self.path.startswith("/v1") and not (
                scheme.lower() == "bearer"
                and any(secrets.compare_digest(digest, t) for t in self.tokens)):
            self._answer(401, {"error": "Unauthorized"})
            return
        self._answer(200, {"choices": [{"text": " the house"}]})

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def vllm_like() -> Iterator[tuple[str, Seen]]:
    yield from _server(VllmLike)


# ----- which key the server requires ----------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "env", "key"),
    [
        ([], {}, None),
        (["--api-key", "k1"], {}, "k1"),
        (["--api-key=k2"], {}, "k2"),
        (["--api_key", "k3"], {}, "k3"),  # vLLM's parser reads _ as - in option names
        (["--api-key", "a", "b", "--port", "8000"], {}, "a"),  # nargs=+: any one is accepted
        (["--api-key", "old", "--api-key", "new"], {}, "new"),  # the last occurrence wins
        ([], {"VLLM_API_KEY": "from-env"}, "from-env"),
        (["--api-key", "flag"], {"VLLM_API_KEY": "env"}, "flag"),  # the flag takes precedence
        (["--api-key="], {"VLLM_API_KEY": "env"}, None),  # given, empty: vLLM guards nothing
        ([], {"VLLM_API_KEY": ""}, None),
        (["--api-keys", "x", "--served-model-name", "api-key"], {}, None),
    ],
)
def test_served_api_key(argv, env, key):
    assert served_api_key(argv, env) == key


# ----- the canary against a server that requires a key ----------------------------------------
def test_the_canary_authenticates_with_the_seat_key(vllm_like):
    url, seen = vllm_like
    argv = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m",
            "--port", "1", "--api-key", KEY]
    ready = probe(Canary(url, "demo", "Hello", 4, api_key=served_api_key(argv, {})),
                  timeout_s=5)
    assert (ready.ready, ready.stage, ready.detail) == (True, "ready", " the house")
    health, completion = seen.requests
    assert "Authorization" not in health["headers"]  # /health is not guarded: nothing sent
    assert completion["headers"]["Authorization"] == f"Bearer {KEY}"
    assert json.loads(completion["body"])["model"] == "demo"


def test_a_canary_without_the_key_is_refused_and_the_detail_hides_it(vllm_like):
    url, _ = vllm_like
    # what the canary did before it read the key: never ready on a guarded server
    bare = probe(Canary(url, "demo", "Hello", 4), timeout_s=5)
    assert (bare.ready, bare.stage) == (False, "canary")
    assert bare.detail == 'canary completion answered 401: {"error": "Unauthorized"}'
    wrong = probe(Canary(url, "demo", "Hello", 4, api_key="sk-wrong-one"), timeout_s=5)
    assert not wrong.ready and "sk-wrong-one" not in wrong.detail


def test_the_key_is_not_in_the_canary_repr():
    canary = Canary("http://127.0.0.1:1", "demo", "Hello", 4, api_key=KEY)
    assert KEY not in repr(canary) and KEY not in str(canary)


def test_connection_refused_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = probe(Canary(f"http://127.0.0.1:{port}", "q", "p", 1), timeout_s=2)
    assert (result.ready, result.detail) == (False, "/health: Connection refused")


# ----- request: the transport --------------------------------------------------------------
class Various(BaseHTTPRequestHandler):
    seen: Seen

    def do_GET(self) -> None:
        self.seen.requests.append({"path": self.path, "headers": dict(self.headers.items())})
        if self.path == "/gzip":
            raw = gzip.compress(b'{"ok": true}')
            self.send_response(200)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
        elif self.path == "/huge":
            self.send_response(200)
            self.send_header("Content-Length", str(MAX_RESPONSE_BYTES + 1))
            self.end_headers()
        elif self.path == "/drip":  # headers, then a body that never ends
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self.end_headers()
            self.wfile.write(b"x")
            self.wfile.flush()
            time.sleep(3)
        elif self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_response(503)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"busy")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def various() -> Iterator[tuple[str, Seen]]:
    yield from _server(Various)


def test_request_returns_any_status_and_inflates(various):
    url, seen = various
    assert request("GET", f"{url}/gzip", timeout_s=5).body == b'{"ok": true}'
    busy = request("GET", f"{url}/other", timeout_s=5)
    assert (busy.status, busy.body) == (503, b"busy")
    moved = request("GET", f"{url}/redirect", timeout_s=5)
    assert moved.status == 302 and len(seen.requests) == 3  # not followed


@pytest.mark.parametrize(
    ("path", "timeout_s", "why"),
    [("/huge", 5.0, f"the response is {MAX_RESPONSE_BYTES + 1:,} bytes; the limit is "
                    f"{MAX_RESPONSE_BYTES:,}"),
     ("/drip", 0.5, "timed out after 0.5 s")],
)
def test_request_bounds(various, path, timeout_s, why):
    url, _ = various
    with pytest.raises(TransportError) as info:
        request("GET", f"{url}{path}", timeout_s=timeout_s)
    # a deadline that did not hold would end in "the connection closed before the page was
    # complete" once the dripping server gives up (it sleeps 3 s), not in a timeout
    assert info.value.why == why
    assert info.value.message == f"{url}{path}: {why}"


def test_userinfo_is_basic_auth_and_never_shown(various):
    url, seen = various
    with_user = url.replace("http://", "http://am:hunter2-pw@")
    request("GET", f"{with_user}/gzip", timeout_s=5)
    sent = seen.requests[-1]["headers"]["Authorization"]
    assert base64.b64decode(sent.split()[1]) == b"am:hunter2-pw"
    with pytest.raises(ScrapeError) as info:
        request("GET", with_user.rsplit(":", 1)[0] + ":1/x", timeout_s=2)
    assert "hunter2-pw" not in info.value.message and "<redacted>" in info.value.message


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "http:///x", "not a url"])
def test_request_refuses_what_is_not_http(url):
    with pytest.raises(ScrapeError, match="not an http"):
        request("GET", url, timeout_s=1)


def test_the_webhook_posts_a_json_list_with_the_one_client(various):
    received: list[Any] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append((self.headers.get("Content-Type"),
                             json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
            self.send_response(200 if len(received) == 1 else 500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    for url, _ in _server(Receiver):
        deliver = webhook_deliver(url.replace("http://", "http://u:pw-9@") + "/api/v2/alerts")
        deliver([{"labels": {"alertname": "replica_down"}}])
        with pytest.raises(RuntimeError) as info:
            deliver([{"labels": {"alertname": "x"}}])
        assert str(info.value) == f"POST http://<redacted>@{url[7:]}/api/v2/alerts: HTTP 500"
    assert received[0] == ("application/json", [{"labels": {"alertname": "replica_down"}}])


# ----- fetch_once: one scrape as a one-shot request, the scraper's rules and messages --------
PAGE = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1.0\n"
SCRAPE_ANSWERS = {
    "/ok": (200, "text/plain; version=0.0.4", PAGE.encode()),
    "/gzip": (200, "text/plain", gzip.compress(PAGE.encode())),
    "/down": (500, "text/plain", b"engine dead"),
    "/html": (200, "text/html; charset=utf-8", b"<html>login</html>"),
    "/latin1": (200, "text/plain", b"caf\xe9 1\n"),
    "/cut": (200, "text/plain", b"x \xe2\x82"),
    "/huge": (200, "text/plain", None),
}


class Scraped(BaseHTTPRequestHandler):
    seen: Seen

    def do_GET(self) -> None:
        self.seen.requests.append({"path": self.path, "headers": dict(self.headers.items())})
        status, ctype, body = SCRAPE_ANSWERS[self.path]
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if self.path == "/gzip":
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(MAX_BODY_BYTES + 1 if body is None else len(body)))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(("path", "why"), [
    ("/ok", None),
    ("/gzip", None),
    ("/down", "HTTP 500"),
    ("/html", "answered 'text/html; charset=utf-8', not Prometheus metrics"),
    ("/latin1", "the page is not UTF-8 text (byte 3)"),
    ("/cut", "the page is not UTF-8 text (byte 4)"),
    ("/huge", f"the response is {MAX_BODY_BYTES + 1:,} bytes; the limit is {MAX_BODY_BYTES:,}"),
])
def test_fetch_once_is_the_scrape_as_one_request(path, why):
    for url, seen in _server(Scraped):
        scraper = AsyncScraper()
        try:
            (kept,) = scraper.fetch_many([f"{url}{path}"], 5.0)
        finally:
            scraper.close()
        try:
            once: Any = fetch_once(f"{url}{path}", 5.0)
        except TransportError as exc:
            once = exc
        sent = [r["headers"] for r in seen.requests]
    if why is None:
        assert kept == once == PAGE
    else:
        assert isinstance(kept, TransportError) and isinstance(once, TransportError)
        assert kept.message == once.message == f"{url}{path}: {why}"
    assert [(h["Accept"], h["Accept-Encoding"]) for h in sent] == [(ACCEPT, "identity")] * 2


# ----- one client: nothing else in rocmseat speaks HTTP as a client -----------------------------
OTHER_CLIENTS = {"httpx", "urllib.request", "http.client", "requests", "aiohttp", "urllib3"}


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.lineno, node.module))
    return out


def test_rocmseat_has_one_http_client():
    # the walk sees imports inside functions too (the client itself is imported lazily)
    assert ("h11" in {n for _, n in _imports(REPO / "rocmseat" / "httpclient.py")})
    assert ("rocmseat.httpclient" in
            {n for _, n in _imports(REPO / "rocmseat" / "watch" / "sinks.py")})
    found = [f"{path.relative_to(REPO)}:{line}: {name}"
             for path in sorted((REPO / "rocmseat").rglob("*.py"))
             for line, name in _imports(path)
             if name in OTHER_CLIENTS or name.split(".")[0] in {"httpx", "requests", "aiohttp"}]
    assert found == [], "HTTP goes through rocmseat.httpclient:\n" + "\n".join(found)
