"""rocmseat's own OpenAI-compatible streaming benchmark client: the gate's throughput arms on an
engine that has no `vllm bench serve` (llama.cpp's llama-server, SGLang), docs/spec.md.

It runs the battery's RunSpecs (battery.py) against `POST /v1/completions` with `stream: true`
and writes one result file with the keys `vllm bench serve --save-result --save-detailed` writes
(vllm/benchmarks/serve.py `benchmark()`; read back by benchresult.parse_bench_result), so the
gate's judges see one shape whichever client measured. The figures are computed as vLLM's
client computes them (vllm/benchmarks/lib/endpoint_request_func.py and serve.py
`calculate_metrics`):

- TTFT: request sent -> first server-sent event carrying text;
- ITL: the gaps between later events carrying text (chunks, not tokens: with speculation a
  chunk may carry several tokens);
- TPOT: (latency - TTFT) / (output tokens - 1), per request with more than one output token;
- output tokens: the final event's `usage.completion_tokens` (`stream_options.include_usage`),
  else the events carrying text (a lower bound; the result says `rocmseat_tokens_from`);
- output tok/s: total output tokens / the run's wall time (first request sent -> last answer),
  warmup requests excluded.

Prompts: the `custom` phase sends the shipped prompt file's text; the `random` and
`prefix_repetition` phases send token ids (the completions API takes a list of ids as `prompt`:
vLLM's, llama-server's and SGLang's servers all do), drawn with the phase's seed from ids 3..258,
which every vocabulary of 259 tokens or more holds, so a prompt is exactly the asked length
whatever the tokenizer.

Bounds (a hostile or broken server is a failed request, never a hang or a crash): every request
within the run's deadline; a response body within MAX_STREAM_BYTES; an event line within
MAX_EVENT_BYTES; at most 4 events per asked token (+ 64); an event that is not JSON, an `error`
object, a status other than 200 or a `usage` that claims more tokens than asked are that
request's error. One HTTP client: rocmseat.httpclient.request_into.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocmseat import jsonio
from rocmseat.atomic import write_into
from rocmseat.errors import RocmseatError
from rocmseat.httpclient import request_into
from rocmseat.speculation.gate.battery import RunSpec
from rocmseat.text import printable

MAX_STREAM_BYTES = 8 << 20
MAX_EVENT_BYTES = 256 << 10
EVENTS_PER_TOKEN = 4
TOKEN_IDS = (3, 259)  # [low, high): ids every vocabulary of 259+ tokens has
BACKEND = "rocmseat-openai"


class StreamError(RocmseatError):
    """One streamed completion that cannot be counted (its request failed)."""


@dataclass(frozen=True, slots=True)
class Workload:
    """One run's requests: the prompts (text or token ids), output tokens, concurrency."""

    prompts: tuple[str | tuple[int, ...], ...]
    output_tokens: int
    concurrency: int
    warmups: int


def _args(run: RunSpec) -> dict[str, str]:
    args = list(run.args)
    out: dict[str, str] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[arg[2:]] = args[i + 1]
    return out


def read_prompts(path: Path) -> tuple[str, ...]:
    """The shipped prompt file (JSONL, one `{"prompt": ...}` per line)."""
    texts = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            texts.append(str(json.loads(line)["prompt"]))
        except (ValueError, KeyError, TypeError):
            raise StreamError(f"{path}:{number}: not a {{\"prompt\": ...}} line") from None
    if not texts:
        raise StreamError(f"{path}: no prompt")
    return tuple(texts)


def workload_of(run: RunSpec) -> Workload:
    """The requests of one battery run, from its own arguments (battery._all_runs)."""
    a = _args(run)
    seed = int(a.get("seed", "0"))
    rng = random.Random(seed)
    n = run.num_prompts
    concurrency = int(a.get("max-concurrency", str(n)))
    warmups = int(a.get("num-warmups", "0"))

    def ids(count: int) -> tuple[int, ...]:
        return tuple(rng.randrange(*TOKEN_IDS) for _ in range(count))

    dataset = a.get("dataset-name")
    prompts: list[str | tuple[int, ...]]
    if dataset == "random":
        prompts = [ids(int(a["random-input-len"])) for _ in range(n)]
    elif dataset == "custom":
        texts = read_prompts(Path(a["dataset-path"]))
        prompts = [texts[i % len(texts)] for i in range(n)]
    elif dataset == "prefix_repetition":
        prefixes = [ids(int(a["prefix-repetition-prefix-len"]))
                    for _ in range(int(a["prefix-repetition-num-prefixes"]))]
        suffix = int(a["prefix-repetition-suffix-len"])
        prompts = [prefixes[i % len(prefixes)] + ids(suffix) for i in range(n)]
    else:
        raise StreamError(f"{run.name}: dataset {dataset!r} is not one this client serves")
    return Workload(tuple(prompts), run.output_tokens, max(1, concurrency), warmups)


@dataclass
class StreamSink:
    """Server-sent events of one streamed completion -> its timings and counts (httpclient
    Sink). `started` is when the request was sent (time.monotonic)."""

    started: float
    max_tokens: int
    ttft_s: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    text_events: int = 0
    usage_tokens: int | None = None
    prompt_tokens: int | None = None
    timings: dict[str, Any] | None = None
    done: bool = False
    _line: str = ""
    _events: int = 0

    def feed(self, text: str) -> None:
        now = time.monotonic()
        data = self._line + text
        lines = data.split("\n")
        self._line = lines.pop()
        if len(self._line) > MAX_EVENT_BYTES:
            raise StreamError(f"an event line longer than {MAX_EVENT_BYTES:,} bytes")
        for line in lines:
            self._event(line.rstrip("\r"), now)

    def _event(self, line: str, now: float) -> None:
        if not line.startswith("data:"):
            return  # blank separators, comments (": ping"), `event:` fields
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return
        self._events += 1
        if self._events > EVENTS_PER_TOKEN * self.max_tokens + 64:
            raise StreamError(f"more than {EVENTS_PER_TOKEN * self.max_tokens + 64} events for "
                              f"{self.max_tokens} tokens")
        try:
            doc = json.loads(payload)
        except ValueError:
            raise StreamError(f"an event that is not JSON: {printable(payload, 60)!r}") from None
        if not isinstance(doc, dict):
            raise StreamError("an event that is not a JSON object")
        if "error" in doc:
            err = doc["error"]
            why = err.get("message") if isinstance(err, dict) else err
            raise StreamError(f"the server said: {printable(str(why), 120)}")
        choices = doc.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            text = choices[0].get("text")
            if isinstance(text, str) and text:
                self.text_events += 1
                if self.ttft_s is None:
                    self.ttft_s = now - self.started
                self.chunk_times.append(now)
        usage = doc.get("usage")
        if isinstance(usage, dict):
            self.usage_tokens = _count(usage.get("completion_tokens"), "completion_tokens",
                                       self.max_tokens)
            self.prompt_tokens = _count(usage.get("prompt_tokens"), "prompt_tokens", None)
        timings = doc.get("timings")  # llama-server's per-request figures
        if isinstance(timings, dict):
            self.timings = timings

    def finish(self) -> StreamSink:
        if self._line.strip():
            self._event(self._line.rstrip("\r"), time.monotonic())
        return self


def _count(value: Any, key: str, most: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StreamError(f"usage.{key} {printable(repr(value), 40)}: not a count")
    if most is not None and value > most:
        raise StreamError(f"usage.{key} {value}: more than the {most} tokens asked for")
    return value


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request: its figures, or why it failed."""

    ttft_s: float | None
    latency_s: float
    output_tokens: int
    prompt_tokens: int
    itl_s: tuple[float, ...]
    draft_n: int | None  # llama-server timings (None: not reported)
    draft_n_accepted: int | None
    error: str = ""


def completion(base_url: str, model: str, prompt: str | tuple[int, ...], max_tokens: int, *,
               timeout_s: float, api_key: str | None = None) -> Outcome:
    """One greedy streamed completion of exactly `max_tokens` tokens (`ignore_eos`)."""
    body = json.dumps({
        "model": model, "prompt": list(prompt) if isinstance(prompt, tuple) else prompt,
        "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True},
    }).encode()
    headers = [("Content-Type", "application/json"), ("Accept", "text/event-stream")]
    if api_key:
        headers.append(("Authorization", f"Bearer {api_key}"))
    started = time.monotonic()
    sink = StreamSink(started, max_tokens)
    try:
        head, _ = request_into("POST", base_url.rstrip("/") + "/v1/completions", sink,
                               timeout_s=max(timeout_s, 0.1), body=body, headers=headers,
                               max_body_bytes=MAX_STREAM_BYTES)
        latency = time.monotonic() - started
        if head.status != 200:
            raise StreamError(f"HTTP {head.status}")
        if sink.ttft_s is None:
            raise StreamError("no event carried text")
    except RocmseatError as exc:
        return Outcome(None, time.monotonic() - started, 0, 0, (), None, None,
                       printable(exc.message, 200))
    tokens = sink.usage_tokens if sink.usage_tokens is not None else sink.text_events
    gaps = tuple(b - a for a, b in zip(sink.chunk_times, sink.chunk_times[1:], strict=False))
    t = sink.timings or {}
    return Outcome(sink.ttft_s, latency, tokens, sink.prompt_tokens or 0, gaps,
                   _int_or_none(t.get("draft_n")), _int_or_none(t.get("draft_n_accepted")))


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def run_workload(base_url: str, model: str, work: Workload, *, timeout_s: float,
                 abort: Callable[[], str | None] = lambda: None,
                 api_key: str | None = None) -> tuple[list[Outcome], float]:
    """Warmups one at a time, then every prompt with `concurrency` requests in flight; (the
    outcomes in prompt order, the wall time of the measured part). Stops sending when `abort`
    says why or the deadline passes (the requests not sent are failed ones)."""
    deadline = time.monotonic() + timeout_s
    for prompt in work.prompts[:work.warmups]:
        completion(base_url, model, prompt, work.output_tokens,
                   timeout_s=deadline - time.monotonic(), api_key=api_key)
    outcomes: list[Outcome | None] = [None] * len(work.prompts)
    lock = threading.Lock()
    next_index = [0]

    def worker() -> None:
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(work.prompts):
                return
            left = deadline - time.monotonic()
            why = abort() or ("the run's deadline passed" if left <= 0 else None)
            if why is not None:
                outcomes[i] = Outcome(None, 0.0, 0, 0, (), None, None, f"not sent: {why}")
                continue
            outcomes[i] = completion(base_url, model, work.prompts[i], work.output_tokens,
                                     timeout_s=left, api_key=api_key)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, name=f"rocmseat-bench-{n}", daemon=True)
               for n in range(min(work.concurrency, len(work.prompts)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()) + 5.0)
    wall = time.monotonic() - started
    return [o or Outcome(None, 0.0, 0, 0, (), None, None, "did not finish") for o in outcomes], wall


def percentile(values: Sequence[float], p: float) -> float:
    """numpy.percentile's default (linear interpolation), which vLLM's client uses."""
    s = sorted(values)
    if not s:
        return math.nan
    rank = (len(s) - 1) * p / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (rank - lo)


def _stats(name: str, values_s: Sequence[float],
           percentiles: Sequence[int]) -> dict[str, float | None]:
    """mean, median, std and percentiles in ms; None without samples (vLLM writes NaN there,
    which benchresult reads as absent only when no request completed)."""
    ms = [v * 1000.0 for v in values_s]
    if not ms:
        return {key: None for key in (f"mean_{name}_ms", f"median_{name}_ms", f"std_{name}_ms",
                                      *(f"p{p}_{name}_ms" for p in percentiles))}
    mean = sum(ms) / len(ms)
    out: dict[str, float | None] = {
        f"mean_{name}_ms": mean, f"median_{name}_ms": percentile(ms, 50),
        f"std_{name}_ms": math.sqrt(sum((v - mean) ** 2 for v in ms) / len(ms))}
    out.update({f"p{p}_{name}_ms": percentile(ms, p) for p in percentiles})
    return out


def result_doc(run: RunSpec, work: Workload, outcomes: Sequence[Outcome], wall_s: float, *,
               model: str, metadata: dict[str, str]) -> dict[str, Any]:
    """The outcomes as `vllm bench serve --save-result --save-detailed` writes them."""
    ok = [o for o in outcomes if not o.error]
    total_out = sum(o.output_tokens for o in ok)
    duration = max(wall_s, 1e-9)
    tpots = [(o.latency_s - (o.ttft_s or 0.0)) / (o.output_tokens - 1)
             for o in ok if o.output_tokens > 1]
    doc: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S"), "backend": BACKEND,
        "model_id": model, "num_prompts": len(outcomes), "max_concurrency": work.concurrency,
        "duration": duration, "completed": len(ok), "failed": len(outcomes) - len(ok),
        "total_input_tokens": sum(o.prompt_tokens for o in ok),
        "total_output_tokens": total_out, "request_throughput": len(ok) / duration,
        "output_throughput": total_out / duration,
    }
    for name, values in (("ttft", [o.ttft_s or 0.0 for o in ok]), ("tpot", tpots),
                         ("itl", [g for o in ok for g in o.itl_s]),
                         ("e2el", [o.latency_s for o in ok])):
        doc.update(_stats(name, values, (50, 90, 99)))
    doc["ttfts"] = [o.ttft_s or 0.0 for o in outcomes]
    doc["output_lens"] = [o.output_tokens for o in outcomes]
    doc["errors"] = [o.error for o in outcomes]
    doc["rocmseat_draft_n"] = [o.draft_n for o in outcomes]
    doc["rocmseat_draft_n_accepted"] = [o.draft_n_accepted for o in outcomes]
    doc.update(metadata)
    return doc


class OpenAIBench:
    """The gate's benchmark client for a seat whose engine is not vLLM: in this process, no
    start-up (the BenchClient counterpart of procs.py, one run at a time)."""

    def __init__(self, *, api_key: str | None = None) -> None:
        self.api_key = api_key

    def gone(self) -> str | None:
        return None

    def wait_ready(self, timeout_s: float = 0.0) -> None:
        return None

    def run_spec(self, run: RunSpec, *, base_url: str, model: str, result_dir: Path,
                 timeout_s: float, abort: Callable[[], str | None],
                 metadata: dict[str, str]) -> dict[str, Any]:
        """One battery run -> result_dir/<run>.json; the reply procs.BenchClient gives."""
        try:
            work = workload_of(run)
        except (StreamError, KeyError, ValueError, OSError) as exc:
            shown = (exc.message if isinstance(exc, RocmseatError)
                     else f"{type(exc).__name__}: {exc}")
            return {"ok": False, "error": f"{run.name}: {shown}"}
        outcomes, wall = run_workload(base_url, model, work, timeout_s=timeout_s, abort=abort,
                                      api_key=self.api_key)
        if (why := abort()) is not None:
            return {"ok": False, "error": f"{run.name} aborted: {why}"}
        doc = result_doc(run, work, outcomes, wall, model=model, metadata=metadata)
        write_into(result_dir, f"{run.name}.json", (jsonio.dumps(doc) + "\n").encode())
        return {"ok": True}

    def stop(self) -> None:
        return None
