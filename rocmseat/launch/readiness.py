"""Readiness of a vLLM server: /health answers 200 AND one short canary completion succeeds.

/health alone is not enough: AsyncLLM.check_health only raises when the engine is already dead,
so a hung-but-alive engine (an RCCL deadlock with GPUs at 100 %, vllm#40980) keeps answering 200
(vllm/entrypoints/serve/instrumentator/health.py, vLLM 0.33.0). During
startup the port is bound but not listening, so /health is refused until the engine is up.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Canary:
    base_url: str  # http://127.0.0.1:8000
    served_name: str
    prompt: str
    max_tokens: int


@dataclass(frozen=True, slots=True)
class ProbeResult:
    ready: bool
    stage: str  # "health" | "canary" | "ready"
    detail: str  # why not ready, or the canary's text


Fetch = Callable[[str, bytes | None, float], tuple[int, bytes]]


def http_fetch(url: str, body: bytes | None, timeout_s: float) -> tuple[int, bytes]:
    """GET (body None) or POST JSON; returns (status, body). Connection errors raise OSError."""
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    if body is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def probe(canary: Canary, *, timeout_s: float, fetch: Fetch = http_fetch) -> ProbeResult:
    try:
        status, _ = fetch(f"{canary.base_url}/health", None, min(timeout_s, 5.0))
    except (OSError, ValueError) as exc:
        return ProbeResult(False, "health", f"/health: {_reason(exc)}")
    if status != 200:
        return ProbeResult(False, "health", f"/health answered {status}")
    payload = {
        "model": canary.served_name,
        "prompt": canary.prompt,
        "max_tokens": canary.max_tokens,
        "temperature": 0,
    }
    try:
        status, body = fetch(
            f"{canary.base_url}/v1/completions", json.dumps(payload).encode(), timeout_s
        )
    except (OSError, ValueError) as exc:
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
    if isinstance(exc, urllib.error.URLError) and exc.reason is not None:
        return str(exc.reason)
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__
