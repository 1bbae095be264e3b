"""The bracketed gate (--aba): the base arm before and after the candidate, the drift between
them measured and used (rocmseat/speculation/gate/bracket.py)."""

from __future__ import annotations

import math

import pytest

from rocmseat.speculation.gate.bracket import bracketed_config, measured_drift, pooled_base
from rocmseat.speculation.gate.judge import GateConfig, Verdict, judge
from tests.speculation.test_gate_judge import arm, s


def test_the_drift_of_an_a_a_run_on_a_busy_host():
    # the third A/A run on the shared 2-core host: the same seat, 455.3 then 558.4 tok/s at 16
    first = arm(tput={1: s(36.3, 33.0, 39.6), 16: s(455.3, 447.4, 463.2)})
    second = arm("base-2", tput={1: s(43.2, 39.6, 46.8), 16: s(558.4, 546.3, 570.5)})
    drift = measured_drift(first, second)
    assert drift == pytest.approx(max(math.log(43.2 / 36.3), math.log(558.4 / 455.3)))
    assert bracketed_config(GateConfig(), drift).drift == drift
    assert bracketed_config(GateConfig(), 0.01).drift == GateConfig().drift
    assert bracketed_config(GateConfig(), None) == GateConfig()


def test_pooled_base_sits_on_both_sides_of_the_candidate():
    first = arm(tput={16: s(450, 455, 460)}, cold=100.0, warm=(50.0, 52.0),
                hits=(0.375,), failed=0)
    second = arm("base-2", tput={16: s(550, 555, 560)}, cold=400.0, warm=(40.0,),
                 hits=(0.375,), failed=1, hangs=("replica_stalled",))
    pooled = pooled_base(first, second)
    assert pooled.name == "base" and pooled.throughput[16].n == 6
    assert pooled.throughput[16].mean == pytest.approx(505.0)
    assert pooled.cold_ttft_ms == pytest.approx(200.0)  # geometric mean of the two starts
    assert pooled.warm_ttft_ms.n == 3 and pooled.failed_requests == 1
    assert pooled.hangs == ("replica_stalled",)


def test_a_candidate_between_two_drifting_bases_is_not_failed():
    # the candidate ran while the host got quieter: the candidate at 505 between 455 and 558
    first = arm(tput={16: s(455, 450, 460)})
    second = arm("base-2", tput={16: s(558, 552, 564)})
    cand = arm("candidate", 3, tput={16: s(470, 468, 472)})
    naive = judge(first, cand, GateConfig())[0]
    assert naive.value == pytest.approx(470 / 455)  # against the first base alone: +3 %
    pooled = judge(pooled_base(first, second), cand,
                   bracketed_config(GateConfig(), measured_drift(first, second)))[0]
    assert pooled.value == pytest.approx(470 / 506.5, rel=1e-3)  # -7 % against both bases
    assert pooled.verdict is Verdict.INCONCLUSIVE and pooled.repeats_to_decide is None
    assert pooled.high - pooled.low > 2 * (naive.high - naive.low)  # the measured 20 % drift
