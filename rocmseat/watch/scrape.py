"""Watch targets (`--target`, seat replicas, file_sd entries) and the URL rules they obey.

A target's URL may carry credentials (`http://user:pass@host/metrics`): they are sent as HTTP
Basic auth and never shown. Everything that leaves the process (an error, a log line, JSON, an
exporter label) uses `Target.shown_url`, redacted by rocmseat/redact.py (docs/architecture.md,
"Hostile input").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from rocmseat.errors import ConfigError
from rocmseat.redact import redact_text, redact_url
from rocmseat.text import CONTROL_CLASS


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    url: str
    cache_dir: Path | None = None  # <seat cache root>/<replica>: its manifest holds the key
    gpus: tuple[str, ...] = ()  # PCI addresses (node events)
    labels: tuple[tuple[str, str], ...] = ()  # carried onto alerts and exporter series
    expect_spec: bool | None = None  # None: as the watcher is configured (a seat's drafter)
    # the seat's [engine] kind (rocmseat.engines): a page of another engine is an error; None
    # (a --target URL, file_sd): the engine is told by the page
    engine: str | None = None

    @property
    def shown_url(self) -> str:
        return redact_url(self.url)


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# What never belongs in a URL we send or show: control characters and space (an LF would split
# the request line; a NUL ends a C string).
_BAD_URL_CHARS = re.compile(f"[{CONTROL_CLASS} ]")


def parse_target(spec: str, index: int) -> Target:
    """`URL` or `NAME=URL`; a bare host:port gets http:// and a bare base URL gets /metrics."""
    shown = redact_text(spec)
    name, sep, url = spec.partition("=")
    if not sep or "://" in name:
        name, url = f"t{index}", spec
    if not _NAME.match(name):
        raise ConfigError(f"--target {shown!r}: name {redact_text(name)!r} must match "
                          "[A-Za-z0-9][A-Za-z0-9._-]*")
    if "://" not in url:
        url = "http://" + url
    check_http_url(url, f"--target {shown!r}")
    if "/" not in url.partition("://")[2]:
        url = url + "/metrics"
    return Target(name, url)


def check_http_url(url: str, what: str) -> None:
    """An http(s) URL with a host and, if given, a port in 1..65535; else a ConfigError naming
    `what` (a malformed --target or --webhook is a usage error at start, not a scrape error).
    `what` must already be redacted: it is shown as given (rocmseat.redact.redact_text hides
    everything up to the last `@` after the scheme).

    An `@` after the authority is refused: a password holding `/`, `?` or `#` ends the
    authority early for every URL parser (RFC 3986, 3.2), so `http://u:12/pw@host/` would go to
    host `u`, port 12, with the rest of the password in its path."""
    if _BAD_URL_CHARS.search(url):
        raise ConfigError(f"{what}: control characters or spaces in the URL (percent-encode "
                          "them in a user name or password)")
    _, sep, rest = url.partition("://")
    end = re.search(r"[/?#]", rest)
    authority, after = (rest[:end.start()], rest[end.start():]) if end else (rest, "")
    if sep and ("@" in after or authority.count("@") > 1):
        raise ConfigError(f"{what}: an '@' that does not end the user name and password: "
                          "percent-encode '/', '?', '#' and '@' in them (%2F, %3F, %23, %40)")
    try:
        parts = urlsplit(url)
        port = parts.port
        hostname = parts.hostname
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535"
        why = str(exc)
        if "port" in why.lower():
            raise ConfigError(f"{what}: the port is not a number in 1..65535") from None
        raise ConfigError(f"{what}: not a URL ({why})") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{what}: not an http(s) URL")
    if not hostname or any(c in hostname for c in " /\\"):
        raise ConfigError(f"{what}: no host name in the URL")
    if port == 0:
        raise ConfigError(f"{what}: the port is not a number in 1..65535")
