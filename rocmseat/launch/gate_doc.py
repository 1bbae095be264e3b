"""`<replica state dir>/preflight-sysfs.json` (`rocmseat.preflight-sysfs/v1`) as a strict model:
the sysfs findings ExecStartPre= left for ExecStart= of the same start (rocmseat.launch.gate).
A finding read back here can let a start through, so a damaged or forged file is one located
line and the checks run again, never a KeyError or a finding of a severity nobody writes.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from rocmseat.docmodel import Line, StrictDoc
from rocmseat.findings_doc import FindingDoc

SYSFS_SCHEMA = "rocmseat.preflight-sysfs/v1"
MAX_FINDINGS = 10_000  # one pair's findings: tens
# dddd:bb:dd.f as rocmseat.sysfs.parse.normalize_pci_address writes it
PciAddress = Annotated[str, StringConstraints(
    pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")]


class SysfsResultDoc(StrictDoc):
    schema_: Literal["rocmseat.preflight-sysfs/v1"] = Field(alias="schema")
    invocation_id: Annotated[Line, Field(min_length=1, max_length=128)]
    pair: Annotated[list[PciAddress], Field(min_length=2, max_length=64)]  # the replica's GPUs
    findings: Annotated[list[FindingDoc], Field(max_length=MAX_FINDINGS)]
