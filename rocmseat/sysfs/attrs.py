"""Read one attribute and parse it, turning every failure into a one-line reason.

A reading keeps going when one file is bad: the caller stores the reason in its `errors` tuple
and the judge turns it into an `unknown` finding (never a 0, never a traceback).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rocmseat.errors import ParseError
from rocmseat.sysfs.fs import (
    AttrBytes,
    AttrValue,
    Unreadable,
    Unsupported,
    read_attr,
    read_attr_bytes,
)
from rocmseat.sysfs.parse import parse_free_text

T = TypeVar("T")


def read_parsed(
    path: Path | str, parser: Callable[[str, str], T]
) -> tuple[T | None, str | None]:
    """(value, None) on success; (None, None) when the file is absent; (None, reason) otherwise."""
    return _parsed(path, read_attr(path), parser)


def read_parsed_bytes(
    path: Path | str, parser: Callable[[bytes, str], T]
) -> tuple[T | None, str | None]:
    """read_parsed for a binary attribute (gpu_metrics): the parser takes the bytes."""
    return _parsed(path, read_attr_bytes(path), parser)


def _parsed(
    path: Path | str, raw: AttrValue | AttrBytes, parser: Callable[[Any, str], T]
) -> tuple[T | None, str | None]:
    if raw is None:
        return None, None
    if isinstance(raw, Unsupported):
        return None, f"{path}: not supported by the kernel ({raw.reason})"
    if isinstance(raw, Unreadable):
        return None, f"{path}: {raw.reason}"
    try:
        return parser(raw, str(path)), None
    except ParseError as exc:
        return None, exc.message


def read_text(path: Path | str) -> tuple[str | None, str | None]:
    """A free-text attribute (product_name, unique_id): stripped text, or the reason.

    The text reaches a terminal, JSON and the textfile: control characters (an escape sequence,
    a NUL, a second line) or bytes that are not UTF-8 make it unreadable, never shown.
    """
    return read_parsed(path, parse_free_text)


def errors_of(errors: tuple[str, ...], *names: str) -> list[str]:
    """The reasons (from read_parsed) about the attributes `names` of a reading's directory.

    A reason starts with the file's path, then ":N" for a line of a multi-line file, then ": ";
    match the file name, not a substring, so a sysfs root such as /tmp/vendor_link_test cannot
    make every reason look like a link reason.
    """
    wanted = set(names)
    out = []
    for error in errors:
        path = error.split(": ", 1)[0]
        name = path.rsplit("/", 1)[-1].split(":", 1)[0]
        if name in wanted:
            out.append(error)
    return out


def first_of(reasons: list[str] | tuple[str, ...]) -> str:
    """The first reason, and how many more: "<reason> (and 2 more)"."""
    more = f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""
    return f"{reasons[0]}{more}"


def resolve_link(path: Path) -> tuple[Path | None, str | None]:
    """Follow a sysfs symlink (`class/drm/card1/device`) to its real directory."""
    try:
        if not path.is_symlink() and not path.exists():
            return None, f"{path}: missing"
        target = path.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        return None, f"{path}: {getattr(exc, 'strerror', None) or exc}"
    return target, None


class Collector:
    """Reads attributes of one directory, collecting the reasons of the ones that failed."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # the attribute paths as strings: a run reads thousands, and a Path join per file was a
        # tenth of preflight's time on a 16-GPU node (bench/bench_preflight.py)
        self._prefix = f"{directory}{os.sep}"
        self.errors: list[str] = []

    def get(self, name: str, parser: Callable[[str, str], T]) -> T | None:
        value, error = read_parsed(self._prefix + name, parser)
        if error:
            self.errors.append(error)
        return value

    def get_bytes(self, name: str, parser: Callable[[bytes, str], T]) -> T | None:
        value, error = read_parsed_bytes(self._prefix + name, parser)
        if error:
            self.errors.append(error)
        return value

    def get_pm(
        self, name: str, parser: Callable[[Any, str], T], *, binary: bool = False
    ) -> tuple[T | None, bool]:
        """An amdgpu power-management getter (amdgpu_pm.c): (value, denied). `denied`: the read
        failed with EPERM, what amdgpu_pm_get_access_if_active() answers while the GPU is
        runtime-suspended (or in reset, or system suspend) instead of waking it; that is not a
        read error (nothing is added to `errors`)."""
        path = self._prefix + name
        raw = read_attr_bytes(path) if binary else read_attr(path)
        if isinstance(raw, Unreadable) and raw.errno == errno.EPERM:
            return None, True
        value, error = _parsed(path, raw, parser)
        if error:
            self.errors.append(error)
        return value, False

    def text(self, name: str) -> str | None:
        value, error = read_text(self._prefix + name)
        if error:
            self.errors.append(error)
        return value or None
