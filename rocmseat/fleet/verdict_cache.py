"""The node's last full preflight verdict, cached in the state dir for fast readers.

node-problem-detector gives a custom plugin 5 s by default and Slurm's HealthCheckProgram 60 s
(docs/fleet.md); a full preflight with the HIP probe can take longer. So every full run of
`rocmseat preflight` (all default families, every GPU) writes its verdict here atomically, and
the fast readers (`preflight --format npd --cached`, `slurm health`) answer from it when it is
recent enough. A partial run (`--only`, `--pair`) never writes it: it would say "fine" for checks
it did not run.

`<state dir>/preflight/verdict.json`, schema `rocmseat.verdict/v1`. The file is input like any
other (docs/architecture.md, "Hostile input"): read as a regular file with a size cap, every field
type-checked, strings limited to printable text; anything else is an unusable verdict, which the
readers turn into "unknown", never "ok".
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.atomic import atomic_write_json
from rocmseat.errors import ReadError
from rocmseat.findings import Finding, Severity, exit_code_for
from rocmseat.safeio import read_regular_text

SCHEMA = "rocmseat.verdict/v1"
LIMIT_BYTES = 4 << 20  # 16 GPUs give ~60 KiB; a larger file is not one rocmseat wrote
MAX_FUTURE_S = 300.0  # a verdict from the future (clock stepped back) is not trusted
_CHECK_ID_RE = re.compile(r"^[a-z0-9_]+(?:\.[a-z0-9_]+){0,5}$")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_MAX_TEXT = 1000


@dataclass(frozen=True, slots=True)
class CachedFinding:
    check_id: str
    severity: Severity
    subject: str
    message: str

    @property
    def family(self) -> str:
        return self.check_id.split(".", 1)[0]


@dataclass(frozen=True, slots=True)
class Verdict:
    written_at_unix_s: float
    sysfs_root: str
    families: tuple[str, ...]  # the check families the run had
    gpus: int
    findings: tuple[CachedFinding, ...]
    profile: str | None = None

    def age_s(self, now_unix_s: float) -> float:
        return now_unix_s - self.written_at_unix_s

    def exit_code(self, *, strict: bool = False) -> int:
        return exit_code_for(_as_findings(self.findings), strict=strict)


def _as_findings(findings: Iterable[CachedFinding]) -> list[Finding]:
    return [Finding(f.check_id, f.severity, f.subject, f.message) for f in findings]


def verdict_path(state_dir: Path) -> Path:
    return state_dir / "preflight" / "verdict.json"


def root_key(sysfs_root: Path) -> str:
    try:
        return str(sysfs_root.resolve())
    except (OSError, RuntimeError):
        return str(sysfs_root)


def make_verdict(
    findings: Iterable[Finding],
    *,
    sysfs_root: Path,
    families: Collection[str],
    gpus: int,
    now_unix_s: float,
    profile: str | None = None,
) -> Verdict:
    return Verdict(
        written_at_unix_s=now_unix_s,
        sysfs_root=root_key(sysfs_root),
        families=tuple(sorted(families)),
        gpus=gpus,
        findings=tuple(
            CachedFinding(f.check_id, f.severity, _clean(f.subject), _clean(f.message))
            for f in findings
        ),
        profile=profile,
    )


def _clean(text: str) -> str:
    """One printable line (messages quote sysfs text, which may hold anything)."""
    return _CONTROL_RE.sub("?", text)[:_MAX_TEXT]


def to_json(verdict: Verdict) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "written_at_unix_s": verdict.written_at_unix_s,
        "sysfs_root": verdict.sysfs_root,
        "families": list(verdict.families),
        "gpus": verdict.gpus,
        "profile": verdict.profile,
        "exit_code": verdict.exit_code(),
        "findings": [
            {
                "check_id": f.check_id,
                "severity": f.severity.value,
                "subject": f.subject,
                "message": f.message,
            }
            for f in verdict.findings
        ],
    }


def save_verdict(state_dir: Path, verdict: Verdict) -> str | None:
    """Write the verdict atomically; a one-line problem, or None."""
    path = verdict_path(state_dir)
    try:
        atomic_write_json(path, to_json(verdict))
    except OSError as exc:
        return f"{path}: cannot save the preflight verdict ({exc.strerror or exc})"
    return None


class UnusableVerdict(ValueError):
    """The cached verdict is missing, foreign, torn, stale or from another sysfs root."""


def load_verdict(
    state_dir: Path, sysfs_root: Path, *, max_age_s: float, now_unix_s: float
) -> Verdict:
    """The cached verdict, if it is rocmseat's, for this root, and at most `max_age_s` old.

    Raises UnusableVerdict with a short reason (it ends up in an 80-byte NPD line).
    """
    path = verdict_path(state_dir)
    try:
        text = read_regular_text(path, limit_bytes=LIMIT_BYTES)
    except ReadError as exc:
        if not path.exists() and not path.is_symlink():
            raise UnusableVerdict("no cached verdict (run a full rocmseat preflight)") from None
        raise UnusableVerdict(f"cached verdict unreadable: {exc.cause}") from None
    verdict = parse_verdict(text)
    if verdict.sysfs_root != root_key(sysfs_root):
        raise UnusableVerdict(f"cached verdict is for another sysfs root ({verdict.sysfs_root})")
    age = verdict.age_s(now_unix_s)
    if age < -MAX_FUTURE_S:
        raise UnusableVerdict(f"cached verdict is dated {-age:.0f}s in the future")
    if age > max_age_s:
        raise UnusableVerdict(f"cached verdict is {age:.0f}s old (max {max_age_s:g}s)")
    return verdict


def parse_verdict(text: str) -> Verdict:
    """Pure: the text of a verdict file -> Verdict; UnusableVerdict naming what is wrong."""
    try:
        data = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as exc:
        raise UnusableVerdict(f"cached verdict is not JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise UnusableVerdict(f"cached verdict is not a {SCHEMA} file")
    written: Any = data.get("written_at_unix_s")
    if not _number(written) or written < 0:
        raise UnusableVerdict("cached verdict has no valid written_at_unix_s")
    root = data.get("sysfs_root")
    families = data.get("families")
    gpus = data.get("gpus")
    profile = data.get("profile")
    if not isinstance(root, str) or _CONTROL_RE.search(root):
        raise UnusableVerdict("cached verdict has no valid sysfs_root")
    if not isinstance(families, list) or not all(
        isinstance(f, str) and re.fullmatch(r"[a-z]{1,16}", f) for f in families
    ):
        raise UnusableVerdict("cached verdict has no valid families")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or not 0 <= gpus <= 4096:
        raise UnusableVerdict("cached verdict has no valid gpus count")
    if profile is not None and (not isinstance(profile, str) or _CONTROL_RE.search(profile)):
        raise UnusableVerdict("cached verdict has an invalid profile name")
    raw_findings = data.get("findings")
    if not isinstance(raw_findings, list):
        raise UnusableVerdict("cached verdict has no findings list")
    findings = tuple(_finding(item, index) for index, item in enumerate(raw_findings))
    return Verdict(float(written), root, tuple(families), gpus, findings, profile)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def _number(value: Any) -> bool:
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    )


def _finding(item: Any, index: int) -> CachedFinding:
    if not isinstance(item, dict):
        raise UnusableVerdict(f"cached verdict finding {index} is not an object")
    check_id: Any = item.get("check_id")
    severity: Any = item.get("severity")
    subject: Any = item.get("subject")
    message: Any = item.get("message")
    if not isinstance(check_id, str) or not _CHECK_ID_RE.fullmatch(check_id):
        raise UnusableVerdict(f"cached verdict finding {index} has a bad check_id")
    try:
        level = Severity(severity)
    except ValueError:
        raise UnusableVerdict(f"cached verdict finding {index} has a bad severity") from None
    for value in (subject, message):
        if not isinstance(value, str) or len(value) > _MAX_TEXT or _CONTROL_RE.search(value):
            raise UnusableVerdict(f"cached verdict finding {index} has bad text")
    return CachedFinding(check_id, level, subject, message)
