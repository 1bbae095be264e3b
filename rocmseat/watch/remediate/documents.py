"""The remediation state (`state.json`, rocmseat.remediation-state/v1) and journal records
(`journal/*.json`, rocmseat.remediation/v1) as strict documents (docs/remediate.md).

Everything rocmseat reads back from its own remediation record goes through these models:
strict JSON (no coercion, no NaN or infinity), every number bounded (times inside
[`TIME_MIN_S`, `TIME_MAX_S`], amounts finite and at most `AMOUNT_MAX`), every name the
replica-name rule of the house (rocmseat.seat.model.is_replica_name), unknown keys refused. A
document that fails is one `DocumentError` naming the key; nothing downstream (a date
conversion, an `int()`) ever sees a value out of range (a halt stamped in year 10000 once
killed the watcher: `ValueError: year 10000 is out of range`).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from rocmseat.seat.model import is_replica_name, is_seat_name
from rocmseat.statedir import JOURNAL_RECORD, REMEDIATION_STATE, Document
from rocmseat.text import printable
from rocmseat.watch.remediate import policy as P
from rocmseat.watch.remediate.mode import Mode

SCHEMA = "rocmseat.remediation/v1"
STATE_SCHEMA = "rocmseat.remediation-state/v1"
# 2000-01-01 .. 2100-01-01 UTC: a clock outside this is a damaged document, not a time
TIME_MIN_S = 946_684_800.0
TIME_MAX_S = 4_102_444_800.0
AMOUNT_MAX = 1e15  # drafts, tokens, seconds: far above any real count, far below overflow
TEXT_MAX = 4096
LIST_MAX = 100_000
MAP_MAX = 4096
STATE_LIMIT_BYTES = 4 << 20
RECORD_LIMIT_BYTES = 1 << 20
FILE_MODE = 0o600  # the state and the records: this user's only, as their dirs (0700)


class DocumentError(P.StateError):
    """A remediation document rocmseat did not write (or that was damaged): one line naming
    the first bad key."""


def _replica(value: str) -> str:
    if not is_replica_name(value):
        raise ValueError(f"{printable(repr(value), 60)} is not a replica name")
    return value


def _seat(value: str) -> str:
    if not is_seat_name(value):
        raise ValueError(f"{printable(repr(value), 60)} is not a seat name")
    return value


def _scope(value: str) -> str:
    kind, _, rest = value.partition(":")
    ok = (value == P.FLEET or (kind == "replica" and is_replica_name(rest))
          or (kind == "node" and 0 < len(rest) <= 253 and rest.isprintable()
              and not any(c.isspace() for c in rest)))
    if not ok:
        raise ValueError(f"{printable(repr(value), 60)} is not a scope (replica:NAME, node:HOST, "
                         "fleet)")
    return value


def _stamp(value: str) -> str:
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{printable(repr(value), 60)} is not an ISO 8601 time") from None
    if when.tzinfo is None or not TIME_MIN_S <= when.timestamp() <= TIME_MAX_S:
        raise ValueError(f"{printable(repr(value), 60)} is not a UTC time between 2000 and 2100")
    return value


Time = Annotated[float, Field(ge=TIME_MIN_S, le=TIME_MAX_S, allow_inf_nan=False)]
Amount = Annotated[float, Field(ge=0.0, le=AMOUNT_MAX, allow_inf_nan=False)]
Ratio = Annotated[float, Field(ge=0.0, le=1e6, allow_inf_nan=False)]
Text = Annotated[str, Field(max_length=TEXT_MAX)]
Key = Annotated[str, Field(max_length=128)]
Replica = Annotated[str, AfterValidator(_replica)]
Scope = Annotated[str, AfterValidator(_scope)]
Stamp = Annotated[str, Field(max_length=64), AfterValidator(_stamp)]


def _in(allowed: tuple[Any, ...], what: str) -> AfterValidator:
    """A value of the ladder's table (policy.LADDER), not a literal spelled again here."""
    def check(value: Any) -> Any:
        if value not in allowed:
            raise ValueError(f"{printable(repr(value), 60)} is not {what} "
                             f"({', '.join(str(a) for a in allowed)})")
        return value
    return AfterValidator(check)


_NUMBERS = tuple(sorted({s.number for s in P.LADDER}))
Step = Annotated[int, _in(_NUMBERS, "a step of the ladder")]
# a step's action; the one of a pending step is one the edge runs (a step with effects)
LadderAction = Annotated[str, Field(max_length=64), _in(tuple(P.STEPS), "an action of the ladder")]
EdgeAction = Annotated[str, Field(max_length=64), _in(
    tuple(s.action for s in P.LADDER if s.effects), "an action the edge runs")]
RecordAction = Annotated[str, Field(max_length=64), _in(
    (*P.STEPS, P.RESET_ACTION, P.NO_ACTION), "an action of the journal")]


class _Doc(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class Why(_Doc):
    """Why a step ran (policy._why, the reasons added on the way)."""

    alert: Text | None = None
    acceptance_length: Ratio | None = None
    p0: Ratio | None = None
    key: Key | None = None
    last_start: Text | None = None
    step1: Text | None = None
    text: Text | None = None
    spawn_factor: Ratio | None = None


class Figures(_Doc):
    """A step's verification figures (policy._verify) or the reset's."""

    ready_after_s: Amount | None = None
    drafts: Amount | None = None
    acceptance_length: Ratio | None = None
    p0: Ratio | None = None
    lower_al: Ratio | None = None
    tokens_per_s: Amount | None = None
    collapsed_tokens_per_s: Amount | None = None
    restart_with_drafter: Text | None = None
    verified_by: Literal["canary", "traffic", "decode rate"] | None = None
    canary_rates: Annotated[str, Field(max_length=1024)] | None = None
    canary_baselines: Annotated[str, Field(max_length=1024)] | None = None
    spawn_factor: Ratio | None = None


class PendingDoc(_Doc):
    step: Step
    action: EdgeAction
    started_s: Time
    key: Key
    why: Why
    collapsed_tps: Amount | None
    seen_restart: bool
    restarted_s: Time | None
    drafts: Amount
    accepted: Amount
    accepted_pos0: Amount
    generation_tokens: Amount
    generation_s: Amount
    failed: Text | None


class LadderDoc(_Doc):
    mode: Mode
    since_s: Time | None
    pending: PendingDoc | None
    cache_tried_key: Key | None
    stalls_s: Annotated[tuple[Time, ...], Field(max_length=LIST_MAX)]
    noted: Text
    ladder_started_s: Time | None = None
    reset_problem: Text | None = None


class TakenDoc(_Doc):
    time_s: Time
    replica: Replica
    key: Key
    action: LadderAction
    ladder_start: bool


class HaltDoc(_Doc):
    scope: Scope
    bound: Text
    since_s: Time
    text: Text


class StateDoc(_Doc):
    schema_: Literal["rocmseat.remediation-state/v1"] = Field(alias="schema")
    seat: Annotated[str, AfterValidator(_seat)]
    seat_file: Text | None = None
    node: Annotated[str, Field(max_length=253)] | None = None
    mode: Literal["on", "dry-run"] | None = None
    written_at: Stamp | None = None
    ladders: Annotated[dict[Replica, LadderDoc], Field(max_length=MAP_MAX)]
    taken: Annotated[tuple[TakenDoc, ...], Field(max_length=LIST_MAX)]
    halts: Annotated[dict[Scope, HaltDoc], Field(max_length=MAP_MAX)]


class RecordDoc(_Doc):
    """One journal record (journal.record_json)."""

    schema_: Literal["rocmseat.remediation/v1"] = Field(alias="schema")
    seat: Annotated[str, AfterValidator(_seat)]
    node: Annotated[str, Field(max_length=253)] | None
    replica: Replica | Literal["*"]
    step: Step | None
    action: RecordAction
    when: Stamp
    why: Why
    figures: Figures
    outcome: Text
    diagnosis: Text | None
    dry_run: bool


def first_error(exc: ValidationError) -> str:
    """`key 'ladders.r0.since_s': <why>`: the first problem, on one line."""
    error = exc.errors(include_url=False, include_input=False)[0]
    if error["type"] in ("json_invalid", "json_type") or not error["loc"]:
        return printable(error["msg"] if error["type"] == "json_invalid"
                         else "not a JSON object", 200)
    key = ".".join(str(p) for p in error["loc"] if not str(p).startswith(("function-",
                                                                           "literal[")))
    why = printable(error["msg"].removeprefix("Value error, "), 200)
    return f"key {printable(key, 120)!r}: {why}"


def parse_state_doc(text: str | bytes) -> StateDoc:
    try:
        doc = StateDoc.model_validate_json(text)
    except ValidationError as exc:
        raise DocumentError(first_error(exc)) from None
    for scope, halt in doc.halts.items():
        if halt.scope != scope:
            raise DocumentError(f"key 'halts.{scope}.scope': {printable(halt.scope, 60)!r} is "
                                "not its own scope")
    return doc


def parse_record(text: str | bytes) -> RecordDoc:
    try:
        return RecordDoc.model_validate_json(text)
    except ValidationError as exc:
        raise DocumentError(first_error(exc)) from None


def _parse_state_file(text: str, shown: str) -> StateDoc:
    return parse_state_doc(text)  # DocumentError: load_state names the file


def _parse_record_file(text: str, shown: str) -> RecordDoc:
    return parse_record(text)  # DocumentError: read_records names the file


# the two documents of remediation, through the state dir's door (rocmseat.statedir); a
# journal record's `entry` is its file name (journal.write_record)
STATE_DOC = Document(REMEDIATION_STATE, STATE_SCHEMA, _parse_state_file,
                     limit_bytes=STATE_LIMIT_BYTES, mode=FILE_MODE)
RECORD_DOC = Document(JOURNAL_RECORD, SCHEMA, _parse_record_file,
                      limit_bytes=RECORD_LIMIT_BYTES, mode=FILE_MODE)


def _plain(model: BaseModel | None) -> dict[str, Any]:
    return {} if model is None else model.model_dump(exclude_none=True)


def state_of(doc: StateDoc) -> P.State:
    """The policy's State from a checked document (each model's fields are its dataclass's)."""
    ladders = {}
    for name, lad in doc.ladders.items():
        p = lad.pending
        pending = None if p is None else P.Pending(**{**dict(p), "why": _plain(p.why)})
        ladders[name] = P.Ladder(**{**dict(lad), "pending": pending})
    return P.State(ladders, tuple(P.Taken(**dict(t)) for t in doc.taken),
                   {k: P.Halt(**dict(h)) for k, h in doc.halts.items()})
