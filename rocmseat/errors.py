"""The errors the library raises. Only rocmseat.cli turns them into output and exit codes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rocmseat import exitcodes


class RocmseatError(Exception):
    """An expected failure: one line for the user, an optional hint, an exit code."""

    exit_code: int = exitcodes.PROBLEM

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class ReadError(RocmseatError):
    """A file that should be readable was not (names the path and the OS reason)."""

    exit_code = exitcodes.CANNOT_CHECK

    def __init__(self, path: Path | str, cause: str, *, hint: str | None = None) -> None:
        super().__init__(f"{path}: {cause}", hint=hint)
        self.path = Path(path)
        self.cause = cause


class ParseError(RocmseatError):
    """Text that does not have the expected shape (names the path and quotes the text)."""

    exit_code = exitcodes.CANNOT_CHECK

    def __init__(self, path: Path | str, text: str, why: str) -> None:
        shown = text if len(text) <= 80 else text[:77] + "..."
        super().__init__(f"{path}: {why}: {shown!r}")
        self.path = Path(path)
        self.text = text
        self.why = why


class ConfigError(RocmseatError):
    """A seat file, profile or option that is wrong: names the file, the key and the line."""

    exit_code = exitcodes.CANNOT_CHECK


class NoDeviceError(RocmseatError):
    """Nothing to check: no AMD GPU, no HIP runtime."""

    exit_code = exitcodes.CANNOT_CHECK


class CommandError(RocmseatError):
    """A child program failed; the message carries its argv, return code and output tail."""

    def __init__(
        self, argv: Sequence[str], returncode: int, stdout: str = "", stderr: str = ""
    ) -> None:
        tail = (stderr or stdout).strip().splitlines()[-1:] or ["(no output)"]
        super().__init__(f"{argv[0]} exited {returncode}: {tail[0]}")
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
