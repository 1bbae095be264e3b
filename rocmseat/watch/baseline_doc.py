"""The acceptance baseline as the watchdog reads it back (`rocmseat.watch-baseline/v1`,
rocmseat.watch.baseline): a strict model, so a damaged or forged file is one located line and
a re-learn, never an alarm judged against nonsense (docs/architecture.md, "State").

Bounds: a draft is at most 64 tokens (the seat's num_speculative_tokens), so at most 64
positions, each a share 0..1, and an acceptance length 1..65; counts fit a float exactly
(2**53); `learned_at_s` is wall-clock seconds (time.time) inside 2000..2200.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from rocmseat.docmodel import EpochSeconds, Line, StrictDoc

SCHEMA = "rocmseat.watch-baseline/v1"
MAX_POSITIONS = 64
MAX_COUNT = float(2**53)

Share = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]


class BaselineDoc(StrictDoc):
    schema_: Literal["rocmseat.watch-baseline/v1"] = Field(alias="schema")
    key: Annotated[Line, Field(min_length=1, max_length=4096)]
    source: Literal["pinned", "learned"]
    acceptance_length: Annotated[float, Field(ge=1.0, le=MAX_POSITIONS + 1.0,
                                              allow_inf_nan=False)]
    position_rates: Annotated[list[Share], Field(min_length=1, max_length=MAX_POSITIONS)]
    drafts: Annotated[float, Field(ge=0.0, le=MAX_COUNT, allow_inf_nan=False)]
    windows: Annotated[int, Field(ge=0, le=1 << 53)]
    learned_at_s: EpochSeconds | None = None
