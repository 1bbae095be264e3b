"""Findings: what every check returns, and how a list of them maps to an exit code."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rocmseat import exitcodes


class Severity(enum.StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"  # the check could not run; never a silent pass


SEVERITY_ORDER = {Severity.OK: 0, Severity.WARN: 1, Severity.UNKNOWN: 2, Severity.FAIL: 3}


@dataclass(frozen=True, slots=True)
class Finding:
    """One judgement. check_id is a stable string such as `pcie.link.degraded`."""

    check_id: str
    severity: Severity
    subject: str  # a PCI address, a pair "A+B", a replica name, a file
    message: str
    hint: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def family(self) -> str:
        return self.check_id.split(".", 1)[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "check_id": self.check_id,
            "severity": self.severity.value,
            "subject": self.subject,
            "message": self.message,
            "hint": self.hint,
            "data": dict(self.data),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Finding:
        """The inverse of `to_json` (KeyError/ValueError on a document that is not one)."""
        return cls(doc["check_id"], Severity(doc["severity"]), doc["subject"], doc["message"],
                   doc.get("hint", ""), dict(doc.get("data", {})))


@dataclass(frozen=True, slots=True)
class Subject:
    """The common fields of one subject's findings, written once: a judge says
    `gpu = Subject(address)` then `gpu.fail("aer.fatal", message, hint)` instead of spelling a
    whole `Finding(...)` each time."""

    subject: str

    def finding(self, check_id: str, severity: Severity, message: str, hint: str = "",
                data: Mapping[str, Any] | None = None) -> Finding:
        return Finding(check_id, severity, self.subject, message, hint,
                       data if data is not None else {})

    def ok(self, check_id: str, message: str, hint: str = "",
           data: Mapping[str, Any] | None = None) -> Finding:
        return self.finding(check_id, Severity.OK, message, hint, data)

    def warn(self, check_id: str, message: str, hint: str = "",
             data: Mapping[str, Any] | None = None) -> Finding:
        return self.finding(check_id, Severity.WARN, message, hint, data)

    def fail(self, check_id: str, message: str, hint: str = "",
             data: Mapping[str, Any] | None = None) -> Finding:
        return self.finding(check_id, Severity.FAIL, message, hint, data)

    def unknown(self, check_id: str, message: str, hint: str = "",
                data: Mapping[str, Any] | None = None) -> Finding:
        return self.finding(check_id, Severity.UNKNOWN, message, hint, data)


NODE = Subject("node")  # findings about the node as a whole


def worst(findings: Iterable[Finding]) -> Severity:
    return max((f.severity for f in findings), key=SEVERITY_ORDER.__getitem__, default=Severity.OK)


def exit_code_for(findings: Iterable[Finding], *, strict: bool = False) -> int:
    """0 all ok; 1 a failing finding (or a warning with strict); 2 an unknown and no failure.

    A failure outranks an unknown: the node has a known problem whatever else could not be checked.
    """
    severities = {f.severity for f in findings}
    if Severity.FAIL in severities:
        return exitcodes.PROBLEM
    if Severity.UNKNOWN in severities:
        return exitcodes.CANNOT_CHECK
    if strict and Severity.WARN in severities:
        return exitcodes.PROBLEM
    return exitcodes.OK
