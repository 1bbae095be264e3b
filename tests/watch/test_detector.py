"""The acceptance detector on hand-made windows and on simulated traces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.sim import DAY_S, Fault, factor_for_mixed_al, simulate
from rocmseat.watch.baseline import pinned_baseline
from rocmseat.watch.detector import DetectorParams, SpecDetector
from rocmseat.watch.window import Window


def window(drafts, per_pos, k=None, duration_s=10.0):
    k = k if k is not None else len(per_pos)
    return Window(duration_s, float(drafts), float(drafts * k), float(sum(per_pos)),
                  tuple(float(c) for c in per_pos), None, None, None, None, None, 1.0, 0.0,
                  None, True)


def healthy(drafts, alpha=0.715, k=7):
    return window(drafts, [round(drafts * alpha ** (i + 1)) for i in range(k)])


def collapsed(drafts, k=7):
    return window(drafts, [round(drafts * 0.07)] + [0] * (k - 1))


def detector(al=3.3):
    return SpecDetector(params=DetectorParams(), pinned_al=al)


def test_collapse_with_five_drafts_per_second_fires_in_the_first_window():
    d = detector()
    assert not d.observe(healthy(50), 10).drop
    v = d.observe(collapsed(50), 20)
    assert v.drop and v.dead


@pytest.mark.parametrize("drafts", [1, 10, 30, 49])
def test_few_drafts_never_alarm(drafts):
    d = detector()
    v = d.observe(window(drafts, [0] * 7), 10)
    assert not v.evaluated and not v.drop and not v.dead


def test_quiet_windows_pool_until_the_gate_then_judge():
    d = detector()
    for t in range(4):
        assert not d.observe(window(12, [0] * 7), t * 10).evaluated
    v = d.observe(window(12, [0] * 7), 50)  # 60 drafts pooled
    assert v.evaluated and v.drop and v.dead


def test_a_smaller_k_from_the_schedule_is_not_a_fault():
    d = detector()
    alpha = pinned_baseline(3.3, 7, "").position_rates[0]
    # K cut to 3 for every draft: AL falls to 1 + a + a^2 + a^3 = 2.59 with the same drafter.
    for t in range(30):
        v = d.observe(window(200, [round(200 * alpha ** (i + 1)) for i in range(3)] + [0] * 4,
                             k=3), t * 10)
        assert not v.drop
    assert v.expected_al == pytest.approx(1 + sum(alpha ** i for i in range(1, 4)), rel=1e-3)


def test_pure_prose_hour_does_not_alarm():
    d = detector()
    prose_alpha = 0.62  # AL 2.55 at K=7
    for t in range(360):
        assert not d.observe(healthy(120, prose_alpha), t * 10).drop


def test_drop_to_al_two_alarms_and_resolves_after_recovery():
    d = detector()
    half = 0.5  # AL 1.99 at K=7
    fired_at = next(t for t in range(200) if d.observe(healthy(200, half), t * 10).drop)
    assert fired_at < 20
    v = None
    for t in range(200, 260):
        v = d.observe(healthy(200), t * 10)
    assert v is not None and not v.drop and v.cusum == 0.0


def test_drafter_dead_needs_enough_drafts_and_resolves():
    d = detector(al=None)  # no baseline needed for the signature
    d.pinned_al = None
    assert not d.observe(window(20, [0] * 3), 0).dead
    assert d.observe(window(40, [1, 0, 0]), 10).dead  # 60 drafts, p0 = 1/60
    assert not d.observe(window(60, [40, 30, 20]), 20).dead


def test_learning_skips_dead_windows_and_learns_the_profile():
    params = DetectorParams(learn_min_drafts=1000, learn_min_s=60)
    d = SpecDetector(params=params)
    for t in range(3):
        v = d.observe(collapsed(100, k=3), t * 10)
        assert v.learning and v.learned is None
    learned = None
    for t in range(3, 20):
        v = d.observe(healthy(100, 0.8, k=3), t * 10)
        learned = learned or v.learned
    assert learned is not None and learned.source == "learned"
    assert learned.acceptance_length == pytest.approx(1 + 0.8 + 0.64 + 0.512, abs=0.01)


def test_pinned_profile_reproduces_the_pinned_length():
    b = pinned_baseline(3.3, 7, "k")
    assert b.acceptance_length_at(7) == pytest.approx(3.3, abs=1e-6)
    assert b.acceptance_length_at(3) < 3.3


def _fires(fault, seed, hours):
    d = detector()
    out = []
    prev = False
    for sw in simulate(seed=seed, fault=fault, duration_s=hours * 3600):
        if sw.window is None:
            continue
        v = d.observe(sw.window, sw.time_s)
        if (v.drop or v.dead) and not prev:
            out.append(sw.time_s)
        prev = v.drop or v.dead
    return out


@pytest.mark.parametrize("seed", [11, 12])
def test_simulated_healthy_day_with_mix_shifts_has_no_alarm(seed):
    assert _fires(None, seed, 24) == []


def test_simulated_collapse_fires_within_two_intervals():
    start = 10 * 3600 + 3.0
    fires = _fires(Fault(start, factor_for_mixed_al(1.08)), 5, 11)
    assert fires and fires[0] > start and fires[0] - start <= 20.0


def test_sim_day_is_24h_of_ten_second_windows():
    assert sum(1 for _ in simulate(seed=1, duration_s=DAY_S)) == 8640


def test_learning_accepts_windows_just_below_full_k_but_not_scheduled_ones():
    params = DetectorParams(learn_min_drafts=300, learn_min_s=20)
    d = SpecDetector(params=params)
    for t in range(5):  # K cut to 1 by a schedule: no profile to learn at full K
        assert d.observe(window(100, [80, 0, 0], k=1), t * 10).learned is None
    learned = None
    for t in range(5, 12):
        w = healthy(100, 0.8, k=3)
        w = Window(w.duration_s, w.drafts, w.draft_tokens - 2, w.accepted_tokens,
                   w.accepted_per_pos, None, None, None, None, None, 1.0, 0.0, None, True)
        learned = learned or d.observe(w, t * 10).learned
    assert learned is not None and learned.num_positions == 3


@pytest.mark.parametrize(("sizes", "fires"), [
    ([49], False), ([50], True),  # one window at the gate
    ([7] * 7, False), ([7] * 8, True),  # quiet windows pooled: 49 never judged, 56 judged
])
def test_the_gate_is_exactly_min_drafts(sizes, fires):
    d = detector()
    verdicts = [d.observe(window(n, [0] * 7), t * 10) for t, n in enumerate(sizes)]
    assert not any(v.drop or v.dead for v in verdicts[:-1])
    last = verdicts[-1]
    assert (last.evaluated, last.drop, last.dead) == (fires, fires, fires)


def scheduled_window(drafts, alpha, shares):
    """`shares[k]` of the drafts carry k tokens; each follows the prefix rule at `alpha`."""
    per_pos, tokens = [0.0] * 7, 0.0
    for k, share in shares.items():
        n = drafts * share
        tokens += n * k
        for i in range(k):
            per_pos[i] += n * alpha ** (i + 1)
    return Window(10.0, float(drafts), tokens, sum(per_pos), tuple(per_pos), None, None, None,
                  None, None, 1.0, 0.0, None, True)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(1, 7), st.floats(0.05, 1.0), min_size=1, max_size=4),
       st.floats(0.3, 0.95))
def test_the_lower_edge_never_exceeds_rho_times_what_the_schedule_gives(raw, alpha):
    total = sum(raw.values())
    shares = {k: v / total for k, v in raw.items()}
    w = scheduled_window(1000, alpha, shares)
    b = pinned_baseline(3.3, 7, "")
    d = SpecDetector(params=DetectorParams(), baseline=b)
    v = d.observe(w, 0.0)
    # What the baseline drafter itself would accept with exactly this mix of draft lengths:
    truth = sum(s * sum(b.position_rates[:k]) for k, s in shares.items())
    assert v.lower_al is not None
    assert v.lower_al - 1.0 <= DetectorParams().rho * truth + 1e-9


def test_a_drafter_fine_at_k7_and_at_k1_is_fine_in_a_mix_of_both():
    alpha = 0.58  # accepted/draft 0.59 of the baseline's at K=7, 0.81 at K=1: in control
    for shares in ({7: 1.0}, {1: 1.0}, {7: 0.5, 1: 0.5}, {7: 0.3, 1: 0.7}):
        d = detector()
        for t in range(60):
            v = d.observe(scheduled_window(2000, alpha, shares), t * 10)
            assert not v.drop and not v.dead, (shares, t, v.cusum)


def test_the_simulated_day_has_bursts_idle_windows_restarts_and_a_k_schedule():
    day = list(simulate(seed=3))
    windows = [sw.window for sw in day if sw.window is not None]
    rates = [w.drafts / w.duration_s for w in windows]
    assert sum(1 for sw in day if sw.window is None) == 2  # two restarts
    assert sum(1 for w in windows if w.drafts == 0) > 100  # idle windows at night
    assert max(rates) > 60  # bursts above the day's ~25 drafts/s
    scheduled = [w for w in windows if w.effective_k is not None and w.effective_k < 6.5]
    assert len(scheduled) > 100  # the K=7 -> K=3 schedule under load
    prose_23h = [sw.true_al for sw in day if 23 * 3600 < sw.time_s < DAY_S]
    assert prose_23h and all(al == pytest.approx(2.55, abs=1e-6) for al in prose_23h)
