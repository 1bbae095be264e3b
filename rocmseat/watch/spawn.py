"""The slow-spawn lottery, seen (issue 27 item 6).

On the R9700 a process's decode speed is set when it spawns: some starts run 1.2-2.0x slower for
their whole life and only a restart changes that (ROCm/legacy-rocm-build#6347, open). A slow
start looks healthy to every other check: it answers, it drafts, its acceptance is normal.

So the watchdog learns each replica's decode rate at matched load, per config key, across starts:
the rate of a window is decode steps per second per running request, `generation tokens /
acceptance length / seconds / running requests` (the acceptance length takes speculation out:
a drafter that accepts less emits fewer tokens per step, which is the detector's business, not
the spawn's), bucketed by the number of running requests (the load). A start keeps the median
rate of its first `judge_windows` windows per bucket (its figure, logged as `spawn-figure` with
the history and the factor); the history of a key is the figures of the starts before. A start
whose figure in a bucket is at least `factor` times slower than the median of at least
`min_starts` earlier starts in that bucket raises `replica_slow_spawn`, naming the factor; only
while acceptance is normal (no acceptance drop, no dead drafter: a collapsed drafter is slow for
another reason). The alert stays for the life of the start; a restart judges afresh.

A start judged slow never joins the history: the history is what a good start of this seat does,
and a lottery loser in it would lower the bar every later start is held to (two losers in a row
and the second would pass as normal). One earlier start is enough history (`min_starts` 1): the
lottery's losers are 1.2-2.0x slower, well past the run-to-run noise of one good start at the
same load, and a first start that was itself a loser only makes the next good starts look fast
(they join, and the median moves to them). Windows with no running request, or without
generation, teach nothing.

The history is kept beside the watcher's baselines, `<state dir>/watch/spawn-<seat>.<replica>.json`
(`rocmseat.spawn-history/v1`, the document SPAWN_HISTORY, through rocmseat.statedir.StateDir):
per config key, per bucket (running requests, as a decimal string), the figures of the starts
kept, oldest first. It decides an alert, so it is read back through a strict model: a damaged or
forged file is one line (`spawn-history-refused`, naming the file and the key) and a history
learned afresh, never a bar lowered by a planted figure of 1e-300 or raised by 1e300.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from rocmseat.docmodel import Line, StrictDoc, strict
from rocmseat.errors import RocmseatError
from rocmseat.statedir import WATCH_FILE, Document, StateDir
from rocmseat.watch.baseline import file_name
from rocmseat.watch.window import Window

MAX_STARTS_KEPT = 20
MAX_KEYS_KEPT = 64  # config keys of one replica: the newest kept
MAX_RATE = 1e9  # decode steps per second per request: far past any engine
SPAWN_SCHEMA = "rocmseat.spawn-history/v1"

Rate = Annotated[float, Field(gt=0.0, le=MAX_RATE, allow_inf_nan=False)]
Bucket = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,6}$")]


class SpawnHistoryDoc(StrictDoc):
    """The figures of earlier starts: config key -> bucket -> figures, oldest first (files of
    rocmseat before the schema was stamped carry no `schema`: the same keys)."""

    schema_: Literal["rocmseat.spawn-history/v1"] | None = Field(None, alias="schema")
    keys: Annotated[dict[Annotated[Line, Field(min_length=1, max_length=4096)],
                         Annotated[dict[Bucket, Annotated[list[Rate], Field(
                             min_length=1, max_length=MAX_STARTS_KEPT)]],
                                   Field(max_length=4096)]],
                    Field(max_length=MAX_KEYS_KEPT)]


SPAWN_HISTORY = Document(WATCH_FILE, SPAWN_SCHEMA, strict(SpawnHistoryDoc))


@dataclass(frozen=True, slots=True)
class SpawnParams:
    factor: float = 1.2  # this much slower than the history at the same load
    # windows per bucket that make a start's figure: their median stands a partial first window
    # (traffic began mid-window) and one hiccup more (50 s at the watchdog's default 10 s)
    judge_windows: int = 5
    min_starts: int = 1  # earlier starts in the bucket before a start is judged


def window_rate(window: Window) -> tuple[int, float] | None:
    """(bucket: running requests, decode steps per second per running request), or None when
    the window teaches nothing (idle, no generation count, an empty window)."""
    running = window.running
    gen = window.generation_tokens
    if running is None or gen is None or running < 1 or gen <= 0 or window.duration_s <= 0:
        return None
    al = window.acceptance_length or 1.0  # no drafts in the window: one token per step
    return round(running), gen / al / window.duration_s / running


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


@dataclass(slots=True)
class _Replica:
    key: str = ""
    history: dict[str, dict[int, list[float]]] = field(default_factory=dict)  # key -> bucket
    current: dict[int, list[float]] = field(default_factory=dict)  # this start's rates
    slow: tuple[int, float] | None = None  # (bucket, factor) once judged slow
    loaded: bool = False


@dataclass(frozen=True, slots=True)
class SpawnVerdict:
    slow: bool
    bucket: int | None
    factor: float | None  # history median / this start's median (>= 1: slower)
    starts: int  # earlier starts in the bucket

    def details(self) -> dict[str, str]:
        return {"factor": "-" if self.factor is None else f"{self.factor:.2f}",
                "running": "-" if self.bucket is None else str(self.bucket),
                "starts": str(self.starts)}


class SpawnWatch:
    """Per replica, per config key: the rate history and the judgement of the running start."""

    def __init__(self, params: SpawnParams | None = None, *, state_dir: Path | None = None,
                 prefix: str = "", log: Callable[[str], None] = lambda line: None) -> None:
        self.params = params or SpawnParams()
        self._log = log  # the watchdog's log: figures and a history not saved
        self._state_dir = state_dir
        self._prefix = prefix
        self._replicas: dict[str, _Replica] = {}

    def restarted(self, replica: str) -> None:
        """A new engine process: the finished start's figures join the history."""
        rep = self._get(replica)
        self._close_start(replica, rep)

    def observe(self, replica: str, key: str, window: Window, acceptance_ok: bool
                ) -> SpawnVerdict:
        rep = self._get(replica)
        if key != rep.key:
            self._close_start(replica, rep)  # another config: its own history
            rep.key = key
        hist = rep.history.setdefault(key, {})
        found = window_rate(window)
        if found is not None and acceptance_ok:
            bucket, rate = found
            mine = rep.current.setdefault(bucket, [])
            if len(mine) < self.params.judge_windows:
                mine.append(rate)
                if len(mine) == self.params.judge_windows:
                    self._say_figure(replica, bucket, mine, hist.get(bucket, []))
        if rep.slow is not None:
            return SpawnVerdict(True, rep.slow[0], rep.slow[1], len(hist.get(rep.slow[0], ())))
        best: SpawnVerdict = SpawnVerdict(False, None, None, 0)
        for bucket, mine in rep.current.items():
            before = hist.get(bucket, [])
            if len(mine) < self.params.judge_windows or len(before) < self.params.min_starts:
                continue
            factor = _median(before) / _median(mine)
            if best.factor is None or factor > best.factor:
                best = SpawnVerdict(False, bucket, factor, len(before))
        if best.factor is not None and best.factor >= self.params.factor and acceptance_ok:
            rep.slow = (best.bucket or 0, best.factor)
            return SpawnVerdict(True, best.bucket, best.factor, best.starts)
        return best

    def _say_figure(self, replica: str, bucket: int, mine: list[float],
                    before: list[float]) -> None:
        """One line when a start's figure in a bucket is complete: what an operator (and the
        engine tier) reads to see a normal start's factor, which raises no alert."""
        figure = _median(mine)
        history = _median(before) if before else None
        shown = "-" if history is None else f"{history:.3f}"
        factor = "-" if history is None else f"{history / figure:.2f}"
        self._log(f"rocmseat-watch replica={replica} spawn-figure running={bucket} "
                   f"rate={figure:.3f} history={shown} starts={len(before)} factor={factor}")

    # --- history ----------------------------------------------------------------------
    def _get(self, replica: str) -> _Replica:
        rep = self._replicas.get(replica)
        if rep is None:
            rep = self._replicas[replica] = _Replica()
        if not rep.loaded:
            rep.loaded = True
            rep.history = self._load(replica)
        return rep

    def _close_start(self, replica: str, rep: _Replica) -> None:
        if rep.key and rep.current and rep.slow is None:  # a slow start never joins
            hist = rep.history.setdefault(rep.key, {})
            for bucket, rates in rep.current.items():
                if len(rates) >= self.params.judge_windows:
                    hist.setdefault(bucket, []).append(_median(rates))
                    del hist[bucket][:-MAX_STARTS_KEPT]
            self._save(replica, rep.history)
        rep.current, rep.slow = {}, None

    def _name(self, replica: str) -> str:
        # beside the watcher's baselines, the name made safe the same way
        return file_name(f"spawn-{self._prefix}.{replica}")

    def _load(self, replica: str) -> dict[str, dict[int, list[float]]]:
        if self._state_dir is None:
            return {}
        try:
            doc = StateDir(self._state_dir).read(SPAWN_HISTORY, name=self._name(replica))
        except RocmseatError as exc:  # unreadable, untrusted, not a history: said, re-learned
            self._log(f"rocmseat-watch replica={replica} spawn-history-refused "
                      f"error={exc.message[:300].replace(' ', '_')} (learned afresh)")
            return {}
        if doc is None:
            return {}
        return {key: {int(bucket): list(rates) for bucket, rates in buckets.items()}
                for key, buckets in doc.keys.items()}

    def _save(self, replica: str, history: dict[str, dict[int, list[float]]]) -> None:
        if self._state_dir is None:
            return
        kept = list(history.items())[-MAX_KEYS_KEPT:]  # the newest keys (insertion order)
        doc = {"keys": {k: {str(b): r for b, r in v.items() if r} for k, v in kept
                        if any(v.values())}}
        try:
            StateDir(self._state_dir).write(SPAWN_HISTORY, doc, name=self._name(replica))
        except (OSError, RocmseatError) as exc:  # kept in memory; the next start tries again
            self._log(f"rocmseat-watch replica={replica} spawn-history-not-saved "
                       f"error={str(exc)[:120].replace(' ', '_')}")
