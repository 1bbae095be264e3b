"""The node-problem-detector custom-plugin answer: one line of at most 80 bytes and an exit code.

NPD's custom plugin monitor (kubernetes/node-problem-detector pkg/custompluginmonitor/plugin/
plugin.go) trims the plugin's stdout, keeps the first `max_output_length` bytes (default 80,
types/config.go) as the condition message, and reads exit 0 as OK, 1 as NonOK and anything else
as Unknown (types/types.go). rocmseat's exit codes already follow that contract
(docs/architecture.md, "Exit codes"); this module only builds the line. Pure.

The line depends on the verdict only, never on the clock: with
`enable_message_change_based_condition_update` (deploy/npd/), NPD updates a True condition, resets
its transition time and emits an event whenever the message changes
(pkg/custompluginmonitor/custom_plugin_monitor.go, generateStatus, scenario 4). A verdict's age in
the line would do that every run and defeat duration-based remediation.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Protocol

from rocmseat import exitcodes
from rocmseat.findings import Finding, Severity, exit_code_for
from rocmseat.preflight.order import Ordered, worst_first
from rocmseat.preflight.verdict_doc import ALWAYS_FAMILIES, ProfileId, UnusableVerdict, load_verdict

MAX_OUTPUT_BYTES = 80


class _FindingLike(Ordered, Protocol):
    @property
    def message(self) -> str: ...


def fit(text: str, limit: int = MAX_OUTPUT_BYTES) -> str:
    """One line of printable ASCII of at most `limit` bytes (NPD cuts bytes, not characters).

    The verdict word and the problem come first and stay: a reason that starts with a path
    (`/etc/x.toml:3: key 'a': ...`) is turned around (`key 'a': ... (x.toml:3)`), and when the
    line is too long its paths are cut to their last component before anything else is cut.
    """
    clean = "".join(c if " " <= c <= "~" else "?" for c in text.strip())
    clean = _problem_first(clean)
    if len(clean) > limit:
        clean = _PATH_RE.sub(lambda m: m.group(1) + _short_path(m.group(2)), clean)
    if len(clean) <= limit:
        return clean
    cut = clean[:limit]
    # end on a word, not inside a PCI address or a number, unless that loses most of the line
    space = cut.rfind(" ")
    return (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:(")


# a path: at the start or after a space/paren, with a slash in it
_PATH_RE = re.compile(r"(^|[\s(])((?:\.{0,2}/)?[\w.@+-]+(?:/[\w.@+-]*)+)")
# "VERDICT: /a/b/file[:line]: what is wrong" -> the path moves to the end
_LEADING_PATH_RE = re.compile(r"^([A-Z]+(?: \[[a-z,]+\])?: )(\S*/\S*?)((?::\d+)?): (.+)$")


def _short_path(path: str) -> str:
    parts = [p for p in path.split("/") if p]
    return path if len(parts) <= 1 else ".../" + parts[-1]


def _problem_first(line: str) -> str:
    match = _LEADING_PATH_RE.match(line)
    if match is None:
        return line
    head, path, lineno, rest = match.groups()
    return f"{head}{rest} ({path}{lineno})"


def family_of(check_id: str) -> str:
    return check_id.split(".", 1)[0]


def select(findings: Sequence[_FindingLike], families: Collection[str] | None) -> list[Finding]:
    """The findings of `families` (all when None), plus the inventory's, as Findings."""
    return [
        Finding(f.check_id, f.severity, f.subject, f.message)
        for f in findings
        if families is None or family_of(f.check_id) in families or
        family_of(f.check_id) in ALWAYS_FAMILIES
    ]


def npd_line(
    findings: Sequence[_FindingLike],
    *,
    gpus: int,
    families: Collection[str] | None = None,
    strict: bool = False,
) -> tuple[str, int]:
    """(line, exit code) for the findings of `families` (all when None).

    FAIL/UNKNOWN name the worst check and its subject, then how many more; OK counts the checks.
    The same findings give the same line, whenever they are read (no age: see above).
    """
    chosen = select(findings, families)
    scope = "" if families is None else f" [{','.join(sorted(families))}]"
    if not chosen:
        return fit(f"UNKNOWN: no findings{scope} to judge"), exitcodes.CANNOT_CHECK
    code = exit_code_for(chosen, strict=strict)
    if code == exitcodes.OK:
        warns = sum(f.severity == Severity.WARN for f in chosen)
        extra = f", {warns} warn" if warns else ""
        return fit(f"OK{scope}: {gpus} GPUs, {len(chosen)} checks{extra}"), code
    if code == exitcodes.PROBLEM:
        wanted = {Severity.FAIL} if any(f.severity == Severity.FAIL for f in chosen) else {
            Severity.WARN  # --strict
        }
        label = "FAIL"
    else:
        wanted, label = {Severity.UNKNOWN}, "UNKNOWN"
    # the worst first (rocmseat.preflight.order): a degraded link before an AER count
    worst = worst_first([f for f in chosen if f.severity in wanted])
    first = worst[0]
    if first.check_id == "preflight.error":
        # the run judged nothing (no device, a bad profile): its one-line reason is the news
        return fit(f"UNKNOWN: {first.message}"), code
    more = f" +{len(worst) - 1} more" if len(worst) > 1 else ""
    return fit(f"{label} {first.check_id} {first.subject}{more}"), code


def unusable_line(reason: str) -> tuple[str, int]:
    """The answer when there is no verdict to read (missing, stale, torn): unknown, exit 2."""
    return fit(f"UNKNOWN: {reason}"), exitcodes.CANNOT_CHECK


def missing_families(wanted: Collection[str], ran: Collection[str]) -> list[str]:
    return sorted(set(wanted) - set(ran) - ALWAYS_FAMILIES)


def cached_line(
    state_dir: Path,
    sysfs_root: Path,
    *,
    families: Collection[str] | None,
    max_age_s: float,
    now_unix_s: float,
    strict: bool = False,
    profile: ProfileId | None = None,
) -> tuple[str, int]:
    """The answer of `preflight --format npd --cached`: the cached verdict's line for
    `families`, or why there is none (unknown, exit 2). Reads the state dir only."""
    try:
        verdict = load_verdict(state_dir, sysfs_root, max_age_s=max_age_s,
                               now_unix_s=now_unix_s, profile=profile)
    except UnusableVerdict as exc:
        return unusable_line(str(exc))
    absent = [] if verdict.errored else missing_families(families or (), verdict.families)
    if absent:
        hint = " (add --hip to the periodic run)" if "hip" in absent else ""
        return unusable_line(f"{absent[0]} was not in the cached run{hint}")
    return npd_line(verdict.findings, gpus=verdict.gpus, families=families, strict=strict)
