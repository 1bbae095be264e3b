"""The start gate of a replica: its GPU pair's preflight, judged by one rule wherever it runs.

One rule: a `fail` finding refuses the start, naming it, unless `[preflight] refuse_on_fail =
false`. An `unknown` finding (a check that could not run) is said on stderr and kept in the
startup report but does not refuse: it is no evidence against the pair. (`rocmseat preflight`
itself exits 2 for it, node-problem-detector style; the node preflight unit that runs it does
not hold the replicas back, they only Want= it.)

Each check runs once per start. Under systemd the gate is split in two:
- `ExecStartPre=rocmseat launch SEAT --replica R --preflight-only` runs the fast sysfs families
  (pcie, aer, numa, profile: file reads), applies the rule, and leaves its findings in
  `<replica state dir>/preflight-sysfs.json` tagged with `$INVOCATION_ID`, which systemd sets
  to one id per start of a unit, the same for ExecStartPre= and ExecStart= (systemd.exec(5),
  "Environment variables in spawned processes").
- `ExecStart=rocmseat launch ...` finds that file with its own `$INVOCATION_ID`, reuses those
  findings, and runs only the HIP probe (seconds: it initialises both GPUs), when the seat asks.
Outside systemd, or when the ids differ (a manual run, a file left by an earlier start), launch
runs every family itself. The AER family keeps a baseline in the state dir, so running it twice
per start would also halve the window it judges.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, StringConstraints

from rocmseat.docmodel import Line, StrictDoc, parse_doc
from rocmseat.errors import ReadError, RocmseatError
from rocmseat.findings import Finding, Severity
from rocmseat.findings_doc import FindingDoc
from rocmseat.launch.plan import ReplicaPlan, engine_env
from rocmseat.located import DocumentInvalid, load_json
from rocmseat.placement.groups import group_pairs
from rocmseat.seat.model import Seat
from rocmseat.statedir import PREFLIGHT_SYSFS, Document, StateDir
from rocmseat.sysfs.parse import normalize_pci_address
from rocmseat.text import printable

Say = Callable[[str], None]
INVOCATION_ENV = "INVOCATION_ID"
SYSFS_RESULT_LIMIT_BYTES = 4 << 20  # the findings of one pair: a few KiB

# `<replica state dir>/preflight-sysfs.json` (`rocmseat.preflight-sysfs/v1`) as a strict model: a
# finding read back here can let a start through, so a damaged or forged file is one located
# line and the checks run again, never a KeyError or a finding of a severity nobody writes.
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


# read as JSON first: a file of another start (another invocation id) is not judged at all
SYSFS_RESULT = Document(PREFLIGHT_SYSFS, SYSFS_SCHEMA, load_json,
                        limit_bytes=SYSFS_RESULT_LIMIT_BYTES)


class PreflightRefused(RocmseatError):
    """A start refused by the gate (exit 1); carries every finding of the gate for the report."""

    def __init__(self, message: str, *, hint: str | None, findings: Sequence[Finding]) -> None:
        super().__init__(message, hint=hint)
        self.findings = tuple(findings)


def refusal(findings: Sequence[Finding], replica: str, *,
            refuse_on_fail: bool) -> PreflightRefused | None:
    """The error that refuses the start, or None (pure: the one rule of the module docstring)."""
    failing = [f for f in findings if f.severity is Severity.FAIL]
    if not failing or not refuse_on_fail:
        return None
    first = failing[0]
    more = f" (and {len(failing) - 1} more failing)" if len(failing) > 1 else ""
    return PreflightRefused(
        f"replica {replica}: start refused by preflight: {first.check_id} {first.subject}: "
        f"{first.message}{more}",
        hint=first.hint or "set [preflight] refuse_on_fail = false to start anyway",
        findings=findings,
    )


def needs_gate(seat: Seat, plan: ReplicaPlan, sysfs_root: Path | None) -> bool:
    return seat.backend == "rocm" and len(plan.pci_pair) >= 2 and sysfs_root is not None


def needs_hip(seat: Seat, plan: ReplicaPlan, sysfs_root: Path | None) -> bool:
    """The start runs the HIP probe (and launch reads HIP's own numbering first)."""
    return needs_gate(seat, plan, sysfs_root) and seat.preflight.hip


VISIBLE_CHECK = "launch.hip.visible"


def visibility(plan: ReplicaPlan, findings: Sequence[Finding]) -> Finding | None:
    """Under the replica's own HIP_VISIBLE_DEVICES, HIP must show exactly its pair, in order
    (the `devices` of the probe's hip.runtime finding, read with hipDeviceGetPCIBusId). None when
    HIP did not run; a `fail` when the mask selects other GPUs: the engine would run there."""
    if len(plan.pci_pair) < 2:
        return None
    subject = "+".join(group_pairs(plan.pci_pair)[0])  # each pair's child sees the whole mask
    for finding in findings:
        if finding.check_id != "hip.runtime" or finding.subject != subject:
            continue
        devices = finding.data.get("devices")
        if not isinstance(devices, list) or not devices:
            return None
        seen = [normalize_pci_address(str(d)) or str(d) for d in devices]
        mask = plan.env.get("HIP_VISIBLE_DEVICES", "")
        data = {"hip_visible_devices": mask, "devices": seen, "pair": list(plan.pci_pair)}
        if seen == list(plan.pci_pair):
            return Finding(VISIBLE_CHECK, Severity.OK, plan.replica,
                           f"HIP_VISIBLE_DEVICES={mask} shows HIP the pair "
                           f"{', '.join(plan.pci_pair)}", data=data)
        return Finding(VISIBLE_CHECK, Severity.FAIL, plan.replica,
                       f"HIP_VISIBLE_DEVICES={mask} shows HIP {', '.join(seen)}, not the "
                       f"replica's pair {', '.join(plan.pci_pair)}: the engine would run on "
                       "other GPUs", "docs/hip.md, \"Numbering\"", data)
    return None


def _run(seat: Seat, plan: ReplicaPlan, sysfs_root: Path, state_dir: Path, *,
         families: Collection[str] | None, hip: bool, say: Say,
         environ: Mapping[str, str] | None = None) -> list[Finding]:
    from rocmseat.preflight.run import PreflightOptions, preflight_report

    # The HIP probe runs with the engine's own environment (HIP_VISIBLE_DEVICES, an inherited
    # ROCR_VISIBLE_DEVICES, HSA_*, NCCL_* ...): IPC that works in a bare shell can fail under
    # the replica's settings, and the mask must select the pair.
    report = preflight_report(sysfs_root, state_dir, PreflightOptions(
        families=families, pairs=group_pairs(plan.pci_pair),
        profile=seat.preflight.profile, hip=hip,
        hip_env=engine_env(environ or {}, plan) if hip else None))
    findings = list(report.findings)
    for finding in findings:
        if finding.severity is not Severity.OK:
            say(f"preflight {finding.severity.value}: {finding.check_id} {finding.subject}: "
                f"{finding.message}")
    return findings


def profile_problem(seat: Seat) -> str | None:
    """`[preflight] profile` as every start's preflight will load it (the one loader,
    rocmseat.preflight.profile.load_profile): None if it loads, else the located reason. A
    relative profile is relative to the seat file's directory (docs/seat.md), so a seat copied
    without its profile names nothing, and its unit's ExecStartPre= would fail at every start."""
    from rocmseat.preflight.profile import load_profile

    if seat.preflight.profile is None:
        return None
    try:
        load_profile(seat.preflight.profile)
    except RocmseatError as exc:
        return f"preflight.profile: {exc.message}"
    return None


def sysfs_gate(seat: Seat, plan: ReplicaPlan, sysfs_root: Path | None, state_dir: Path, *,
               environ: Mapping[str, str], say: Say) -> list[Finding]:
    """`--preflight-only` (ExecStartPre=): the sysfs families, judged; leaves the findings for
    this start's `launch` when systemd gave us an invocation id."""
    if sysfs_root is None or not needs_gate(seat, plan, sysfs_root):
        say(f"replica {plan.replica}: no GPU pair to check (backend {seat.backend})")
        return []
    findings = _run(seat, plan, sysfs_root, state_dir, families=None, hip=False, say=say)
    refused = refusal(findings, plan.replica, refuse_on_fail=seat.preflight.refuse_on_fail)
    if refused is not None:
        raise refused
    invocation = environ.get(INVOCATION_ENV)
    if invocation:
        StateDir(state_dir).write(SYSFS_RESULT, {
            "invocation_id": invocation, "pair": list(plan.pci_pair),
            "findings": [f.to_json() for f in findings],
        }, seat=seat.name, replica=plan.replica)
    worst = sorted({f.severity.value for f in findings if f.severity is not Severity.OK})
    say(f"replica {plan.replica}: sysfs preflight of {', '.join(plan.pci_pair)}: "
        f"{len(findings)} findings" + (f" ({', '.join(worst)} among them)" if worst else ""))
    return findings


def launch_gate(seat: Seat, plan: ReplicaPlan, sysfs_root: Path | None, state_dir: Path, *,
                environ: Mapping[str, str], say: Say) -> list[Finding]:
    """`launch`'s gate: what ExecStartPre= did not already run for this start, then the rule."""
    if sysfs_root is None or not needs_gate(seat, plan, sysfs_root):
        return []
    reused = _reuse(state_dir, seat, plan, environ.get(INVOCATION_ENV), say)
    if reused is None:
        findings = _run(seat, plan, sysfs_root, state_dir, families=None,
                        hip=seat.preflight.hip, say=say, environ=environ)
    else:
        findings = reused
        if seat.preflight.hip:
            # a hip-only run still reports the inventory (a missing GPU): keep what is new
            hip = _run(seat, plan, sysfs_root, state_dir, families={"hip"}, hip=True, say=say,
                       environ=environ)
            findings += [f for f in hip if f not in reused]
    visible = visibility(plan, findings)
    if visible is not None:
        findings.append(visible)
        if visible.severity is Severity.FAIL:
            # Not a judgement of the pair that refuse_on_fail = false may wave through: the
            # engine would be started on other GPUs.
            say(f"preflight fail: {visible.check_id} {visible.subject}: {visible.message}")
            raise PreflightRefused(f"replica {plan.replica}: start refused: {visible.message}",
                                   hint=visible.hint, findings=findings)
    refused = refusal(findings, plan.replica, refuse_on_fail=seat.preflight.refuse_on_fail)
    if refused is not None:
        raise refused
    return findings


def _result_path(state_dir: Path, seat: Seat, plan: ReplicaPlan) -> Path:
    return StateDir(state_dir).path(SYSFS_RESULT, seat=seat.name, replica=plan.replica)


def _reuse(state_dir: Path, seat: Seat, plan: ReplicaPlan, invocation: str | None,
           say: Say) -> list[Finding] | None:
    """The sysfs findings of this start's ExecStartPre=, or None (then launch runs them)."""
    if not invocation:
        return None
    path = _result_path(state_dir, seat, plan)
    try:
        # a state file is input too: a trusted regular file (a FIFO would hang the start),
        # capped, and JSON of any shape or depth is a reason to run the checks again, never a
        # crash
        value = StateDir(state_dir).read(SYSFS_RESULT, seat=seat.name, replica=plan.replica)
    except ReadError as exc:
        say(f"{printable(exc.message, 300)}; running the sysfs preflight again")
        return None
    except DocumentInvalid as exc:
        say(f"{exc.message}; running the sysfs preflight again")
        return None
    if not isinstance(value, dict) or value.get("invocation_id") != invocation:
        return None  # an earlier start's, or a manual run's
    try:
        doc = parse_doc(SysfsResultDoc, value, str(path))
    except DocumentInvalid as exc:
        say(f"{exc.message}; running the sysfs preflight again")
        return None
    if doc.pair != list(plan.pci_pair):
        say(f"{path}: for another pair; running the sysfs preflight again")
        return None
    findings = [item.finding() for item in doc.findings]
    say(f"sysfs preflight of {', '.join(plan.pci_pair)} ran in ExecStartPre= of this start "
        f"({len(findings)} findings): not repeated")
    return findings
