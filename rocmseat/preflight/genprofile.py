"""`rocmseat preflight --write-profile FILE`: the expectation profile of a node judged healthy,
the way NHC's `nhc-genconf` writes nhc.conf from the node it runs on (an operator of 50 nodes
writes no profile by hand). Pure: a report in, the profile's TOML text out; the CLI writes it.

What is written: every GPU's PCI address, its effective link (rocmseat.node.link, the link
the verdict stands on) and socket; the proposed TP2 pairs on a node without a hive; the hive
(`[xgmi]`: members, the fewest links to a peer, the narrowest and slowest xGMI link) and the
partition modes where the GPUs report them. A node with a failing or unknown finding is not
written from: the profile would enshrine the fault (ConfigError saying which finding).
"""

from __future__ import annotations

from rocmseat.errors import ConfigError
from rocmseat.findings import Severity
from rocmseat.node.link import effective_link
from rocmseat.preflight.run import PreflightReport


def profile_text(report: PreflightReport, name: str) -> str:
    """The profile of `report`'s node; ConfigError when the node was not judged healthy."""
    bad = [f for f in report.findings if f.severity in (Severity.FAIL, Severity.UNKNOWN)]
    if bad:
        first = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise ConfigError(
            f"--write-profile writes from a healthy node; this one has {first.severity.value} "
            f"{first.check_id} {first.subject}: {first.message}{more}",
            hint="fix or explain the finding first; a profile of a faulty node hides the fault")
    if not report.full:
        raise ConfigError("--write-profile needs a full run (no --only, no --pair)")
    gpus = report.inventory.gpus
    lines = [
        f"# Written by `rocmseat preflight --write-profile` from {len(gpus)} GPUs judged "
        "healthy (docs/preflight.md, \"Profiles\").",
        f"name = {_quote(name)}",
    ]
    for gpu in gpus:
        link = effective_link(gpu)
        lines += ["", "[[gpu]]", f"pci_address = {_quote(gpu.pci_address)}"]
        if link.speed_gts is not None and link.width is not None:
            lines += [f"speed_gts = {link.speed_gts:.1f}", f"width = {link.width}"]
        if gpu.socket is not None:
            lines.append(f"socket = {gpu.socket}")
    readings = [g.amdgpu.xgmi for g in gpus]
    if not any(r is not None for r in readings):
        for pair in report.proposed:
            lines += ["", "[[pair]]", f"gpus = [{_quote(pair.a)}, {_quote(pair.b)}]"]
    lines += _xgmi_lines(report)
    return "\n".join(lines) + "\n"


def _xgmi_lines(report: PreflightReport) -> list[str]:
    gpus = report.inventory.gpus
    xgmi = [g.amdgpu.xgmi for g in gpus if g.amdgpu.xgmi is not None]
    table: list[str] = []
    if xgmi:
        members = {len(r.members) for r in xgmi if r.members is not None}
        links = [n for r in xgmi for _peer, _hops, n in r.peers() if n is not None]
        if members:
            table.append(f"hive_members = {min(members)}")
        if links:
            table.append(f"links_per_peer = {min(links)}")
        for key, field in (("width", "xgmi_link_width"), ("speed_gts", "xgmi_link_speed_gts")):
            values = [getattr(g.amdgpu.gpu_metrics, field) for g in gpus
                      if g.amdgpu.gpu_metrics is not None]
            known = [v for v in values if isinstance(v, int)]
            if known:
                table.append(f"{key} = {min(known)}")
    for key, attr in (("compute_partition", "compute"), ("memory_partition", "memory")):
        modes = {getattr(g.amdgpu.partition, attr) for g in gpus if g.amdgpu.partition}
        modes.discard(None)
        if len(modes) == 1:
            table.append(f"{key} = {_quote(str(modes.pop()))}")
    return ["", "[xgmi]", *table] if table else []


def _quote(text: str) -> str:
    # PCI addresses, profile names and partition modes: no quote or backslash reaches here
    # unescaped (a TOML basic string)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
