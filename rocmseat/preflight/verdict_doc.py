"""The node's last full preflight verdict, cached in the state dir for fast readers.

node-problem-detector gives a custom plugin 5 s by default and Slurm's HealthCheckProgram 60 s
(docs/fleet.md); a full preflight with the HIP probe can take longer. So every full run of
`rocmseat preflight` (all default families, every GPU) writes its verdict here atomically, and
the fast readers (`preflight --format npd --cached`, `slurm health`) answer from it when it is
recent enough. A partial run (`--only`, `--pair`) never writes it: it would say "fine" for checks
it did not run.

`<state dir>/preflight/verdict.json`, schema `rocmseat.verdict/v1`. The file is input like any
other (docs/architecture.md, "Hostile input"): read as a regular file with a size cap, every field
type-checked, every number bounded, strings limited to printable text; anything else is an
unusable verdict, which the readers turn into "unknown", never "ok". A verdict is this node's
only if it was taken on the same sysfs root, on this host (`host`) in this boot (`boot_id`,
rocmseat.sysfs.host), against the same expectations profile (`profile`, `profile_sha256`) when
the reader names one, and is recent. The reasons are stable texts (no ages, no clock values):
node-problem-detector turns every change of a message into a condition update and an event
(docs/fleet.md, "Node checks").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocmseat.errors import ReadError, RocmseatError
from rocmseat.findings import Finding, Severity, Subject, exit_code_for
from rocmseat.safeio import UntrustedState
from rocmseat.statedir import VERDICT, Document, StateDir
from rocmseat.sysfs.fs import default_proc_root
from rocmseat.sysfs.host import NO_PROC, BootIdentity, read_boot_identity
from rocmseat.text import CONTROL_CLASS, replace_controls

SCHEMA = "rocmseat.verdict/v1"
# The oldest cached verdict a fast reader trusts, for every reader (`preflight --cached`,
# `slurm health`): three missed runs of the 5-minute preflight timer (docs/fleet.md)
DEFAULT_MAX_AGE_S = 900.0
LIMIT_BYTES = 4 << 20  # 16 GPUs give ~60 KiB; a larger file is not one rocmseat wrote
MAX_FUTURE_S = 300.0  # a verdict from the future (clock stepped back) is not trusted
# Unix seconds up to the year 2286: every number read from the file is bounded before use
# (a forged 10**400 must be "unusable", never an OverflowError)
MAX_UNIX_S = 10_000_000_000
MAX_GPUS = 4096
MAX_FINDINGS = 100_000
# Findings about the inventory itself (a card nobody could read, a GPU that is gone) and a run
# that could not judge at all (no device, a bad profile) concern every family: a reader asking
# about links must not hear "ok" about a GPU nobody could read.
ALWAYS_FAMILIES = frozenset({"inventory", "preflight"})
# Every full run has these (docs/preflight.md, "Checks"); a verdict without them is not a full
# run's, whatever it says (a forged `"families": []` must never read as a pass)
FULL_RUN_FAMILIES = frozenset({"pcie", "aer", "numa"})
ERROR_CHECK = "preflight.error"
_CHECK_ID_RE = re.compile(r"^[a-z0-9_]+(?:\.[a-z0-9_]+){0,5}$")
_BOOT_ID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_HOST_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
_MAX_TEXT = 1000


@dataclass(frozen=True, slots=True)
class CachedFinding:
    """One finding as the cached verdict keeps it."""

    check_id: str
    severity: Severity
    subject: str
    message: str

    @property
    def family(self) -> str:
        return self.check_id.split(".", 1)[0]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The last full run's verdict, as cached in the state dir."""

    written_at_unix_s: float
    sysfs_root: str
    families: tuple[str, ...]  # the check families the run had
    gpus: int
    findings: tuple[CachedFinding, ...]
    profile: str | None = None
    profile_sha256: str | None = None  # of the profile file's bytes
    boot_id: str | None = None  # None: taken on a tree with no proc root (a fixture)
    host: str | None = None

    @property
    def errored(self) -> bool:
        """The run judged nothing (no device, a bad profile): its one finding says why."""
        return any(f.check_id == ERROR_CHECK for f in self.findings)

    @property
    def covered(self) -> frozenset[str]:
        """The families this verdict speaks for (what ran, and the inventory's)."""
        return frozenset(self.families) | ALWAYS_FAMILIES

    def age_s(self, now_unix_s: float) -> float:
        return now_unix_s - self.written_at_unix_s

    def exit_code(self, *, strict: bool = False) -> int:
        return exit_code_for(_as_findings(self.findings), strict=strict)


def _as_findings(findings: Iterable[CachedFinding]) -> list[Finding]:
    return [Subject(f.subject).finding(f.check_id, f.severity, f.message) for f in findings]


def verdict_path(state_dir: Path) -> Path:
    return StateDir(state_dir).verdict


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
    profile_sha256: str | None = None,
    identity: BootIdentity | None = None,
) -> Verdict:
    boot = identity or NO_PROC
    return Verdict(
        written_at_unix_s=now_unix_s,
        sysfs_root=root_key(sysfs_root),
        families=tuple(sorted(families)),
        gpus=gpus,
        findings=tuple(
            CachedFinding(f.check_id, f.severity, _clean(f.subject), _clean(f.message))
            for f in findings
        ),
        profile=None if profile is None else _clean(profile),
        profile_sha256=profile_sha256,
        boot_id=boot.boot_id,
        host=boot.host,
    )


def _clean(text: str) -> str:
    """One printable line (messages quote sysfs text, which may hold anything)."""
    return replace_controls(text)[:_MAX_TEXT]


def to_json(verdict: Verdict) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "written_at_unix_s": verdict.written_at_unix_s,
        "sysfs_root": verdict.sysfs_root,
        "families": list(verdict.families),
        "gpus": verdict.gpus,
        "profile": verdict.profile,
        "profile_sha256": verdict.profile_sha256,
        "boot_id": verdict.boot_id,
        "host": verdict.host,
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
        StateDir(state_dir).write(VERDICT_DOC, to_json(verdict))
    except RocmseatError as exc:  # UntrustedState (a link on the way), WriteRefused
        return f"{path}: cannot save the preflight verdict ({exc.message})"
    except OSError as exc:
        return f"{path}: cannot save the preflight verdict ({exc.strerror or exc})"
    return None


class UnusableVerdict(ValueError):
    """The cached verdict is missing, foreign, torn, stale or from another sysfs root."""


@dataclass(frozen=True, slots=True)
class ProfileId:
    """The expectations profile a reader wants the verdict judged against."""

    name: str
    sha256: str


def load_verdict(
    state_dir: Path,
    sysfs_root: Path,
    *,
    max_age_s: float,
    now_unix_s: float,
    identity: BootIdentity | None = None,
    profile: ProfileId | None = None,
) -> Verdict:
    """The cached verdict, if it is rocmseat's, for this root, host and boot, and at most
    `max_age_s` old; with `profile`, judged against that profile.

    `identity` is this boot's (rocmseat.sysfs.host); None reads it under the default proc root
    of `sysfs_root`. Raises UnusableVerdict with a short, stable reason (it ends up in an 80-byte
    NPD line, whose every change is an event).
    """
    try:
        # sshd's StrictModes: a verdict anyone else could have written, or one reached through
        # a link, decides nothing (docs/architecture.md, "State")
        verdict = StateDir(state_dir).read(VERDICT_DOC)
    except UntrustedState as exc:
        cause = re.sub(r"^\(directory of [^)]*\) ", "", exc.cause)
        raise UnusableVerdict(f"untrusted {_where(exc.path, state_dir)}: {cause}") from None
    except ReadError as exc:
        raise UnusableVerdict(f"cached verdict unreadable: {exc.cause}") from None
    if verdict is None:
        raise UnusableVerdict("no cached verdict (run a full rocmseat preflight)")
    if verdict.sysfs_root != root_key(sysfs_root):
        raise UnusableVerdict(f"cached verdict is for another sysfs root ({verdict.sysfs_root})")
    here = identity if identity is not None else read_boot_identity(default_proc_root(sysfs_root))
    check_identity(verdict, here)
    age = verdict.age_s(now_unix_s)
    if age < -MAX_FUTURE_S:
        raise UnusableVerdict("cached verdict is dated in the future (clock stepped back?)")
    if age > max_age_s:
        raise UnusableVerdict(f"cached verdict is older than {max_age_s:g}s")
    if profile is not None and not verdict.errored:
        if verdict.profile is None:
            raise UnusableVerdict(f"cached run had no profile (want {profile.name})")
        if (verdict.profile, verdict.profile_sha256) != (profile.name, profile.sha256):
            raise UnusableVerdict(f"cached run used another profile ({verdict.profile})")
    return verdict


def _where(path: Path, state_dir: Path) -> str:
    """The offending file or directory, relative to the state dir (the line is 80 bytes)."""
    try:
        inside = path.relative_to(state_dir)
    except ValueError:
        return str(path)
    return "state dir" if inside == Path() else str(inside)


def check_identity(verdict: Verdict, here: BootIdentity) -> None:
    """UnusableVerdict unless the verdict was taken on this host, in this boot. Pure."""
    if here.error is not None:
        raise UnusableVerdict(f"cannot tell this boot: {here.error}")
    if verdict.host != here.host:
        raise UnusableVerdict(f"cached verdict is from another host ({verdict.host or 'unnamed'})")
    if verdict.boot_id != here.boot_id:
        raise UnusableVerdict(
            "cached verdict is from another boot" if verdict.boot_id else
            "cached verdict records no boot id"
        )


def parse_verdict(text: str) -> Verdict:
    """Pure: the text of a verdict file -> Verdict; UnusableVerdict naming what is wrong.

    The document is validated by one strict schema (`_document_validator`): exact types (no
    "4" for 4, no 4.0 for a count, no true for a number), finite bounded numbers, printable
    bounded strings, no unknown keys; then checked to say what a full run says. A document
    `_vouched` accepts (what a run writes) is one that schema accepts, as the same values, so
    the schema itself is built only for one it cannot vouch for, and its verdict and reason are
    the answer (tests/preflight/test_verdict_vouched.py holds the two to it)."""
    doc = _vouched(text)
    if doc is None:
        doc = _validated(text)
    findings = tuple(CachedFinding(f["check_id"], Severity(f["severity"]), f["subject"],
                                   f["message"]) for f in doc["findings"])
    verdict = Verdict(float(doc["written_at_unix_s"]), doc["sysfs_root"], tuple(doc["families"]),
                      doc["gpus"], findings, doc.get("profile"), doc.get("profile_sha256"),
                      doc.get("boot_id"), doc.get("host"))
    _check_consistent(verdict)
    if doc["exit_code"] != verdict.exit_code():
        raise UnusableVerdict("cached verdict's exit_code disagrees with its findings")
    return verdict


def _validated(text: str) -> dict[str, Any]:
    """The document as the strict schema reads it; UnusableVerdict with its first problem."""
    from pydantic_core import ValidationError

    try:
        doc: dict[str, Any] = _document_validator().validate_json(text)
    except ValidationError as exc:
        raise UnusableVerdict(_why(exc)) from None
    except (ValueError, RecursionError) as exc:
        raise UnusableVerdict(f"cached verdict is not JSON ({type(exc).__name__})") from None
    return doc


class _Unvouched(Exception):
    """Something `_vouched` does not vouch for (the strict schema then says what it is)."""


def _refuse_constant(name: str) -> Any:
    raise _Unvouched(name)  # NaN, Infinity, -Infinity: the schema's business


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise _Unvouched("a key given twice")
    return dict(pairs)


_FINDING_KEYS = frozenset({"check_id", "severity", "subject", "message"})
_REQUIRED_KEYS = frozenset({"schema", "written_at_unix_s", "sysfs_root", "families", "gpus",
                            "exit_code", "findings"})
_OPTIONAL_KEYS = frozenset({"profile", "profile_sha256", "boot_id", "host"})
_SEVERITIES = frozenset({"ok", "warn", "fail", "unknown"})
_PRINTABLE_RE = re.compile(f"[^{CONTROL_CLASS}]*")
_FAMILY_RE = re.compile(r"[a-z]{1,16}")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")


def _vouched(text: str) -> dict[str, Any] | None:
    """The document, when every rule of `_document_validator`'s schema plainly holds for it;
    None when it cannot say (the schema decides, and names the problem).

    Only stricter, never looser, than the schema (pydantic_core's validator, its JSON parser
    jiter and its Rust regex engine), rule by rule: the text is JSON without NaN or Infinity
    and without a key given twice (where json.loads and jiter could read one text two ways);
    the keys are exactly the schema's; every value has the schema's exact type (`type(x) is
    int`: no bool), bounds and length; a string is printable text without a lone surrogate
    (which jiter refuses and json.loads keeps), and matches its pattern as a whole
    (`re.fullmatch`: Python's `$` also matches before a final newline, Rust's only at the end);
    a count is a list of at most the schema's length. Every string and number so accepted
    reads the same through both parsers."""
    import json  # the full run's writer imports it too; a bad file costs the schema anyway

    try:
        doc = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)
        _vouch_document(doc)
    except (_Unvouched, ValueError, RecursionError):
        return None
    return doc  # type: ignore[no-any-return]


def _vouch_text(value: Any, max_length: int = _MAX_TEXT, pattern: re.Pattern[str] = _PRINTABLE_RE,
                *, nullable: bool = False) -> None:
    if value is None and nullable:
        return
    if (type(value) is not str or len(value) > max_length or _SURROGATE_RE.search(value)
            or _PRINTABLE_RE.fullmatch(value) is None or pattern.fullmatch(value) is None):
        raise _Unvouched("text")


def _vouch_int(value: Any, high: int) -> None:
    if type(value) is not int or not 0 <= value <= high:
        raise _Unvouched("int")


def _vouch_document(doc: Any) -> None:
    if type(doc) is not dict or not _REQUIRED_KEYS <= doc.keys() <= _REQUIRED_KEYS | _OPTIONAL_KEYS:
        raise _Unvouched("keys")
    if doc["schema"] != SCHEMA or type(doc["schema"]) is not str:
        raise _Unvouched("schema")
    stamp = doc["written_at_unix_s"]
    if type(stamp) is float:
        if not 0 <= stamp <= MAX_UNIX_S:  # NaN and infinities fail this too
            raise _Unvouched("written_at_unix_s")
    else:
        _vouch_int(stamp, MAX_UNIX_S)
    _vouch_text(doc["sysfs_root"], 4096)
    families = doc["families"]
    if type(families) is not list or len(families) > 32:
        raise _Unvouched("families")
    for family in families:
        _vouch_text(family, 16, _FAMILY_RE)
    _vouch_int(doc["gpus"], MAX_GPUS)
    _vouch_text(doc.get("profile"), nullable=True)
    _vouch_text(doc.get("profile_sha256"), 64, _SHA256_RE, nullable=True)
    _vouch_text(doc.get("boot_id"), 36, _BOOT_ID_RE, nullable=True)
    _vouch_text(doc.get("host"), 64, _HOST_RE, nullable=True)
    _vouch_int(doc["exit_code"], 3)
    findings = doc["findings"]
    if type(findings) is not list or len(findings) > MAX_FINDINGS:
        raise _Unvouched("findings")
    for finding in findings:
        if type(finding) is not dict or finding.keys() != _FINDING_KEYS:
            raise _Unvouched("finding")
        _vouch_text(finding["check_id"], 200, _CHECK_ID_RE)
        if type(finding["severity"]) is not str or finding["severity"] not in _SEVERITIES:
            raise _Unvouched("severity")
        _vouch_text(finding["subject"])
        _vouch_text(finding["message"])


def _parse_cached(text: str, shown: str) -> Verdict:
    # the reasons stay free of the path: they are the NPD condition's stable message
    return parse_verdict(text)


# the cached verdict as the state dir declares it (pydantic_core's validator alone: the NPD
# answer imports no pydantic)
VERDICT_DOC = Document(VERDICT, SCHEMA, _parse_cached, limit_bytes=LIMIT_BYTES)


def _why(exc: Any) -> str:
    """The first problem the schema found, as a short stable reason (no input values)."""
    error = exc.errors(include_url=False, include_input=False)[0]
    loc = [str(part) for part in error["loc"]]
    if error["type"] == "json_invalid":
        return "cached verdict is not JSON"
    if not loc or loc == ["schema"]:
        return f"cached verdict is not a {SCHEMA} file"
    if loc[0] == "findings" and len(loc) >= 3:
        return f"cached verdict finding {loc[1]} has an invalid {loc[2]}"
    if loc[0] == "findings" and len(loc) == 2:
        return f"cached verdict finding {loc[1]} is not an object"
    if error["type"] == "missing":
        return f"cached verdict has no {loc[0]}"
    return f"cached verdict has an invalid {loc[0]}"


@functools.cache
def _document_validator() -> Any:
    """The strict schema of a `rocmseat.verdict/v1` document, built on first use.

    pydantic's own validator core (pydantic_core, the engine under every pydantic model) with
    the schema stated directly: the same strict checks a pydantic model makes, without
    importing pydantic and generating a model, which would cost the cached NPD answer (it
    reads this one file) more than the whole full run takes (docs/preflight.md, issue 23)."""
    from pydantic_core import SchemaValidator
    from pydantic_core import core_schema as cs

    printable = f"^[^{CONTROL_CLASS}]*$"

    def text(max_length: int = _MAX_TEXT, pattern: str = printable) -> Any:
        return cs.str_schema(max_length=max_length, pattern=pattern, strict=True)

    def field(schema: Any, *, required: bool = True) -> Any:
        return cs.typed_dict_field(schema, required=required)

    def optional(schema: Any) -> Any:
        return field(cs.nullable_schema(schema), required=False)

    def strict_dict(fields: dict[str, Any]) -> Any:
        return cs.typed_dict_schema(fields, extra_behavior="forbid", strict=True)

    finding = strict_dict({
        "check_id": field(text(200, _CHECK_ID_RE.pattern)),
        "severity": field(cs.literal_schema(["ok", "warn", "fail", "unknown"])),
        "subject": field(text()),
        "message": field(text()),
    })
    document = strict_dict({
        "schema": field(cs.literal_schema([SCHEMA])),
        # ints stay ints (a forged 10**400 is out of range, never an OverflowError)
        "written_at_unix_s": field(cs.union_schema([
            cs.int_schema(ge=0, le=MAX_UNIX_S, strict=True),
            cs.float_schema(ge=0, le=MAX_UNIX_S, allow_inf_nan=False, strict=True),
        ])),
        "sysfs_root": field(text(4096)),
        "families": field(cs.list_schema(text(16, r"^[a-z]{1,16}$"), max_length=32,
                                         strict=True)),
        "gpus": field(cs.int_schema(ge=0, le=MAX_GPUS, strict=True)),
        "profile": optional(text()),
        "profile_sha256": optional(text(64, _SHA256_RE.pattern)),
        "boot_id": optional(text(36, _BOOT_ID_RE.pattern)),
        "host": optional(text(64, _HOST_RE.pattern)),
        "exit_code": field(cs.int_schema(ge=0, le=3, strict=True)),
        "findings": field(cs.list_schema(finding, max_length=MAX_FINDINGS, strict=True)),
    })
    return SchemaValidator(document)


def _check_consistent(verdict: Verdict) -> None:
    """A verdict says what a full run says: the full run's families, a GPU, findings only of
    families that ran; or one `preflight.error` finding (the run judged nothing)."""
    if verdict.errored:
        if len(verdict.findings) != 1 or verdict.findings[0].severity != Severity.UNKNOWN:
            raise UnusableVerdict("cached verdict mixes preflight.error with other findings")
        return
    missing = sorted(FULL_RUN_FAMILIES - set(verdict.families))
    if missing:
        raise UnusableVerdict(f"cached verdict is not a full run's (no {missing[0]})")
    if verdict.gpus < 1:
        raise UnusableVerdict("cached verdict of a full run counts no GPU")
    if not verdict.findings:
        raise UnusableVerdict("cached verdict of a full run has no findings")
    stray = sorted({f.family for f in verdict.findings} - verdict.covered)
    if stray:
        raise UnusableVerdict(f"cached verdict has {stray[0]} findings, yet {stray[0]} did not run")
