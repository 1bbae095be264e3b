"""Fetch one /metrics page (the only network read of the watch loop) and the target list."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rocmseat.errors import ConfigError, RocmseatError

# Ask for the classic text format; the reader also copes with OpenMetrics (escaped names).
ACCEPT = "text/plain;version=0.0.4;q=0.9,text/plain;version=1.0.0;q=0.8,*/*;q=0.1"


class ScrapeError(RocmseatError):
    """The page could not be fetched: refused, timed out, HTTP error, HTML instead of metrics."""


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    url: str
    cache_dir: Path | None = None  # <seat cache root>/<replica>: its manifest holds the key
    gpus: tuple[str, ...] = ()  # PCI addresses (node events)


def fetch_metrics(url: str, timeout_s: float) -> str:
    """One scrape with a throwaway client (--once); the loop keeps an HttpFetch."""
    import httpx

    with httpx.Client() as client:
        return _get(client, url, timeout_s)


class HttpFetch:
    """A scraper with one persistent httpx client: building a client (and its TLS context) per
    scrape costs ~25 ms of CPU, ten times the parse (bench/bench_watch_parse.py)."""

    def __init__(self) -> None:
        import httpx

        self._client = httpx.Client()

    def __call__(self, url: str, timeout_s: float) -> str:
        return _get(self._client, url, timeout_s)

    def close(self) -> None:
        self._client.close()


def _get(client: Any, url: str, timeout_s: float) -> str:  # client: httpx.Client
    import httpx

    try:
        response = client.get(url, timeout=timeout_s, headers={"Accept": ACCEPT})
    except httpx.TimeoutException:
        raise ScrapeError(f"{url}: timed out after {timeout_s:g} s") from None
    except httpx.HTTPError as exc:
        raise ScrapeError(f"{url}: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise ScrapeError(f"{url}: HTTP {response.status_code}")
    content_type = response.headers.get("content-type", "")
    if "html" in content_type:
        raise ScrapeError(f"{url}: answered {content_type}, not Prometheus metrics")
    text: str = response.text
    return text


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def parse_target(spec: str, index: int) -> Target:
    """`URL` or `NAME=URL`; a bare host:port gets http:// and a bare base URL gets /metrics."""
    name, sep, url = spec.partition("=")
    if not sep or "://" in name:
        name, url = f"t{index}", spec
    if not _NAME.match(name):
        raise ConfigError(f"--target {spec!r}: name {name!r} must match [A-Za-z0-9][A-Za-z0-9._-]*")
    if "://" not in url:
        url = "http://" + url
    check_http_url(url, f"--target {spec!r}")
    if "/" not in url.partition("://")[2]:
        url = url + "/metrics"
    return Target(name, url)


def check_http_url(url: str, what: str) -> None:
    """An http(s) URL with a host and, if given, a port in 1..65535; else a ConfigError naming
    `what` (a malformed --target or --webhook is a usage error at start, not a scrape error)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{what}: not an http(s) URL")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{what}: the port is not a number in 1..65535") from None
    if not parts.hostname or any(c in parts.hostname for c in " /\\"):
        raise ConfigError(f"{what}: no host name in the URL")
    if port == 0:
        raise ConfigError(f"{what}: the port is not a number in 1..65535")
