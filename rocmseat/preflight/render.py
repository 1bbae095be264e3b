"""Render a PreflightReport: a table for humans and JSON (rocmseat.preflight/v1); the
node_exporter textfile is in preflight/textfile.py. Pure text builders; cli/preflight.py prints
them. rich is imported only for a colour table on a terminal (import time matters: preflight runs as
ExecStartPre and in a 16-GPU bench).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from rocmseat import jsonio
from rocmseat.findings import Finding, Severity, exit_code_for, worst
from rocmseat.node.link import effective_link
from rocmseat.preflight.link import endpoint_claim, link_words
from rocmseat.preflight.order import worst_first_in_run_order
from rocmseat.preflight.pairs import pair_json
from rocmseat.preflight.run import PreflightReport

SCHEMA = "rocmseat.preflight/v1"


def to_json(report: PreflightReport, *, strict: bool = False) -> dict[str, Any]:
    checked = {g.pci_address for g in report.checked}
    gpus = []
    for gpu in report.inventory.gpus:
        eff = effective_link(gpu)
        own = gpu.endpoint.link
        gpus.append(
            {
                "pci_address": gpu.pci_address,
                "card": gpu.card,
                "product_name": gpu.product_name,
                "gfx_target": gpu.gfx_target,
                "numa_node": gpu.numa_node,
                "socket": gpu.socket,
                "socket_source": gpu.socket_source,
                "local_cpulist": gpu.local_cpulist,
                "checked": gpu.pci_address in checked,
                "effective_link": {
                    "speed_gts": eff.speed_gts,
                    "width": eff.width,
                    "limited_at": eff.limited_at,
                    "capable_speed_gts": eff.capable_speed_gts,
                    "capable_width": eff.capable_width,
                },
                "endpoint_claims": {"speed_gts": own.current_speed_gts, "width": own.current_width},
                "path": [
                    {
                        "address": hop.address,
                        "role": hop.role,
                        "ids": hop.ids,
                        "current_speed_gts": hop.link.current_speed_gts,
                        "current_width": hop.link.current_width,
                        "max_speed_gts": hop.link.max_speed_gts,
                        "max_width": hop.link.max_width,
                    }
                    for hop in gpu.path
                ],
            }
        )
    counts = Counter(f.severity.value for f in report.findings)
    return {
        "schema": SCHEMA,
        "exit_code": exit_code_for(report.findings, strict=strict),
        "worst": worst(report.findings).value,
        "counts": {s.value: counts.get(s.value, 0) for s in Severity},
        "profile": report.profile,
        "aer_window": report.aer_window,
        "gpus": gpus,
        "pairs": {
            "proposed": [pair_json(p) for p in report.proposed],
            "requested": [list(p) for p in report.requested],
        },
        "findings": [f.to_json() for f in report.findings],
    }


def render_json(report: PreflightReport, *, strict: bool = False) -> str:
    return jsonio.dumps(to_json(report, strict=strict)) + "\n"


# --- table ------------------------------------------------------------------------------------
def _gpu_rows(report: PreflightReport) -> list[list[str]]:
    rows = []
    for gpu in report.checked:
        eff = effective_link(gpu)
        rows.append(
            [
                gpu.pci_address,
                gpu.card or "-",
                gpu.gfx_target or "-",
                link_words(eff.speed_gts, eff.width),
                eff.limited_at or "-",
                endpoint_claim(gpu),
                "-" if gpu.socket is None else str(gpu.socket),
                "-1" if gpu.numa_node is None else str(gpu.numa_node),
            ]
        )
    return rows


GPU_HEADER = ["GPU", "CARD", "GFX", "LINK", "LIMITED AT", "ENDPOINT CLAIMS", "SOCKET", "NUMA"]
FINDING_HEADER = ["SEVERITY", "CHECK", "SUBJECT", "MESSAGE"]


def _finding_rows(findings: tuple[Finding, ...]) -> list[list[str]]:
    return [[f.severity.value.upper(), f.check_id, f.subject, f.message]
            for f in _ordered(findings)]


def _ordered(findings: tuple[Finding, ...]) -> list[Finding]:
    """The worst first (rocmseat.preflight.order), ties in the run's order."""
    return worst_first_in_run_order(findings)


def _hint(finding: Finding) -> str | None:
    """A problem's hint, for a line of its own (an ok finding's is not news)."""
    hint = (finding.hint or "").strip()
    return hint if hint and finding.severity is not Severity.OK else None


def _summary(report: PreflightReport, strict: bool) -> str:
    counts = Counter(f.severity for f in report.findings)
    parts = [
        f"{counts.get(s, 0)} {s.value}"
        for s in (Severity.FAIL, Severity.UNKNOWN, Severity.WARN, Severity.OK)
    ]
    code = exit_code_for(report.findings, strict=strict)
    return f"result: {', '.join(parts)} -> exit {code}"


def _title(report: PreflightReport) -> str:
    inv = report.inventory
    sockets = len(inv.sockets)
    checked = "" if len(report.checked) == len(inv.gpus) else f", checking {len(report.checked)}"
    return f"rocmseat preflight: {len(inv.gpus)} AMD GPUs{checked}, {sockets} socket(s)" + (
        f", profile {report.profile}" if report.profile else ""
    )


def _pair_lines(report: PreflightReport) -> list[str]:
    lines = []
    for pair in report.proposed:
        sym = "symmetric" if pair.symmetric else f"asymmetric: {pair.link_a} / {pair.link_b}"
        lines.append(f"  {pair.a} + {pair.b}  socket {pair.socket}  ({sym})")
    return lines or ["  none (no two GPUs share a known socket)"]


def _plain_table(header: list[str], rows: list[list[str]],
                 notes: list[str | None] | None = None) -> list[str]:
    """Columns padded to their widest cell; `notes[i]`, when given, is a line of its own
    under row i, starting at the last column (a finding's hint)."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    indent = " " * (sum(widths) + 2 * len(widths))
    out = []
    for i, row in enumerate([header, *rows]):
        cells = [cell.ljust(widths[j]) for j, cell in enumerate(row[:-1])]
        out.append("  ".join([*cells, row[-1]]).rstrip())
        note = notes[i - 1] if notes is not None and i > 0 else None
        if note:
            out.append(f"{indent}hint: {note}")
    return out


def render_table(report: PreflightReport, *, strict: bool = False) -> str:
    """Plain text, no colour (for pipes, logs and the journal of an ExecStartPre)."""
    lines = [_title(report), ""]
    lines += _plain_table(GPU_HEADER, _gpu_rows(report))
    lines += ["", "proposed TP2 pairs (socket-local):", *_pair_lines(report), ""]
    lines += _plain_table(FINDING_HEADER, _finding_rows(report.findings),
                          [_hint(f) for f in _ordered(report.findings)])
    lines += ["", _summary(report, strict)]
    return "\n".join(lines) + "\n"


def render_problems(report: PreflightReport, *, strict: bool = False, width: int = 80) -> str:
    """Only what is not ok, worst first (`preflight --problems`), the ok findings folded into a
    count; every line at most `width` columns. Each problem is its head (severity, check,
    subject), its message fitted on a line of its own so the figure survives (fit_message) and
    its hint, wrapped, never cut."""
    import textwrap  # the problems table only (not --json)

    problems = [f for f in _ordered(report.findings) if f.severity is not Severity.OK]
    folded = len(report.findings) - len(problems)
    lines = [_title(report)]
    for f in problems:
        lines.append(f"{f.severity.value.upper()} {f.check_id} {f.subject}")
        lines.append(PROBLEM_INDENT + fit_message(f.message, width - len(PROBLEM_INDENT)))
        hint = _hint(f)
        if hint:
            lines += textwrap.wrap(f"hint: {hint}", width, initial_indent=PROBLEM_INDENT,
                                   subsequent_indent=PROBLEM_INDENT + "      ",
                                   break_on_hyphens=False)
    lines.append(f"({folded} ok not shown)" if problems else f"no problems ({folded} ok)")
    lines.append(_summary(report, strict))
    return "\n".join(_cut(line, width) for line in lines) + "\n"


PROBLEM_INDENT = "    "


def fit_message(message: str, width: int) -> str:
    """A finding's message in `width` columns, the figure kept: its asides in parentheses go
    first (the detail), then its later clauses (`; ...`), then its end. A message's first
    clause says what was measured (`root port 0000:80:03.0 trained 2.5 GT/s x16`), the later
    ones what it was held against."""
    if len(message) <= width:
        return message
    text = re.sub(r" \([^()]*\)", "", message)
    clauses = text.split("; ")
    while len(clauses) > 1 and len("; ".join(clauses)) > width:
        clauses.pop()
    return _cut("; ".join(clauses), width)


def _cut(line: str, width: int) -> str:
    return line if len(line) <= width else line[: max(width - 3, 1)].rstrip() + "..."


def rich_renderables(report: PreflightReport, *, strict: bool = False) -> list[Any]:
    """The same table in colour, as rich renderables for a terminal (the CLI prints them).

    Every cell is a Text, never markup: sysfs strings (product_name, `dev_cor_errs_bit[9]`)
    must not be read as rich style tags.
    """
    from rich.table import Column, Table
    from rich.text import Text

    def columns(header: list[str], keep: set[str]) -> list[Column]:
        # PCI addresses are what the operator acts on: wrap the prose, never crop an address
        return [Column(name, no_wrap=name in keep) for name in header]

    out: list[Any] = [Text(_title(report), style="bold")]
    gpus = Table(*columns(GPU_HEADER, {"GPU", "LIMITED AT"}), box=None, pad_edge=False)
    for row in _gpu_rows(report):
        gpus.add_row(*(Text(cell) for cell in row))
    out += [gpus, Text("proposed TP2 pairs (socket-local):")]
    out += [Text(line) for line in _pair_lines(report)]
    styles = {"OK": "green", "WARN": "yellow", "UNKNOWN": "magenta", "FAIL": "bold red"}
    table = Table(*columns(FINDING_HEADER, {"SUBJECT"}), box=None, pad_edge=False)
    for finding, row in zip(_ordered(report.findings), _finding_rows(report.findings),
                            strict=True):
        table.add_row(Text(row[0], style=styles[row[0]]), *(Text(cell) for cell in row[1:]))
        hint = _hint(finding)
        if hint:
            table.add_row(Text(""), Text(""), Text(""), Text(f"hint: {hint}", style="dim"))
    out += [table, Text(_summary(report, strict))]
    return out
