"""A trace simulator for the watchdog: a day of speculative-decoding windows, healthy or faulty.

Traffic model (bench/bench_watch_detect.py prints what it gives):
- four workload categories with the field's tokens per update at K=7: prose 2.55, chat 2.83,
  math 5.11, file edits 5.43; each request draws its own per-token acceptance around its
  category's (sd `request_sd`), and its drafts follow vLLM's prefix rule: c_0 ~ Bin(n, a),
  c_i ~ Bin(c_{i-1}, a) (a draft stops at its first rejected token);
- a diurnal draft rate (quiet night with 40 % idle windows and a 5-minute batch burst at 03:20,
  day traffic, 2-minute bursts at 3x every 47 minutes), requests that live a few windows, hours
  of one single category (mix shifts; hour 23 is pure prose at ~2 drafts/s), restarts (a
  skipped window);
- under load a per-batch-size schedule cuts K from 7 to 3 for part of the drafts (above 30
  drafts/s; most of them in the daily peak, 13:00-14:00, which is also an hour of pure prose);
- faults: a factor on every request's acceptance from `fault_start_s` on (constant or ramped).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rocmseat.watch.baseline import alpha_for_acceptance_length
from rocmseat.watch.window import Window

K_FULL = 7
K_SCHEDULED = 3
CATEGORIES: dict[str, float] = {"prose": 2.55, "chat": 2.83, "math": 5.11, "file_edits": 5.43}
BASE_MIX: dict[str, float] = {"prose": 0.40, "chat": 0.35, "math": 0.13, "file_edits": 0.12}
# Hours (UTC, from midnight) served by one category only: the mix shifts the detector must accept.
# Hour 23 is pure prose at ~2 drafts/s: the gate pools windows of one low-acceptance category.
SINGLE_CATEGORY_HOURS: dict[int, str] = {9: "chat", 11: "prose", 13: "prose", 15: "file_edits",
                                         17: "math", 20: "chat", 23: "prose"}
DAY_S = 24 * 3600.0
_BURST_EVERY_S, _BURST_S = 47 * 60.0, 120.0  # daytime bursts: 2 minutes at 3x, every 47 min
_NIGHT_BATCH = (3 * 3600.0 + 1200.0, 3 * 3600.0 + 1500.0)  # 03:20-03:25 at 20 drafts/s


@dataclass(frozen=True, slots=True)
class Fault:
    start_s: float
    factor: float  # multiplies every request's per-token acceptance
    ramp_s: float = 0.0  # > 0: the factor is reached linearly over this many seconds


@dataclass(frozen=True, slots=True)
class SimWindow:
    time_s: float  # end of the window
    window: Window | None  # None: the replica restarted in this interval
    true_al: float  # the acceptance length the traffic would show at full K, fault included


def binomial(rng: random.Random, n: int, p: float) -> int:
    if n <= 0 or p <= 0.0:
        return 0
    if p >= 1.0:
        return n
    if n <= 40:
        return sum(1 for _ in range(n) if rng.random() < p)
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    return min(n, max(0, round(rng.gauss(mean, sd))))


def draft_rate(t_s: float, rng: random.Random) -> float:
    """Drafts per second at time of day t: quiet night, busy day, evening tail."""
    hour = (t_s % DAY_S) / 3600.0
    if _NIGHT_BATCH[0] <= t_s % DAY_S < _NIGHT_BATCH[1]:
        return 20.0 * rng.uniform(0.8, 1.2)  # a batch job bursts into the quiet night
    if hour < 6:
        if rng.random() < 0.4:
            return 0.0  # an idle window: no request in flight
        base = 0.4
    elif hour < 8:
        base = 4.0
    elif 13 <= hour < 14:
        base = 45.0  # the daily peak (a prose hour): the schedule drafts K=3 for most steps
    elif hour < 19:
        base = 25.0
    elif hour < 22:
        base = 10.0
    else:
        base = 2.0
    if 7 <= hour < 22 and t_s % _BURST_EVERY_S < _BURST_S:
        base *= 3.0  # a short burst: the schedule drafts K=3 for most steps
    return max(0.0, base * rng.uniform(0.6, 1.4))


def category_alpha() -> dict[str, float]:
    return {name: alpha_for_acceptance_length(al, K_FULL) for name, al in CATEGORIES.items()}


def factor_for_mixed_al(target_al: float) -> float:
    """The acceptance factor that takes the base mix from its AL to `target_al` at K=7."""
    alphas = category_alpha()

    def mixed(f: float) -> float:
        return sum(w * _al(alphas[c] * f) for c, w in BASE_MIX.items())

    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mixed(mid) < target_al else (lo, mid)
    return (lo + hi) / 2


def _al(alpha: float, k: int = K_FULL) -> float:
    return 1.0 + sum(alpha**i for i in range(1, k + 1))


def mixed_al() -> float:
    alphas = category_alpha()
    return sum(w * _al(alphas[c]) for c, w in BASE_MIX.items())


def simulate(
    *,
    seed: int,
    duration_s: float = DAY_S,
    interval_s: float = 10.0,
    start_s: float = 0.0,
    fault: Fault | None = None,
    restarts_s: tuple[float, ...] = (3 * 3600.0 + 5, 14 * 3600.0 + 5),
    request_sd: float = 0.03,
    rate: Callable[[float, random.Random], float] = draft_rate,
    mix_shifts: bool = True,
) -> Iterator[SimWindow]:
    rng = random.Random(seed)
    alphas = category_alpha()
    requests: list[tuple[float, int]] = []  # (per-token acceptance, windows left)
    t = start_s
    end = start_s + duration_s
    pending_restarts = sorted(restarts_s)
    while t + interval_s <= end + 1e-9:
        t += interval_s
        hour = int((t % DAY_S) // 3600)
        single = SINGLE_CATEGORY_HOURS.get(hour) if mix_shifts else None
        factor = 1.0
        if fault is not None and t > fault.start_s:
            progress = 1.0 if fault.ramp_s <= 0 else min(1.0, (t - fault.start_s) / fault.ramp_s)
            factor = 1.0 - (1.0 - fault.factor) * progress
        drafts_per_s = rate(t, rng)
        n_total = int(drafts_per_s * interval_s + rng.random())
        # Requests: about one per 8 drafts/s in flight, each living a few windows.
        wanted = max(1, round(drafts_per_s / 8.0)) if n_total > 0 else 0
        requests = [(a, left - 1) for a, left in requests if left > 1][:wanted]
        while len(requests) < wanted:
            name = single or rng.choices(list(BASE_MIX), weights=list(BASE_MIX.values()))[0]
            a = min(0.99, max(0.01, rng.gauss(alphas[name], request_sd)))
            requests.append((a, 1 + int(rng.expovariate(1 / 3.0))))
        if pending_restarts and t >= pending_restarts[0]:
            pending_restarts.pop(0)
            requests = []
            yield SimWindow(t, None, _al(_mean_alpha(alphas, single) * factor))
            continue
        yield SimWindow(
            t, _window(rng, requests, n_total, factor, interval_s, drafts_per_s),
            _al(_mean_alpha(alphas, single) * factor) if single else _mixed_al_at(alphas, factor),
        )


def _mean_alpha(alphas: dict[str, float], single: str | None) -> float:
    if single:
        return alphas[single]
    return sum(w * alphas[c] for c, w in BASE_MIX.items())


def _mixed_al_at(alphas: dict[str, float], factor: float) -> float:
    return sum(w * _al(alphas[c] * factor) for c, w in BASE_MIX.items())


def _window(
    rng: random.Random,
    requests: list[tuple[float, int]],
    n_total: int,
    factor: float,
    interval_s: float,
    drafts_per_s: float,
) -> Window:
    per_pos = [0] * K_FULL
    draft_tokens = 0
    accepted = 0
    # Above 30 drafts/s the schedule drafts K=3 for a share of the steps (a bigger batch).
    short_share = 0.0 if drafts_per_s < 30.0 else min(0.8, (drafts_per_s - 30.0) / 20.0)
    if requests:
        shares = [n_total // len(requests)] * len(requests)
        for i in range(n_total - sum(shares)):
            shares[i % len(requests)] += 1
        for (a, _), n in zip(requests, shares, strict=True):
            a_eff = a * factor
            n_short = binomial(rng, n, short_share)
            for count, k in ((n - n_short, K_FULL), (n_short, K_SCHEDULED)):
                previous = count
                for i in range(k):
                    previous = binomial(rng, previous, a_eff)
                    per_pos[i] += previous
                    accepted += previous
                draft_tokens += count * k
    gen = n_total + accepted
    return Window(
        duration_s=interval_s,
        drafts=float(n_total),
        draft_tokens=float(draft_tokens),
        accepted_tokens=float(accepted),
        accepted_per_pos=tuple(float(c) for c in per_pos),
        generation_tokens=float(gen),
        prompt_tokens=None,
        preemptions=None,
        prefix_queries=None,
        prefix_hits=None,
        running=float(len(requests)),
        waiting=0.0,
        kv_usage=None,
        spec_present=True,
    )
