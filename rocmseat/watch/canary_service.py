"""The drafter canary at work: a thread beside the watcher that sends the seat's fixed prompts to
each replica, judges every complete round (rocmseat.watch.canary) and sets
`drafter_canary_failed` through the watcher's alert book; the canary requests' usage waits here
until the watcher takes it out of its next window (Watcher.take_canary).

When it sends: every `[canary] interval_s` per replica, only when the watcher's last verdict says
the replica is up; with `when = "idle"` only while it runs and queues nothing; never when it is
saturated (requests wait, or every sequence slot is taken); never beyond `tokens_per_hour`
(counted from each response's usage). The baseline of each config key (per prompt, its draft
acceptance rate) is kept in the state dir beside the watcher's own baselines, so a restart of
the watchdog or of the replica keeps it; a new key learns afresh.

`<state dir>/watch/canary-<seat>.<replica>.json` (`rocmseat.canary-baselines/v1`, the document
CANARY_BASELINES, through rocmseat.statedir.StateDir): the config key, the number of prompts and
per prompt its acceptance rate (null: the prompt drafted nothing). It decides an alert, so it is
read back through a strict model: a damaged or forged file is one line
(`canary-baseline-refused`, naming the file and the key) and a baseline learned afresh.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from rocmseat import jsonio
from rocmseat.docmodel import Line, StrictDoc, strict
from rocmseat.errors import RocmseatError
from rocmseat.httpclient import request
from rocmseat.seat.canary_schema import Canary
from rocmseat.statedir import WATCH_FILE, Document, StateDir
from rocmseat.watch import alerts as A
from rocmseat.watch.baseline import file_name
from rocmseat.watch.canary import (
    Budget,
    CanaryResponseError,
    CanaryRound,
    RoundVerdict,
    Usage,
    idle,
    judge_round,
    parse_response,
    saturated,
)
from rocmseat.watch.status import ReplicaStatus

REQUEST_TIMEOUT_S = 120.0
CANARY_SCHEMA = "rocmseat.canary-baselines/v1"
MAX_PROMPTS = 1024  # a seat's [canary] prompts: a handful

Share = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class CanaryBaselinesDoc(StrictDoc):
    """One config key's per-prompt acceptance rates (files of rocmseat before the schema was
    stamped carry no `schema`: the same keys)."""

    schema_: Literal["rocmseat.canary-baselines/v1"] | None = Field(None, alias="schema")
    key: Annotated[Line, Field(min_length=1, max_length=4096)]
    prompts: Annotated[int, Field(ge=1, le=MAX_PROMPTS)]
    rates: Annotated[list[Share | None], Field(min_length=1, max_length=MAX_PROMPTS)]


CANARY_BASELINES = Document(WATCH_FILE, CANARY_SCHEMA, strict(CanaryBaselinesDoc))


@dataclass(frozen=True, slots=True)
class CanaryTarget:
    replica: str
    base_url: str  # http://host:port (the replica's /metrics URL without its path)
    model: str  # the served model name
    max_num_seqs: int
    api_key: str | None = field(default=None, repr=False)  # the server's --api-key
    engine: str = "vllm"  # the seat's [engine] kind: how a request is sent and read (canary.py)
    draft_length: int | None = None  # the seat's num_speculative_tokens (SGLang's figures)


@dataclass(slots=True)
class _State:
    key: str | None = None
    baseline: list[float | None] | None = None
    last_round_s: float | None = None
    pending: list[tuple[float, Usage]] = field(default_factory=list)
    last: RoundVerdict | None = None
    engine_since_s: float | None = None  # the watcher saw this engine start (restarted)
    judged: CanaryRound | None = None  # the last judged round on that engine


Send = Callable[[CanaryTarget, str, int], Any]  # (target, prompt, max_tokens) -> response JSON


def http_send(target: CanaryTarget, prompt: str, max_tokens: int) -> Any:
    """POST /v1/completions at temperature 0 (greedy: the same prompt asks the same of the
    drafter every time); the parsed JSON body. SGLang: its native POST /generate, the one
    response that carries `meta_info.spec_verify_ct` (python/sglang/srt/entrypoints/
    http_server.py `generate_request`; sampling params `temperature`, `max_new_tokens`)."""
    path = "/v1/completions"
    body = jsonio.dumps({"model": target.model, "prompt": prompt, "max_tokens": max_tokens,
                         "temperature": 0, "n": 1}).encode()
    if target.engine == "sglang":
        path = "/generate"
        body = jsonio.dumps({"text": prompt, "sampling_params": {
            "temperature": 0, "max_new_tokens": max_tokens}}).encode()
    headers = [("Content-Type", "application/json")]
    if target.api_key:
        headers.append(("Authorization", f"Bearer {target.api_key}"))
    response = request("POST", f"{target.base_url}{path}", timeout_s=REQUEST_TIMEOUT_S,
                       body=body, headers=headers)
    if response.status != 200:
        raise CanaryResponseError(f"HTTP {response.status}")
    try:
        return json.loads(response.body)
    except (ValueError, RecursionError):
        raise CanaryResponseError("the response is not JSON") from None


class CanaryService:
    def __init__(self, config: Canary, targets: Sequence[CanaryTarget], *,
                 statuses: Callable[[], Sequence[ReplicaStatus]],
                 set_alert: Callable[[str, str, bool, dict[str, str]], None],
                 state_dir: Path | None, seat: str, log: Callable[[str], None],
                 send: Send = http_send, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.targets = {t.replica: t for t in targets}
        self._statuses = statuses
        self._set_alert = set_alert
        self._state_dir = state_dir
        self._seat = seat
        self._log = log
        self._send = send
        self._clock = clock
        self._state = {t.replica: _State() for t in targets}
        self._budget = Budget(config.tokens_per_hour, [])
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- the watcher's side -------------------------------------------------------------
    def take(self, replica: str, until_s: float) -> list[Usage]:
        """The canary requests of `replica` that finished by `until_s` (a scrape's time), taken
        out of what waits: the watcher subtracts them from that window."""
        with self._lock:
            state = self._state.get(replica)
            if state is None:
                return []
            done = [u for t, u in state.pending if t <= until_s]
            state.pending = [(t, u) for t, u in state.pending if t > until_s]
        return done

    def restarted(self, replica: str, now_s: float) -> None:
        """The watcher saw a new engine process on `replica`: what the old one's rounds said no
        longer holds, and the new one is judged at once (remediation's step 1 waits on it)."""
        with self._lock:
            state = self._state.get(replica)
            if state is not None:
                state.engine_since_s = now_s
                state.judged = None
                state.last_round_s = None

    def last_round(self, replica: str) -> CanaryRound | None:
        """The last complete round judged against a baseline on the engine running now (a
        round that learned the baseline judges nothing), or None."""
        with self._lock:
            state = self._state.get(replica)
            return None if state is None else state.judged

    # --- the thread ---------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rocmseat-canary", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=REQUEST_TIMEOUT_S + 5)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.tick()

    def tick(self) -> None:
        """One look at every replica: run a round where one is due and allowed."""
        by_name = {s.replica: s for s in self._statuses()}
        for name, target in self.targets.items():
            status = by_name.get(name)
            if status is None or self._stop.is_set():
                continue
            if self._due(name, status, target):
                self.run_round(target, status.key)

    def _due(self, name: str, status: ReplicaStatus, target: CanaryTarget) -> bool:
        state = self._state[name]
        now = self._clock()
        if state.last_round_s is not None and now - state.last_round_s < self.config.interval_s:
            return False
        if not status.up or status.window is None or not status.speculating:
            return False  # down, not scraped yet, or serving without its drafter
        running, waiting = status.window.running, status.window.waiting
        if saturated(running, waiting, target.max_num_seqs):
            return False  # the replica's room is its traffic's
        if self.config.when == "idle" and not idle(running, waiting):
            return False
        need = len(self.config.prompts) * self.config.max_tokens
        return self._budget.left(now) >= need

    def run_round(self, target: CanaryTarget, key: str) -> RoundVerdict | None:
        """Every prompt once; a complete round is judged and acted on."""
        state = self._state[target.replica]
        started = state.last_round_s = self._clock()
        rates: list[float | None] = []
        for prompt in self.config.prompts:
            try:
                usage = parse_response(self._send(target, prompt, self.config.max_tokens),
                                       target.engine, target.draft_length)
            except (RocmseatError, CanaryResponseError) as exc:
                self._log(f"rocmseat-watch replica={target.replica} canary-request-failed "
                          f"error={str(exc)[:160].replace(' ', '_')}")
                return None  # an incomplete round judges nothing
            now = self._clock()
            with self._lock:
                state.pending.append((now, usage))
            self._budget.spend(now, usage.generation_tokens + usage.prompt_tokens)
            rates.append(usage.rate)
        return self._judge(target, key, rates, started)

    def _judge(self, target: CanaryTarget, key: str, rates: list[float | None],
               started_s: float) -> RoundVerdict:
        state = self._state[target.replica]
        if state.key != key:
            state.key, state.baseline = key, self._load(target.replica, key)
        verdict = judge_round(rates, state.baseline, self.config.collapse_ratio)
        state.last = verdict
        details = verdict.details()
        with self._lock:
            since = state.engine_since_s
            if not verdict.learned and (since is None or started_s >= since):
                state.judged = CanaryRound(started_s, verdict.failed, details["rates"],
                                           details["baselines"])
        if verdict.learned:
            state.baseline = list(rates)
            self._save(target.replica, key, rates)
            self._log(f"rocmseat-watch replica={target.replica} canary-baseline-learned "
                      f"key={key} rates={details['rates']}")
        self._set_alert(target.replica, A.DRAFTER_CANARY_FAILED, verdict.failed, details)
        return verdict

    # --- baselines in the state dir -------------------------------------------------------
    def _name(self, replica: str) -> str:
        # beside the watcher's baselines, the name made safe the same way
        return file_name(f"canary-{self._seat}.{replica}")

    def _load(self, replica: str, key: str) -> list[float | None] | None:
        """The baseline of `key` (None: none yet, another key's, or another set of prompts:
        learned afresh); a file that is not used is said in one line first."""
        if self._state_dir is None:
            return None
        try:
            doc = StateDir(self._state_dir).read(CANARY_BASELINES, name=self._name(replica))
        except RocmseatError as exc:  # unreadable, untrusted, not the canary's baselines
            self._log(f"rocmseat-watch replica={replica} canary-baseline-refused "
                      f"error={exc.message[:300].replace(' ', '_')} (learned afresh)")
            return None
        if doc is None or doc.key != key:
            return None
        if doc.prompts != len(self.config.prompts) or len(doc.rates) != doc.prompts:
            return None  # the seat's prompts changed: their baseline is learned afresh
        return list(doc.rates)

    def _save(self, replica: str, key: str, rates: list[float | None]) -> None:
        if self._state_dir is None:
            return
        try:
            StateDir(self._state_dir).write(CANARY_BASELINES, {
                "key": key, "prompts": len(rates), "rates": rates}, name=self._name(replica))
        except (OSError, RocmseatError) as exc:
            self._log(f"rocmseat-watch replica={replica} canary-baseline-not-saved "
                      f"error={str(exc)[:120].replace(' ', '_')}")


def canary_factory(seat: Any, state_dir: Path | None, targets: Sequence[Any]
                   ) -> Callable[[Any, Callable[[str], None]], CanaryService]:
    """The service's canary for a seat with `[canary] enabled` (rocmseat watch SEAT): one
    CanaryTarget per watched replica (its /metrics URL without the path)."""
    from urllib.parse import urlsplit

    def base(url: str) -> str:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc}"

    from rocmseat.launch.readiness import served_api_key

    key = served_api_key(seat.serve.extra_args, seat.env)  # as launch's canary reads it
    drafter = getattr(seat, "drafter", None)
    canary_targets = [CanaryTarget(t.name, base(t.url), seat.model.served_name or seat.name,
                                   seat.serve.max_num_seqs, key, seat.engine.kind,
                                   drafter.num_speculative_tokens if drafter else None)
                      for t in targets]

    def make(watcher: Any, log: Callable[[str], None]) -> CanaryService:
        return CanaryService(seat.canary, canary_targets, statuses=lambda: watcher.statuses,
                             set_alert=watcher.set_alert, state_dir=state_dir, seat=seat.name,
                             log=log)

    return make
