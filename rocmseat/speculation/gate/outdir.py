"""The `--out` directory of `rocmseat spec gate`: created with one-line errors, and owned by
one run (docs/spec.md "The gate directory").

A run takes a directory that is new, empty, or holds a finished gate of the same two seats (a
gate run again in place); anything else is refused before a file is written, so an older
run's documents never pass for this run's. The run's identity (`run_id`) is in gate.json and
in every arm.json it writes; the advisor refuses an arm record of another run.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from rocmseat.errors import ConfigError, ReadError
from rocmseat.safeio import file_kind, read_regular_text
from rocmseat.speculation.documents import DocumentError, load_document
from rocmseat.text import printable

GATE_SCHEMA = "rocmseat.gate/v1"
LOCK_NAME = ".gate.lock"
DOC_LIMIT_BYTES = 64 << 20


def prepare_out(out: Path) -> Path:
    """`out` as an absolute directory, created when absent; ConfigError naming it otherwise
    (`--out /dev/null`, `/etc/passwd/sub`, `/proc/x` were tracebacks)."""
    out = out.absolute()
    shown = printable(str(out), 4096)
    try:
        info = os.stat(out)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise ConfigError(f"--out {shown}: {exc.strerror or type(exc).__name__}") from None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"--out {shown}: is {file_kind(info.st_mode)}, not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {shown}: cannot create the directory: "
                          f"{exc.strerror or type(exc).__name__}") from None
    return out


def claim_out(out: Path, base_seat: Path, candidate_seat: Path) -> None:
    """Refuse an `out` that holds anything but a finished gate of these two seats."""
    shown = printable(str(out), 4096)
    try:
        entries = sorted(name for name in os.listdir(out) if name != LOCK_NAME)
    except OSError as exc:
        raise ConfigError(f"--out {shown}: {exc.strerror or type(exc).__name__}") from None
    if not entries:
        return
    why = _not_a_finished_gate(out, base_seat, candidate_seat)
    if why is not None:
        listed = ", ".join(printable(name, 80) for name in entries[:3]) + (
            ", ..." if len(entries) > 3 else "")
        raise ConfigError(f"--out {shown}: holds {listed}, {why}: a gate run owns its "
                          "directory", hint="give a new or empty directory (or remove this one)")


def _not_a_finished_gate(out: Path, base_seat: Path, candidate_seat: Path) -> str | None:
    try:
        doc = load_document(read_regular_text(out / "gate.json", limit_bytes=DOC_LIMIT_BYTES))
    except ReadError as exc:
        return f"and its gate.json cannot be read ({printable(exc.cause, 200)})"
    except DocumentError:
        return "and its gate.json is not JSON"
    if not isinstance(doc, dict) or doc.get("schema") != GATE_SCHEMA:
        return f"and its gate.json is not a {GATE_SCHEMA} document"
    if doc.get("error") is not None:
        return "and the gate there did not finish"
    if not (_same(doc.get("base_seat"), base_seat)
            and _same(doc.get("candidate_seat"), candidate_seat)):
        return "a gate of other seats"
    return None


def _same(recorded: object, given: Path) -> bool:
    """The seat a gate recorded is the one given (as written, or the same file)."""
    if not isinstance(recorded, str):
        return False
    if recorded == str(given):
        return True
    try:
        return Path(recorded).resolve() == given.resolve()
    except (OSError, RuntimeError, ValueError):
        return False
