"""Arms interleaved across starts, decided sequentially (pure; issue 27 item 6).

The unit of noise is a start: on the R9700 a process's decode speed is set when it spawns and
stays for its life (1.2-2.0x between starts, ROCm/legacy-rocm-build#6347), and the shared CPU
host drifts by minutes. One start per arm measures the lottery and the drift, not the drafter.
So the gate measures each arm over several fresh starts, in the order A B B A A B B A ... (each
pair of pairs balanced in time, so a linear drift cancels), one figure per start (the median of
its repeats), and decides after every start in the manner of Chromium Pinpoint
(catapult dashboard/pinpoint/models/compare/compare.py): DIFFERENT, SAME, or UNKNOWN (add
starts), with a bound in starts and in minutes.

- DIFFERENT: the two-sided Mann-Whitney U test of the per-start figures gives p <= 0.01
  (Pinpoint's low threshold), exact for small samples (the U distribution by recursion), so a
  start that drew a slow spawn shifts one rank, not the mean; or, from 3 starts per arm (the
  exact test cannot reach 0.01 below 5 a side), the 99 % interval of the ratio of the medians
  excludes 1 (each arm's spread at least `noise_floor` per start: two or three starts can agree
  by chance);
- SAME: equivalence shown, from 3 starts per arm: the 90 % interval of the ratio of the
  medians (robust spread: 1.4826 MAD per arm) lies inside 1/(1 + `effect`) .. 1 + `effect` (two
  one-sided tests at 5 % each, in log space so A/B and B/A agree). The margin is the effect the
  gate is asked to see, as in Pinpoint, whose SAME is relative to the magnitude asked for
  (compare.py: a p above thresholds.HighThreshold(mode, magnitude, sample_count), the p a real
  difference of that magnitude would fall below); SAME means "no difference as large as the
  effect", not "no difference at all". Half the effect (this module's first margin) took about
  4x the starts (n grows as 1 / room**2) and left an A/A run UNKNOWN at 15 minutes;
- UNKNOWN: neither yet; the next start runs, until `max_starts` or `max_minutes`, where
  UNKNOWN is the answer, with what it would take.

A start whose own repeats disagree (relative MAD of its repeats above `start_spread`) is flagged:
its median still counts (that is the robust part), and the report names it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

DIFFERENT, SAME, UNKNOWN = "DIFFERENT", "SAME", "UNKNOWN"
LOW_THRESHOLD = 0.01  # Pinpoint's DIFFERENT threshold (compare/thresholds.py LowThreshold)
MAD_SCALE = 1.4826  # MAD -> sd for a normal sample
Z90 = 1.6449
Z99 = 2.5758


def arm_of(index: int) -> str:
    """The arm of the index-th start: A B B A, A B B A, ..."""
    return "A" if index % 4 in (0, 3) else "B"


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return math.nan
    mid = n // 2
    return ordered[mid] if n % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def mad(values: Sequence[float]) -> float:
    m = median(values)
    return median([abs(v - m) for v in values])


@dataclass(frozen=True, slots=True)
class Start:
    """One fresh start of one arm: its repeats' figures (e.g. tokens/s)."""

    arm: str  # "A" or "B"
    repeats: tuple[float, ...]
    minutes: float  # wall time it took, start to last repeat

    @property
    def figure(self) -> float:
        return median(self.repeats)

    def spread(self) -> float:
        """Relative MAD of its repeats (0 with one repeat)."""
        m = self.figure
        return MAD_SCALE * mad(self.repeats) / m if m > 0 and len(self.repeats) > 1 else 0.0


@dataclass(frozen=True, slots=True)
class Rules:
    effect: float = 0.20  # the relative difference the gate must see
    max_starts: int = 16  # both arms together
    max_minutes: float = 15.0
    start_spread: float = 0.10  # a start whose repeats spread more is flagged
    min_per_arm: int = 2
    noise_floor: float = 0.02  # a start's figure is never trusted closer than this
    min_per_arm_same: int = 3  # two starts a side can agree by chance: their MAD is one gap

    def band(self) -> tuple[float, float]:
        """SAME's band: the ratio's 90 % interval inside 1/(1 + effect) .. 1 + effect."""
        return 1.0 / (1.0 + self.effect), 1.0 + self.effect


@dataclass(frozen=True, slots=True)
class Decision:
    result: str  # DIFFERENT | SAME | UNKNOWN
    final: bool  # decided, or the bound reached
    p_value: float
    ratio: float  # median(B) / median(A)
    low: float  # the 90 % interval of the ratio
    high: float
    starts: int
    minutes: float
    flagged: tuple[int, ...]  # indices of starts whose repeats disagree
    why: str


@cache
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """Number of arrangements of m A's and n B's per value of U (the A-before-B pairs)."""
    if m == 0 or n == 0:
        return (1,)
    # the last element is an A (adds n to U) or a B (adds 0)
    with_a = _u_counts(m - 1, n)
    with_b = _u_counts(m, n - 1)
    size = m * n + 1
    out = [0] * size
    for u, c in enumerate(with_a):
        out[u + n] += c
    for u, c in enumerate(with_b):
        out[u] += c
    return tuple(out)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p of the Mann-Whitney U test: exact (no ties, up to 20 a side), else the normal
    approximation with the tie correction."""
    m, n = len(a), len(b)
    if m == 0 or n == 0:
        return 1.0
    u = sum(1.0 if x > y else 0.5 if x == y else 0.0 for x in a for y in b)
    tied = len(set(a) | set(b)) < m + n
    if not tied and m <= 20 and n <= 20:
        counts = _u_counts(m, n)
        total = sum(counts)
        low = min(u, m * n - u)
        tail = sum(counts[: int(low) + 1]) / total
        return min(1.0, 2.0 * tail)
    ranks = sorted([*a, *b])
    groups: dict[float, int] = {}
    for v in ranks:
        groups[v] = groups.get(v, 0) + 1
    big = m + n
    ties = sum(t ** 3 - t for t in groups.values())
    var = m * n / 12.0 * ((big + 1) - ties / (big * (big - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - m * n / 2.0) - 0.5) / math.sqrt(var)
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))


def _ratio_se(a: Sequence[float], b: Sequence[float], floor: float) -> tuple[float, float]:
    """median(B)/median(A) and the standard error of its log, from the arms' robust spreads
    (the standard error of a median is about 1.2533 sd / sqrt(n); sd from the MAD, at least
    `floor` relative)."""
    ma, mb = median(a), median(b)
    if not (ma > 0 and mb > 0):
        return math.nan, math.nan
    sd_a = max(MAD_SCALE * mad(a) / ma, floor)
    sd_b = max(MAD_SCALE * mad(b) / mb, floor)
    se = math.hypot(1.2533 * sd_a / math.sqrt(len(a)), 1.2533 * sd_b / math.sqrt(len(b)))
    return mb / ma, se


def starts_to_decide(a: Sequence[float], b: Sequence[float], rules: Rules) -> tuple[int, str]:
    """About how many starts per arm would decide at the spread measured so far, and what they
    would decide: the n at which the 99 % interval of the ratio excludes 1 (DIFFERENT) or the
    90 % interval fits inside `Rules.band` (SAME, from `min_per_arm_same`), whichever is fewer
    (the standard error of the log ratio shrinks as 1/sqrt(n) per arm)."""
    ratio = _ratio_se(a, b, rules.noise_floor)[0]
    if not math.isfinite(ratio):
        return 0, UNKNOWN
    sd_a = max(MAD_SCALE * mad(a) / median(a), rules.noise_floor)
    sd_b = max(MAD_SCALE * mad(b) / median(b), rules.noise_floor)
    var1 = 1.2533 ** 2 * (sd_a ** 2 + sd_b ** 2)  # the log ratio's variance at one start per arm
    shift = abs(math.log(ratio))
    room = math.log(rules.band()[1]) - shift
    options = []
    if shift > 0:
        options.append((math.ceil(Z99 ** 2 * var1 / shift ** 2), DIFFERENT))
    if room > 0:
        options.append((max(math.ceil(Z90 ** 2 * var1 / room ** 2), rules.min_per_arm_same),
                        SAME))
    return min(options) if options else (0, UNKNOWN)


def decide(starts: Sequence[Start], rules: Rules) -> Decision:
    """The sequential decision after these starts (in the order they ran)."""
    a = [s.figure for s in starts if s.arm == "A"]
    b = [s.figure for s in starts if s.arm == "B"]
    minutes = sum(s.minutes for s in starts)
    flagged = tuple(i for i, s in enumerate(starts) if s.spread() > rules.start_spread)
    bound = len(starts) >= rules.max_starts or minutes >= rules.max_minutes
    if len(a) < rules.min_per_arm or len(b) < rules.min_per_arm:
        return Decision(UNKNOWN, bound, 1.0, math.nan, math.nan, math.nan, len(starts), minutes,
                        flagged, f"fewer than {rules.min_per_arm} starts per arm")
    p = mann_whitney_p(a, b)
    ratio, se = _ratio_se(a, b, rules.noise_floor)
    low, high = ratio * math.exp(-Z90 * se), ratio * math.exp(Z90 * se)
    if p <= LOW_THRESHOLD:
        return Decision(DIFFERENT, True, p, ratio, low, high, len(starts), minutes, flagged,
                        f"Mann-Whitney p = {p:.4f} <= {LOW_THRESHOLD}")
    low99, high99 = ratio * math.exp(-Z99 * se), ratio * math.exp(Z99 * se)
    if min(len(a), len(b)) >= 3 and (high99 < 1.0 or low99 > 1.0):
        return Decision(DIFFERENT, True, p, ratio, low, high, len(starts), minutes, flagged,
                        f"the 99 % interval {low99:.3f}..{high99:.3f} excludes 1")
    band_low, band_high = rules.band()
    band = f"{band_low:.3f}..{band_high:.3f}"
    if (min(len(a), len(b)) >= rules.min_per_arm_same
            and band_low < low and high < band_high):
        return Decision(SAME, True, p, ratio, low, high, len(starts), minutes, flagged,
                        f"the 90 % interval {low:.3f}..{high:.3f} lies inside {band} "
                        f"(no difference of {rules.effect:.0%} or more)")
    why = (f"p = {p:.3f}, interval {low:.3f}..{high:.3f} against {band}: "
           + ("the bound in starts or minutes is reached" if bound else "add starts"))
    if bound:
        need, would = starts_to_decide(a, b, rules)
        if would != UNKNOWN:
            why += (f"; at this spread about {need} starts per arm would say {would}")
    return Decision(UNKNOWN, bound, p, ratio, low, high, len(starts), minutes, flagged, why)
