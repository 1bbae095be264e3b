"""A Finding as the documents that carry findings write it (Finding.to_json): the sysfs
preflight's saved result, the startup report. A strict model: a finding read back can let a
start through or be shown on a terminal, so its identifiers and words carry no control
character, its severity is one of the four, its data is bounded JSON.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from rocmseat.docmodel import JsonTree, Line, StrictDoc
from rocmseat.findings import Finding, Severity

MAX_TEXT = 4096


class FindingDoc(StrictDoc):
    """One Finding as Finding.to_json writes it."""

    check_id: Annotated[Line, Field(min_length=1, max_length=200)]
    severity: Literal["ok", "warn", "fail", "unknown"]
    subject: Annotated[Line, Field(max_length=MAX_TEXT)]
    message: Annotated[Line, Field(max_length=MAX_TEXT)]
    hint: Annotated[Line, Field(max_length=MAX_TEXT)] = ""
    data: dict[Annotated[str, Field(max_length=200)], JsonTree] = Field(default_factory=dict)

    def finding(self) -> Finding:
        return Finding(self.check_id, Severity(self.severity), self.subject, self.message,
                       self.hint, dict(self.data))
