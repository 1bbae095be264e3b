"""`<replica state dir>/preflight-sysfs.json` (`rocmseat.preflight-sysfs/v1`) as a strict model:
the sysfs findings ExecStartPre= left for ExecStart= of the same start (rocmseat.launch.gate).
A finding read back here can let a start through, so a damaged or forged file is one located
line and the checks run again, never a KeyError or a finding of a severity nobody writes.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from rocmseat.docmodel import JsonTree, Line, StrictDoc
from rocmseat.findings import Finding, Severity

SYSFS_SCHEMA = "rocmseat.preflight-sysfs/v1"
MAX_FINDINGS = 10_000  # one pair's findings: tens
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


class SysfsResultDoc(StrictDoc):
    schema_: Literal["rocmseat.preflight-sysfs/v1"] = Field(alias="schema")
    invocation_id: Annotated[Line, Field(min_length=1, max_length=128)]
    pair: Annotated[list[Annotated[Line, Field(max_length=64)]], Field(min_length=2,
                                                                         max_length=2)]
    findings: Annotated[list[FindingDoc], Field(max_length=MAX_FINDINGS)]
