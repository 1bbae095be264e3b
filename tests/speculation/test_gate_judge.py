"""The gates: PASS / FAIL / INCONCLUSIVE against the measured noise, the repeats that would
decide, the crossover and the schedule it proposes (rocmseat/speculation/gate/judge.py)."""

from __future__ import annotations

import random

from rocmseat import exitcodes
from rocmseat.speculation.gate.judge import (
    ArmFigures,
    GateConfig,
    Noise,
    Series,
    Verdict,
    crossover,
    hit_rate_gate,
    judge,
    kv_gate,
    proposed_schedule,
    ratio_gate,
)
from rocmseat.speculation.gate.report import exit_code


def s(*values: float) -> Series:
    return Series(tuple(values))


def arm(name="base", k=0, tput=None, cold=100.0, warm=(50.0, 52.0, 48.0), hits=(0.6, 0.61),
        kv=100_000, failed=0, hangs=(), watch_gaps=()) -> ArmFigures:
    tput = tput or {1: s(100, 101, 99), 16: s(1000, 1010, 990)}
    return ArmFigures(name=name, k=k, throughput=tput, itl_ms={}, tpot_ms={}, cold_ttft_ms=cold,
                      warm_ttft_ms=s(*warm), prefix_hit_rate=s(*hits), kv_tokens=kv,
                      max_concurrency=None, failed_requests=failed, hangs=tuple(hangs),
                      counters=None, watch_gaps=tuple(watch_gaps))


def test_clear_pass_and_fail():
    g = ratio_gate("aggregate@16", s(1000, 1005, 995), s(1100, 1105, 1098), 0.95,
                   higher_is_better=True, noise=Noise(0.02))
    assert g.verdict is Verdict.PASS and g.low > 0.95
    g = ratio_gate("aggregate@16", s(1000, 1005, 995), s(700, 705, 698), 0.95,
                   higher_is_better=True, noise=Noise(0.02))
    assert g.verdict is Verdict.FAIL and g.high < 0.95 and g.repeats_to_decide is None


def test_inside_the_noise_is_inconclusive_and_says_how_many_repeats():
    g = ratio_gate("aggregate@16", s(1000, 1100, 900), s(930, 1030, 850), 0.95,
                   higher_is_better=True, noise=Noise(0.02))
    assert g.verdict is Verdict.INCONCLUSIVE
    assert g.low < 0.95 < g.high
    assert g.repeats_to_decide is not None and g.repeats_to_decide > 3
    assert "0.95x" in g.detail


def test_more_repeats_narrow_the_band():
    few = ratio_gate("x", s(100, 110), s(90, 99), 0.95, higher_is_better=True, noise=Noise(0.02))
    more = ratio_gate("x", s(100, 110, 100, 110, 100, 110), s(90, 99, 90, 99, 90, 99), 0.95,
                      higher_is_better=True, noise=Noise(0.02))
    assert more.high - more.low < few.high - few.low


def test_noise_floor_applies_to_identical_repeats():
    g = ratio_gate("x", s(100, 100, 100), s(96, 96, 96), 0.95, higher_is_better=True,
                   noise=Noise(0.02))
    assert g.verdict is Verdict.INCONCLUSIVE  # two equal runs do not prove a zero spread
    g = ratio_gate("x", s(100, 100, 100), s(96, 96, 96), 0.95, higher_is_better=True,
                   noise=Noise(0.0))
    assert g.verdict is Verdict.PASS


def test_cold_ttft_lower_is_better_and_borrows_the_warm_spread():
    base, cand = arm(), arm("candidate", 3, cold=300.0)
    g = judge(base, cand, GateConfig())[1]
    assert g.gate == "cold_ttft" and g.verdict is Verdict.FAIL
    noisy = arm("candidate", 3, cold=140.0, warm=(20.0, 80.0, 50.0))
    assert judge(base, noisy, GateConfig())[1].verdict is Verdict.INCONCLUSIVE
    fast = arm("candidate", 3, cold=90.0)
    assert judge(base, fast, GateConfig())[1].verdict is Verdict.PASS


def test_hit_rate_gate():
    assert hit_rate_gate(s(0.56, 0.56), s(0.45, 0.45), 0.05, 0.005).verdict is Verdict.FAIL
    assert hit_rate_gate(s(0.56, 0.56), s(0.55, 0.555), 0.05, 0.005).verdict is Verdict.PASS
    g = hit_rate_gate(s(0.56, 0.50, 0.62), s(0.53, 0.47, 0.59), 0.05, 0.005)
    assert g.verdict is Verdict.INCONCLUSIVE and g.repeats_to_decide
    assert hit_rate_gate(s(), s(0.5), 0.05, 0.005).verdict is Verdict.UNKNOWN


def test_kv_gate_is_deterministic():
    # the field's seats lost 17.5 % and ~70 % of the pool: both below 0.85x
    assert kv_gate(299_008, 246_682, 0.85).verdict is Verdict.FAIL
    assert kv_gate(299_008, 89_702, 0.85).verdict is Verdict.FAIL
    assert kv_gate(299_008, 269_107, 0.85).verdict is Verdict.PASS  # -10 %
    assert kv_gate(None, 89_702, 0.85).verdict is Verdict.UNKNOWN


def test_failures_and_hangs_fail_the_candidate():
    gates = judge(arm(), arm("candidate", 3, failed=2, hangs=("replica_stalled",)), GateConfig())
    by = {g.gate: g for g in gates}
    assert by["failed_requests"].verdict is Verdict.FAIL
    assert by["hang"].verdict is Verdict.FAIL
    assert exit_code(gates) == exitcodes.PROBLEM


def test_exit_codes():
    faster = {1: s(150, 152, 149), 16: s(1300, 1310, 1290)}
    ok = judge(arm(), arm("candidate", 3, tput=faster), GateConfig())
    assert {g.verdict for g in ok} == {Verdict.PASS}
    assert exit_code(ok) == exitcodes.OK
    unknown = judge(arm(kv=None), arm("candidate", 3, tput=faster), GateConfig())
    assert exit_code(unknown) == exitcodes.CANNOT_CHECK


def test_aggregate_uses_the_highest_common_concurrency():
    base = arm(tput={1: s(100, 100), 4: s(300, 300), 16: s(1000, 1000)})
    cand = arm("candidate", 3, tput={1: s(160, 160), 4: s(320, 320)})
    assert judge(base, cand, GateConfig())[0].gate == "aggregate@4"


def test_a_a_runs_never_fail():
    """Two arms drawn from one distribution (5 % run-to-run noise, the field's figure): over a
    thousand seeded A/A comparisons no gate says FAIL."""
    rng = random.Random(2024)
    config = GateConfig()
    for _ in range(1000):
        def draw(mean: float, n: int = 3) -> Series:
            return s(*(rng.gauss(mean, 0.05 * mean) for _ in range(n)))

        a = arm(tput={1: draw(100), 16: draw(1000)}, cold=rng.gauss(100, 5),
                warm=tuple(rng.gauss(50, 2.5) for _ in range(5)),
                hits=tuple(rng.gauss(0.6, 0.01) for _ in range(3)))
        b = arm("candidate", tput={1: draw(100), 16: draw(1000)}, cold=rng.gauss(100, 5),
                warm=tuple(rng.gauss(50, 2.5) for _ in range(5)),
                hits=tuple(rng.gauss(0.6, 0.01) for _ in range(3)))
        assert all(g.verdict is not Verdict.FAIL for g in judge(a, b, config))


def test_crossover_and_schedule():
    base = arm(tput={1: s(30, 31), 2: s(60, 61), 4: s(110, 112), 8: s(220, 222)})
    cand = arm("candidate", 3, tput={1: s(45, 46), 2: s(80, 81), 4: s(100, 101),
                                     8: s(150, 152)})
    cx = crossover(base, cand, 0.02)
    assert (cx.concurrency, cx.last_winning) == (4, 2)
    assert 2 <= cx.threshold <= 3  # where the ratio crosses 1 between 2 and 4 (log scale)
    assert not cx.within_noise
    assert proposed_schedule(cx, 3, 16) == ((1, cx.threshold, 3), (cx.threshold + 1, 16, 0))
    assert proposed_schedule(cx, 3, 16, "draft_model") == proposed_schedule(cx, 3, 16)
    # the K=0 trap: a drafter that keeps hidden state keeps drafting one token above the cutoff
    for method in ("eagle", "eagle3", "dflash", "mtp", "qwen3_next_mtp"):
        assert proposed_schedule(cx, 3, 16, method) == (
            (1, cx.threshold, 3), (cx.threshold + 1, 16, 1))


def test_no_crossover_and_losing_everywhere():
    base = arm(tput={1: s(30, 31), 4: s(110, 112)})
    winner = arm("candidate", 3, tput={1: s(45, 46), 4: s(150, 151)})
    cx = crossover(base, winner, 0.02)
    assert cx.concurrency is None and proposed_schedule(cx, 3, 16) is None
    loser = arm("candidate", 3, tput={1: s(20, 21), 4: s(90, 91)})
    cx = crossover(base, loser, 0.02)
    assert cx.concurrency == 1 and cx.last_winning is None
    assert proposed_schedule(cx, 3, 16) is None


def test_on_the_threshold_no_number_of_repeats_decides():
    g = hit_rate_gate(s(0.56, 0.50, 0.62), s(0.51, 0.45, 0.57), 0.05, 0.005)
    assert g.verdict is Verdict.INCONCLUSIVE and g.repeats_to_decide is None


def test_repeats_to_decide_use_the_t_quantile_of_the_repeats():
    # cv 5 % per arm, ratio 0.90 vs threshold 0.95: z alone would say 3; Student t says more
    g = ratio_gate("x", s(100, 105, 95), s(90, 94.5, 85.5), 0.95, higher_is_better=True,
                   noise=Noise(0.02))
    n = g.repeats_to_decide
    assert g.verdict is Verdict.INCONCLUSIVE and n is not None
    from rocmseat.speculation.stats import t975
    spread = (2 * 0.05**2) ** 0.5
    distance = abs(__import__("math").log(g.value / 0.95))
    assert t975(2 * n - 2) * spread / n**0.5 < distance
    assert t975(2 * (n - 1) - 2) * spread / (n - 1) ** 0.5 >= distance


def test_drift_between_arms_is_not_shrunk_by_repeats():
    """Two identical arms measured minutes apart on a busy host differ by ~9 % with a tight
    spread inside each arm (an A/A run here: 397.8 vs 434.7 tok/s at 16): the drift term keeps that
    from reading as a FAIL, and no number of repeats within an arm decides it."""
    base = s(430.1, 438.2, 435.8)
    cand = s(390.0, 393.1, 392.3)
    tight = ratio_gate("aggregate@16", base, cand, 0.95, higher_is_better=True, noise=Noise(0.02))
    assert tight.verdict is Verdict.FAIL  # what the repeats alone would say
    g = ratio_gate("aggregate@16", base, cand, 0.95, higher_is_better=True,
                   noise=Noise(0.02, GateConfig().drift))
    assert g.verdict is Verdict.INCONCLUSIVE and g.repeats_to_decide is None
    clear = ratio_gate("aggregate@16", base, s(300, 305, 298), 0.95, higher_is_better=True,
                       noise=Noise(0.02, 0.05))
    assert clear.verdict is Verdict.FAIL  # a real 30 % loss is still a FAIL


def test_cold_ttft_says_gate_runs_not_repeats_would_decide():
    # one cold start per arm: --repeats never repeats it, only more gate runs do
    from rocmseat.speculation.gate.report import Comparison, gate_json, render_table

    base = arm()
    noisy = arm("candidate", 3, cold=120.0, warm=(20.0, 80.0, 50.0))
    gates = judge(base, noisy, GateConfig())
    cold = gates[1]
    assert cold.gate == "cold_ttft" and cold.verdict is Verdict.INCONCLUSIVE
    assert cold.repeats_to_decide is not None
    table = render_table([base, noisy], {}, comparisons=[Comparison(noisy, tuple(gates), None,
                                                                    None)],
                         proposal=None, proposal_note="", picture="-")
    (line,) = [x for x in table.splitlines() if " cold_ttft " in x]
    assert line.endswith(f"; {cold.repeats_to_decide} gate runs (cold starts) per arm would "
                         "decide")
    assert gate_json(cold)["repeats_to_decide_unit"] == "gate runs (cold starts) per arm"
    # a throughput gate still says repeats
    agg = ratio_gate("aggregate@16", s(1000, 1100, 900), s(930, 1030, 850), 0.95,
                     higher_is_better=True, noise=Noise(0.02))
    assert gate_json(agg)["repeats_to_decide_unit"] == "repeats per arm"


def test_a_watchdog_that_did_not_watch_is_no_pass():
    faster = {1: s(150, 152, 149), 16: s(1300, 1310, 1290)}
    gap = "decode-c16-r0: the watchdog exited 1: Traceback ..."
    gates = judge(arm(), arm("candidate", 3, tput=faster, watch_gaps=(gap, "prefix-c4-r0: x")),
                  GateConfig())
    hang = {g.gate: g for g in gates}["hang"]
    assert hang.verdict is Verdict.UNKNOWN
    assert hang.detail == f"not watched: {gap} (and 1 more)"
    assert exit_code(gates) == exitcodes.CANNOT_CHECK  # could not measure, never ship
    # a hang it did see still fails, whatever it missed elsewhere
    seen = judge(arm(), arm("candidate", 3, tput=faster, hangs=("replica_stalled",),
                            watch_gaps=(gap,)), GateConfig())
    assert {g.gate: g for g in seen}["hang"].verdict is Verdict.FAIL
