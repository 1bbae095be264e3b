"""Readiness of a vLLM server: /health answers 200 AND one short canary completion succeeds.

/health alone is not enough: AsyncLLM.check_health only raises when the engine is already dead,
so a hung-but-alive engine (an RCCL deadlock with GPUs at 100 %, vllm#40980) keeps answering 200
(vllm/entrypoints/serve/instrumentator/health.py, vLLM 0.33.0). During
startup the port is bound but not listening, so /health is refused until the engine is up.

A server started with `--api-key` (or `VLLM_API_KEY`) answers 401 to any /v1 request without
`Authorization: Bearer <key>`; /health is not guarded (vllm/entrypoints/serve/middleware/
authenticate.py, GUARDED_PREFIX). The canary authenticates like any client of that server
(`served_api_key`); the key is sent, never shown (Canary's repr leaves it out, and no detail
line quotes a request header).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from rocmseat.httpclient import ScrapeError, TransportError, request
from rocmseat.jsonio import dumps_line

API_KEY_FLAG = "--api-key"
API_KEY_ENV = "VLLM_API_KEY"


@dataclass(frozen=True, slots=True)
class Canary:
    base_url: str  # http://127.0.0.1:8000
    served_name: str
    prompt: str
    max_tokens: int
    api_key: str | None = field(default=None, repr=False)  # the server's --api-key
    # the engine's /health while it loads (rocmseat.engines: Engine.readiness): said, waited on
    loading: frozenset[int] = frozenset()
    engine: str = "vLLM"


def served_api_key(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """The key a vLLM server started with `argv` in `env` requires, or None when it requires
    none: as vLLM reads it (vllm/entrypoints/serve/middleware/register.py: `args.api_key or
    [VLLM_API_KEY]`, empty keys dropped). `--api-key` takes one or more keys (any one is
    accepted; the first is sent), the last occurrence of the flag wins, `--api_key` is the
    same flag (vllm/utils/argparse_utils.py turns `_` into `-` in option names), and the flag
    given, even empty, overrides the environment."""
    given: list[str] | None = None
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if name.replace("_", "-") == API_KEY_FLAG:
            if eq:
                given = [value]
            else:  # nargs="+": the values up to the next option
                given = []
                while i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                    i += 1
                    given.append(argv[i])
        i += 1
    keys = [k for k in (given if given else [env.get(API_KEY_ENV, "")]) if k]
    return keys[0] if keys else None


@dataclass(frozen=True, slots=True)
class ProbeResult:
    ready: bool
    stage: str  # "health" | "canary" | "ready"
    detail: str  # why not ready, or the canary's text


# (url, JSON body or None for a GET, timeout, request headers) -> (status, body)
Fetch = Callable[[str, bytes | None, float, Sequence[tuple[str, str]]], tuple[int, bytes]]


def http_fetch(url: str, body: bytes | None, timeout_s: float,
               headers: Sequence[tuple[str, str]] = ()) -> tuple[int, bytes]:
    """GET (body None) or POST JSON with rocmseat's one HTTP client (rocmseat.httpclient);
    returns (status, body). A transport failure raises ScrapeError."""
    if body is not None:
        headers = [("Content-Type", "application/json"), *headers]
    done = request("POST" if body is not None else "GET", url, timeout_s=timeout_s, body=body,
                   headers=headers)
    return done.status, done.body


def probe(canary: Canary, *, timeout_s: float, fetch: Fetch = http_fetch) -> ProbeResult:
    try:
        status, _ = fetch(f"{canary.base_url}/health", None, min(timeout_s, 5.0), ())
    except (OSError, ValueError, ScrapeError) as exc:
        return ProbeResult(False, "health", f"/health: {_reason(exc)}")
    if status != 200:
        loading = f" ({canary.engine}: still loading)" if status in canary.loading else ""
        return ProbeResult(False, "health", f"/health answered {status}{loading}")
    payload = {
        "model": canary.served_name,
        "prompt": canary.prompt,
        "max_tokens": canary.max_tokens,
        "temperature": 0,
    }
    auth = [("Authorization", f"Bearer {canary.api_key}")] if canary.api_key else []
    try:
        status, body = fetch(
            f"{canary.base_url}/v1/completions", dumps_line(payload).encode(), timeout_s, auth
        )
    except (OSError, ValueError, ScrapeError) as exc:
        return ProbeResult(False, "canary", f"canary completion: {_reason(exc)}")
    if status != 200:
        tail = body.decode("utf-8", "replace").strip()[:200]
        return ProbeResult(False, "canary", f"canary completion answered {status}: {tail}")
    return _canary_text(body)


def _canary_text(body: bytes) -> ProbeResult:
    try:
        doc = json.loads(body)
        text = doc["choices"][0]["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        shown = body.decode("utf-8", "replace")[:200]
        return ProbeResult(False, "canary", f"canary answer is not a completion: {shown!r}")
    if not isinstance(text, str):
        return ProbeResult(False, "canary", "canary answer has no text")
    return ProbeResult(True, "ready", text)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TransportError):  # the stage names the URL
        return exc.why
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__
