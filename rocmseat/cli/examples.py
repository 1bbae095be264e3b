"""The examples every `--help` ends with: 2-4 real invocations per command, in one table.

The root group attaches them when it loads a command (rocmseat.cli.root.LazyGroup), so a
command's module need not carry them; tests/cli/test_help.py checks that every command has
them, that each names the command it is the help of, and that each flag exists there.
"""

from __future__ import annotations

import click

SEAT = "launchers/r9700-mxfp4-dflash.toml"
DEMO = "launchers/demo-cpu.toml"
BASE, SPEC = "launchers/demo-cpu-base.toml", "launchers/demo-cpu-spec.toml"

EXAMPLES: dict[str, tuple[str, ...]] = {
    "rocmseat": (
        "rocmseat preflight --problems",
        f"rocmseat launch {SEAT} --dry-run",
        f"rocmseat watch {SEAT} --once",
        f"rocmseat spec gate {BASE} {SPEC}",
    ),
    "rocmseat preflight": (
        "rocmseat preflight --problems",
        "rocmseat preflight --profile checks/x99-r9700.toml --sample 60",
        "rocmseat preflight --pair 05:00.0,09:00.0 --hip",
        "rocmseat preflight --format npd --cached --only pcie",
    ),
    "rocmseat key": (
        f"rocmseat key {SEAT} --replica r1",
        f"rocmseat key {DEMO} --explain",
    ),
    "rocmseat cache-audit": (
        "rocmseat cache-audit",
        f"rocmseat cache-audit {SEAT} --json",
        "rocmseat cache-audit --prune --older-than 30d --yes",
    ),
    "rocmseat launch": (
        f"rocmseat launch {SEAT} --dry-run",
        f"rocmseat launch {SEAT} --replica r0",
        f"rocmseat launch {DEMO} --replica r0 --preflight-only",
    ),
    "rocmseat systemd": (
        f"rocmseat systemd render {SEAT} --out units/",
        f"rocmseat systemd install {SEAT}",
    ),
    "rocmseat systemd render": (
        f"rocmseat systemd render {SEAT} --out units/",
        f"rocmseat systemd render {DEMO} --user rocmseat --out units/",
    ),
    "rocmseat systemd install": (
        f"rocmseat systemd install {SEAT}",
        f"rocmseat systemd install {DEMO} --root /tmp/root --force",
    ),
    "rocmseat watch": (
        f"rocmseat watch {SEAT}",
        f"rocmseat watch {DEMO} --once --json",
        "rocmseat watch --target r0=http://127.0.0.1:8000/metrics --interval 5",
        "rocmseat watch --targets-file /etc/prometheus/rocmseat-targets.yaml",
    ),
    "rocmseat spec": (
        f"rocmseat spec gate {BASE} {SPEC}",
        f"rocmseat spec advise {SPEC}",
    ),
    "rocmseat spec gate": (
        f"rocmseat spec gate {BASE} {SPEC}",
        "rocmseat spec gate base.toml spec.toml --verify-schedule --out gate/",
        "rocmseat spec gate base.toml base.toml --aa --repeats 5",
    ),
    "rocmseat spec advise": (
        f"rocmseat spec advise {SPEC}",
        f"rocmseat spec advise --from-gate gate/ --write {SPEC}",
        "rocmseat spec advise --target http://127.0.0.1:8000/metrics --window 60",
    ),
    "rocmseat demo": (
        "rocmseat demo models /tmp/rocmseat-models",
        "rocmseat demo spec-models /tmp/rocmseat-models --eps 0,0.5",
    ),
    "rocmseat demo models": (
        "rocmseat demo models /tmp/rocmseat-models",
        "rocmseat demo models /tmp/rocmseat-models --python venv/bin/python --force",
    ),
    "rocmseat demo gguf-models": (
        "rocmseat demo gguf-models /var/tmp/rocmseat-demo/gguf-models",
        "rocmseat demo gguf-models /tmp/gguf --llamacpp-python venv/bin/python",
    ),
    "rocmseat demo spec-models": (
        "rocmseat demo spec-models /tmp/rocmseat-models --eps 0,0.5,1",
        "rocmseat demo spec-models /tmp/rocmseat-models --acceptance 0.6,0.8",
    ),
    "rocmseat remediate": (
        f"rocmseat remediate status --seat {SEAT}",
        f"rocmseat remediate reset r1 --seat {SEAT}",
    ),
    "rocmseat remediate status": (
        f"rocmseat remediate status --seat {SEAT}",
        "rocmseat remediate status --json --last 20",
    ),
    "rocmseat remediate reset": (
        f"rocmseat remediate reset r1 --seat {SEAT}",
        "rocmseat remediate reset",
    ),
    "rocmseat slurm": (
        "rocmseat slurm health --dry-run",
        "rocmseat slurm health --max-age 600 --budget 50",
    ),
    "rocmseat slurm health": (
        "rocmseat slurm health --dry-run",
        "rocmseat slurm health --max-age 600 --budget 50",
        "rocmseat slurm health --hip --profile checks/x99-r9700.toml",
        "rocmseat slurm health --node gpu07 --drain-on-unknown",
    ),
}


def epilog(path: str) -> str | None:
    """The `Examples:` epilog of the command at `path` ("rocmseat spec gate"), or None."""
    lines = EXAMPLES.get(path)
    if not lines:
        return None
    # \b keeps click from rewrapping the lines (click's "Preventing Rewrapping")
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def attach(command: click.Command, path: str) -> None:
    """Give `command` and its subcommands their examples (a command's own epilog stays)."""
    if command.epilog is None:
        command.epilog = epilog(path)
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            attach(sub, f"{path} {name}")
