"""Render replica plans for `rocmseat launch --dry-run` (pure: plans in, text or JSON out).

Both renderings leave the process: secret-bearing flag values and credential-looking environment
values are redacted (rocmseat.redact)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from rocmseat.launch.plan import ReplicaPlan
from rocmseat.redact import redact_argv, redact_env
from rocmseat.seat.model import Seat

PLAN_SCHEMA = "rocmseat.launch-plan/v1"


def plan_json(seat: Seat, plans: Sequence[ReplicaPlan]) -> dict[str, Any]:
    return {
        "schema": PLAN_SCHEMA,
        "seat": seat.name,
        "seat_file": str(seat.source_path) if seat.source_path else None,
        "backend": seat.backend,
        "tp": seat.tp,
        "readiness_timeout_s": seat.readiness.timeout_s,
        "replicas": [p.to_json() for p in plans],
    }


def argv_lines(argv: Sequence[str]) -> list[str]:
    """One flag with its value per line, shell-quoted (for reading; it runs as an argv list)."""
    lines: list[str] = []
    index = 0
    while index < len(argv):
        arg = argv[index]
        takes_next = arg.startswith("-") and "=" not in arg and index + 1 < len(argv)
        if takes_next and not argv[index + 1].startswith("-"):
            lines.append(f"{shlex.quote(arg)} {shlex.quote(argv[index + 1])}")
            index += 2
            continue
        if lines and not arg.startswith("-") and not lines[-1].startswith("-"):
            lines[-1] += " " + shlex.quote(arg)
        else:
            lines.append(shlex.quote(arg))
        index += 1
    return lines


def plan_text(seat: Seat, plans: Sequence[ReplicaPlan]) -> str:
    out = [f"seat {seat.name} (backend {seat.backend}, tp {seat.tp}, {len(plans)} replica"
           f"{'s' if len(plans) != 1 else ''}) from {seat.source_path}"]
    for plan in plans:
        out.append("")
        out.append(f"replica {plan.replica}")
        if plan.pci_pair and plan.hip_indices is not None:
            indices = ",".join(str(i) for i in plan.hip_indices)
            inside = plan.env.get("HIP_VISIBLE_DEVICES")
            where = (f"; {inside} in the container, its only GPUs"
                     if seat.engine.runtime != "host" and inside != indices else "")
            out.append(f"  gpus        {{{', '.join(plan.pci_pair)}}} -> HIP_VISIBLE_DEVICES="
                       f"{indices} ({plan.placement.hip_note}{where})")
        elif plan.pci_pair:
            out.append(f"  gpus        {{{', '.join(plan.pci_pair)}}} -> HIP_VISIBLE_DEVICES "
                       f"unknown: {plan.placement.hip_note} (launch refuses to start it)")
        else:
            out.append("  gpus        none (backend cpu)")
        if plan.placement.lost:
            out.append(f"  refused     {plan.placement.lost} (launch refuses to start it)")
        b = plan.binding
        if b.numa_node is None:
            out.append(f"  numa        not bound: {b.note}")
        else:
            cpus = f" (cpus {b.cpulist})" if b.cpulist else ""
            out.append(f"  numa        bound to node {b.numa_node}{cpus} by {b.method}: {b.note}")
        out.append(f"  listen      {plan.host}:{plan.port} (probe {plan.probe_url}/health "
                   "+ canary)")
        out.append(f"  cache       {plan.cache_dir}")
        out.append(f"  state       {plan.placement.state_dir}")
        key = plan.key.digest or plan.key.reason or "unknown"
        out.append(f"  config key  {key}")
        out.append("  env")
        out.extend(f"    {name}={shlex.quote(value)}"
                   for name, value in sorted(redact_env(plan.env).items()))
        out.append("  argv")
        lines = argv_lines(redact_argv(plan.argv))
        out.extend("    " + line + (" \\" if i < len(lines) - 1 else "")
                   for i, line in enumerate(lines))
    return "\n".join(out) + "\n"
