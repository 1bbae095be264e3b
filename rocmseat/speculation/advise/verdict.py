"""One answer from `spec gate` and `spec advise` on the same gate directory (pure).

The gate measures arms and judges each against the base (ship / do not ship / could not decide);
its crossover proposes a schedule from the one K it measured. The advisor proposes a K per batch
size from the model of every K, keeping the seat's K where the gain is not measurable
(rocmseat.speculation.advise.ties). Both print the answer built here, so they cannot disagree
silently:

- the advisor's proposal is a configuration an arm ran: the gate's verdict on that arm is the
  answer (a "do not ship" is never turned into a proposal to ship);
- no arm ran it: the answer is "measure it first", with the gate's verdict on what did run;
- the gate's crossover proposal differs from the advisor's: the answer says why (the gate's
  schedule ran as the third arm and failed; K=0 tiers measured slow; ties keep the seat's K; or
  the crossover of one measured K against the model of every K).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rocmseat.speculation.advise.basis import Decision
from rocmseat.speculation.advise.schedule import Schedule, as_lists

SHIP, DO_NOT_SHIP, UNDECIDED = "ship", "do not ship", "could not decide"
MEASURE_FIRST = "measure it first"

Config = tuple[int, Schedule | None] | None  # (num_speculative_tokens, schedule); None: no drafter


@dataclass(frozen=True, slots=True)
class ArmVerdict:
    """One gate arm judged against the base."""

    name: str
    config: Config
    verdict: str  # ship | do not ship | could not decide
    why: tuple[str, ...]  # the gates that failed or could not decide, as the gate words them


@dataclass(frozen=True, slots=True)
class GateView:
    arms: tuple[ArmVerdict, ...]  # the judged arms, candidate first
    proposed: Config  # the gate's crossover proposal (None: do not speculate)
    proposed_ran: str | None  # the arm that ran the gate's proposal, if one did


@dataclass(frozen=True, slots=True)
class OneAnswer:
    answer: str  # ship | do not ship | could not decide | measure it first
    config: Config  # what the answer is about: the advisor's proposal
    text: str  # one sentence
    agrees: bool  # the gate's proposal is the advisor's
    why_differ: str  # '' when they agree
    gates: tuple[str, ...] = ()  # the gates that did not pass on the arm that ran it (short)

    @property
    def headline(self) -> str:
        """One short line for a picture's title."""
        failed = f" ({', '.join(self.gates)})" if self.gates else ""
        return f"gate and advisor: {self.answer.upper()}: {describe(self.config)}{failed}"

    def json(self) -> dict[str, Any]:
        return {"answer": self.answer, "config": config_json(self.config), "text": self.text,
                "gate_and_advisor_agree": self.agrees, "why_they_differ": self.why_differ or None}

    def lines(self) -> list[str]:
        out = [f"one answer (gate and advisor): {self.answer.upper()}: {self.text}"]
        if self.why_differ:
            out.append(f"  the gate's crossover proposal is not the advisor's: {self.why_differ}")
        return out


def config_json(config: Config) -> dict[str, Any] | None:
    if config is None:
        return None
    k, schedule = config
    return {"num_speculative_tokens": k,
            "num_speculative_tokens_per_batch_size": as_lists(schedule) if schedule else None}


def describe(config: Config) -> str:
    if config is None:
        return "no drafter"
    k, schedule = config
    return f"K={k}" + (f" with the schedule {as_lists(schedule)}" if schedule else "")


def _same(a: Config, b: Config) -> bool:
    if a is None or b is None:
        return a is b
    return a[0] == b[0] and tuple(map(tuple, a[1] or ())) == tuple(map(tuple, b[1] or ()))


def _why_differ(view: GateView, decision: Decision, proposal: Config) -> str:
    reasons = []
    ran = next((a for a in view.arms if a.name == view.proposed_ran), None)
    if ran is not None and ran.verdict != SHIP:
        reasons.append(f"the gate's proposal {describe(view.proposed)} ran as the arm "
                       f"'{ran.name}' and the gate says {ran.verdict} for it")
    if not decision.k0_allowed:
        reasons.append("K=0 tiers with the drafter loaded were measured slow or are a trap for "
                       "this drafter, so the advisor proposes none")
    tied = [f"{t.start}-{t.end}" for t in decision.tiers if t.tie]
    if tied:
        reasons.append(f"the advisor finds no measurable gain at batch {', '.join(tied)} and "
                       "keeps the seat's K there")
    if not reasons:
        reasons.append(f"the gate's proposal is the crossover of the one K it measured "
                       f"(speculate where it held); the advisor's {describe(proposal)} is the "
                       "best K per batch size from the model of every K")
    return "; ".join(reasons)


def one_answer(view: GateView, decision: Decision) -> OneAnswer:
    advice = decision.advice
    proposal: Config = (None if advice.num_speculative_tokens is None
                        else (advice.num_speculative_tokens, advice.schedule))
    agrees = _same(view.proposed, proposal)
    why = "" if agrees else _why_differ(view, decision, proposal)
    ran = next((a for a in view.arms if _same(a.config, proposal)), None)
    if ran is not None:
        because = f": {'; '.join(ran.why)}" if ran.why else ""
        if ran.verdict == SHIP:
            text = (f"{describe(proposal)}: the gate measured it (arm '{ran.name}': ship) and it "
                    "is the advisor's proposal")
        else:
            text = (f"{describe(proposal)}: the gate measured it (arm '{ran.name}': "
                    f"{ran.verdict}{because}); the advisor proposes no other draft length with a "
                    "measurable gain")
        return OneAnswer(ran.verdict, proposal, text, agrees, why,
                         tuple(w.split(":")[0] for w in ran.why))
    judged = "; ".join(f"'{a.name}' ({describe(a.config)}): {a.verdict}" for a in view.arms)
    if proposal is None:
        text = ("the advisor finds that no draft length pays at any batch size; removing the "
                f"drafter is a decision the gate has not measured (the gate: {judged})")
        return OneAnswer(MEASURE_FIRST, proposal, text, agrees, why)
    text = (f"the advisor proposes {describe(proposal)}, which no arm ran; gate it before it "
            f"serves (next:). What ran: {judged}")
    return OneAnswer(MEASURE_FIRST, proposal, text, agrees, why)


def without_advice(view: GateView, why: str) -> OneAnswer:
    """The gate's verdict alone, when the advisor cannot speak (no counters, an A/A run)."""
    cand = view.arms[0]
    return OneAnswer(cand.verdict, cand.config,
                     f"{describe(cand.config)}: the gate's verdict on '{cand.name}' (the advisor "
                     f"cannot advise: {why})", True, "")


def view_json(view: GateView) -> dict[str, Any]:
    return {"arms": [{"name": a.name, "config": config_json(a.config), "verdict": a.verdict,
                      "why": list(a.why)} for a in view.arms],
            "proposed": config_json(view.proposed), "proposed_ran_as": view.proposed_ran}


def arms_of(entries: Sequence[tuple[str, int, Schedule | None, str, Sequence[str]]]
            ) -> tuple[ArmVerdict, ...]:
    """(name, K, schedule, verdict, why) per judged arm -> ArmVerdicts."""
    return tuple(ArmVerdict(name, (k, schedule) if k > 0 else None, verdict, tuple(why))
                 for name, k, schedule, verdict, why in entries)
