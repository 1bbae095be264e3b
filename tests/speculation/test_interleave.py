"""The interleaved gate's sequential decision (rocmseat/speculation/gate/interleave.py, issue 27
item 6): the A B B A order, the exact Mann-Whitney test, DIFFERENT / SAME / UNKNOWN with the
bound in starts and minutes, flagged starts. The per-start figures below are shaped like the CPU
engine's (tokens/s of a start, a few percent apart), including a slow spawn."""

from __future__ import annotations

import itertools
import math

import pytest

from rocmseat.speculation.gate.interleave import (
    DIFFERENT,
    SAME,
    UNKNOWN,
    Rules,
    Start,
    arm_of,
    decide,
    mann_whitney_p,
)


def test_the_order_balances_drift():
    order = "".join(arm_of(i) for i in range(8))
    assert order == "ABBAABBA"
    # a linear drift in time cancels over every four starts
    assert sum(i for i in range(8) if arm_of(i) == "A") == sum(
        i for i in range(8) if arm_of(i) == "B")


def test_mann_whitney_exact():
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)  # 2 of 20 orders
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    # the exact distribution against a brute-force count
    a, b = [1.0, 4.0, 6.0], [2.0, 3.0, 5.0, 7.0]
    values = sorted(a + b)
    u_of = lambda xs: sum(x > y for x in xs for y in values if y not in xs)  # noqa: E731
    u = u_of(a)
    us = [u_of(list(c)) for c in itertools.combinations(values, 3)]
    low = min(u, 12 - u)
    brute = min(1.0, 2 * sum(x <= low for x in us) / len(us))
    assert mann_whitney_p(a, b) == pytest.approx(brute)
    assert mann_whitney_p([1.0, 1.0], [1.0, 1.0]) == 1.0  # ties: the normal approximation


def run(figures_a, figures_b, rules=Rules(), minutes=1.0):
    """Starts in the interleaved order, deciding after each; the first final decision."""
    a, b = iter(figures_a), iter(figures_b)
    starts = []
    for i in itertools.count():
        arm = arm_of(i)
        value = next(a if arm == "A" else b, None)
        if value is None:
            return decide(starts, rules)
        starts.append(Start(arm, (value * 0.99, value, value * 1.01), minutes))
        d = decide(starts, rules)
        if d.final:
            return d
    raise AssertionError


def test_a_20_percent_effect_is_different():
    base = [100, 103, 98, 101, 99, 102, 100, 97]
    d = run(base, [v * 1.2 for v in base])
    assert d.result == DIFFERENT and d.starts <= 8
    assert d.ratio == pytest.approx(1.2, abs=0.02)


def test_an_aa_run_is_same():
    d = run([100, 103, 98, 101, 99, 102, 100, 97], [101, 99, 102, 98, 100, 103, 97, 100])
    assert d.result == SAME and d.low > 0.9 and d.high < 1.1


def test_a_slow_spawn_is_one_rank_not_a_verdict():
    # one B start drew the slow spawn (1.6x slower): no DIFFERENT from it alone
    a = [100, 102, 99, 101, 100, 98, 101, 100]
    b = [101, 62, 100, 99, 102, 100, 98, 101]
    d = run(a, b, Rules(max_starts=16))
    assert d.result != DIFFERENT


def test_the_bound_says_unknown():
    d = run([100, 120, 90, 110], [105, 95, 125, 85], Rules(max_starts=8))
    assert d.result == UNKNOWN and d.final and "bound" in d.why
    timed = run([100, 120, 90, 110, 100], [105, 95, 125, 85, 100],
                Rules(max_minutes=3.0), minutes=1.0)
    assert timed.result == UNKNOWN and timed.final and timed.minutes >= 3.0


def test_a_start_whose_repeats_disagree_is_flagged():
    starts = [Start("A", (100.0, 101.0, 99.0), 1.0), Start("B", (100.0, 60.0, 140.0), 1.0),
              Start("B", (100.0, 100.5, 99.5), 1.0), Start("A", (99.0, 100.0, 101.0), 1.0)]
    d = decide(starts, Rules())
    assert d.flagged == (1,)
    assert math.isfinite(d.ratio)


def test_the_driver_runs_fresh_starts_in_order_until_decided():
    """run_interleaved over a GateRun whose starts return recorded decode runs (the arm record's
    shape), a 20 % effect: DIFFERENT after a few starts, named 00-A 01-B 02-B 03-A ..."""
    from types import SimpleNamespace

    from rocmseat.speculation.gate.interleave_run import ArmPair, run_interleaved

    class FakeGate:
        def __init__(self):
            self.names = []
            self.t = 0.0

        def run_arm(self, name, seat, *, cache_root=None):
            assert cache_root is None  # no caches handed to run_interleaved: each start its own
            self.names.append(name)
            self.t += 90.0  # a cold start and its runs: 1.5 minutes
            value = seat * (1.0 + 0.01 * (len(self.names) % 3))
            runs = [SimpleNamespace(phase="decode", concurrency=4, error=None,
                                    result=SimpleNamespace(output_tokens_per_s=value * f))
                    for f in (0.99, 1.0, 1.01)]
            return SimpleNamespace(name=name, runs=runs)

    gate = FakeGate()
    seen = []
    done = run_interleaved(gate, ArmPair(100.0, 120.0), Rules(), concurrency=4,
                           clock=lambda: gate.t, on_decision=seen.append)
    assert done.decision.result == DIFFERENT and done.decision.final
    assert gate.names[:4] == ["00-A", "01-B", "02-B", "03-A"]
    assert len(seen) == len(gate.names) == done.decision.starts
    assert done.decision.minutes == pytest.approx(1.5 * len(gate.names))


def test_unknown_at_the_bound_says_what_it_would_take():
    """Noisy starts (15 % spread) with a 5 % difference: UNKNOWN at the bound, and the estimate
    of starts per arm follows the measured spread (1.2533 sd sqrt(2/n) against the room)."""
    from rocmseat.speculation.gate.interleave import starts_to_decide

    a = [100.0, 120.0, 80.0, 110.0]
    b = [95.0, 114.0, 76.0, 104.5]
    rules = Rules(max_starts=8)
    starts = [Start(arm_of(i), ((a if arm_of(i) == "A" else b)[i // 2],), 1.0)
              for i in range(8)]
    d = decide(starts, rules)
    assert (d.result, d.final) == (UNKNOWN, True)
    need, would = starts_to_decide(a, b, rules)
    assert would == SAME and need > 4  # more than it had
    assert f"about {need} starts per arm would say SAME" in d.why
    # the same spread with a 30 % difference: DIFFERENT is nearer
    assert starts_to_decide(a, [x * 0.7 for x in a], rules)[1] == DIFFERENT
    # identical figures: the noise floor alone would take one start a side; SAME needs three
    assert starts_to_decide([100.0] * 3, [100.0] * 3, rules) == (3, SAME)


def _starts(a: list[float], b: list[float]) -> list[Start]:
    """One-repeat starts in the A B B A order, A's and B's figures in turn."""
    queue = {"A": list(a), "B": list(b)}
    return [Start(arm_of(i), (queue[arm_of(i)].pop(0),), 1.0) for i in range(len(a) + len(b))]


def test_same_means_no_difference_as_large_as_the_effect():
    """SAME is equivalence at the effect asked for (the 90 % interval inside 1/(1+e)..1+e), not
    at half of it: a 5 % difference at a 6 % spread is SAME for a 20 % effect (its interval
    0.965..1.142 would be UNKNOWN against 1 +- 0.10), and UNKNOWN for a 10 % effect."""
    a = [100.0, 108.0, 92.0, 100.0]
    b = [105.0, 113.4, 96.6, 105.0]
    d = decide(_starts(a, b), Rules(effect=0.20))
    assert d.result == SAME and 1.1 < d.high < 1.2 and "0.833..1.200" in d.why
    assert decide(_starts(a, b), Rules(effect=0.10)).result == UNKNOWN
    # the band is symmetric in log space: B 5 % slower is SAME as B 5 % faster
    assert decide(_starts(b, a), Rules(effect=0.20)).result == SAME


def test_same_needs_three_starts_a_side():
    # two identical starts a side agree by chance: no SAME yet, whatever their spread says
    assert decide(_starts([100.0, 100.0], [100.0, 100.0]), Rules()).result == UNKNOWN
    assert decide(_starts([100.0] * 3, [100.0] * 3), Rules()).result == SAME
