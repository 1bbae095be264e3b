"""Seat files for the gate's arms, and the `[drafter]` schedule edit of `spec advise --write`.

- `dump_toml(data)`: a TOML document from tomllib-shaped data (strings, integers, finite
  floats, booleans, arrays, tables), written by tomlkit like the edit below (one TOML writer);
  the gate writes each arm's seat with it.
- `edit_drafter_schedule(text, k, schedule)` (pure): only `num_speculative_tokens` and
  `num_speculative_tokens_per_batch_size` of `[drafter]` change, through tomlkit's
  style-preserving document: comments (those of the replaced lines too), order and layout of
  everything else stay, and the result is checked by parsing both.
- `write_drafter_schedule(path, ...)`: the one call of `--write` (docs/spec.md "--write"):
  the seat must load as a seat before and after the edit; a seat that is not a regular file,
  has other hard links or is read-only (unless told) is refused before anything is created;
  the lock lives beside the seat; the file keeps its owner, group and mode; a file that
  changed between the read and the rename (size, mtime, inode) is refused, nothing written.
"""

from __future__ import annotations

import copy
import difflib
import errno
import math
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions

from rocmseat.atomic import WriteRefused, exclusive_lock, file_identity, write_into
from rocmseat.errors import ConfigError
from rocmseat.safeio import file_kind, read_regular_text
from rocmseat.seat.load import SEAT_LIMIT_BYTES, parse_seat
from rocmseat.seat.model import Seat
from rocmseat.speculation.advise.schedule import Schedule
from rocmseat.text import printable
from rocmseat.tomlio import parse_toml


def _item(value: Any, where: str) -> Any:
    """`value` as tomlkit builds it; ConfigError for what a seat file cannot hold (a NaN or an
    infinity is valid TOML, `nan`/`inf`, but no seat key takes one: refused, never written)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: a non-finite number cannot be written to a seat file")
    if isinstance(value, Mapping):
        return {k: _item(v, f"{where}.{k}" if where else k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_item(v, where) for v in value]
    if value is None or not isinstance(value, str | int | float | bool):
        raise ConfigError(f"{where}: cannot write a {type(value).__name__} to a seat file")
    return value


def dump_toml(data: Mapping[str, Any], header: str = "") -> str:
    """A TOML document from tomllib-shaped data, written by tomlkit (tables as [headers], lists
    of tables as [[arrays of tables]], the header as leading comments)."""
    doc = tomlkit.document()
    for line in header.splitlines():
        doc.add(tomlkit.comment(line) if line else tomlkit.comment("").indent(0))
    if header:
        doc.add(tomlkit.nl())
    for key, value in _item(data, "").items():
        doc.add(key, value)
    return tomlkit.dumps(doc)


def _loads(text: str, where: str) -> dict[str, Any]:
    """The one TOML loader's parse (rocmseat.tomlio: every failure one located ConfigError; a
    seat handed to `--write` is hostile input like any other, docs/architecture.md)."""
    return parse_toml(text, where).data


def edit_drafter_schedule(text: str, where: str, k: int,
                          schedule: Sequence[Sequence[int]] | None) -> str:
    """Set [drafter] num_speculative_tokens = k and the per-batch-size schedule (None: remove
    it). ConfigError when the seat is not TOML, has no [drafter] table or the edit would
    change anything else. Every other byte stays, line ends included; a replaced value keeps
    its comment."""
    data = _loads(text, where)
    if not isinstance(data.get("drafter"), dict):
        raise ConfigError(f"{where}: no [drafter] table: nothing to schedule (a seat without a "
                          "drafter does not speculate)")
    if "num_speculative_tokens" not in data["drafter"]:
        raise ConfigError(f"{where}: [drafter] num_speculative_tokens not found; edit the seat "
                          "by hand")
    try:
        doc = tomlkit.parse(text)
        drafter = doc["drafter"]
        _replace(drafter, "num_speculative_tokens", tomlkit.item(k))
        key = "num_speculative_tokens_per_batch_size"
        if schedule is None:
            if key in drafter:
                del drafter[key]
        else:
            array = tomlkit.array()
            for entry in schedule:
                array.append([int(v) for v in entry])
            _replace(drafter, key, array)
        edited = tomlkit.dumps(doc)
    except (tomlkit.exceptions.TOMLKitError, AttributeError, KeyError, TypeError,
            ValueError) as exc:
        # tomllib read the file; a form tomlkit cannot edit (dotted keys across tables...)
        raise ConfigError(f"{where}: cannot edit [drafter] in this form "
                          f"({printable(str(exc), 200)}); edit the seat by hand") from None
    if "\r\n" in text:  # a CRLF file stays CRLF (tomlkit writes a new line with LF)
        edited = edited.replace("\r\n", "\n").replace("\n", "\r\n")
    if not text.endswith("\n"):  # and a file without a final newline stays without one
        edited = edited.rstrip("\r\n")
    _check_only_schedule_changed(data, _loads(edited, where), k, schedule, where)
    return edited


def _replace(table: Any, key: str, item: Any) -> None:
    """table[key] = item, the old value's comment kept (a note on why K is what it is)."""
    if key in table:
        old = table.item(key)
        trivia = getattr(old, "trivia", None)
        if trivia is not None and trivia.comment:
            item.trivia.comment_ws = trivia.comment_ws or "  "
            item.trivia.comment = trivia.comment
    table[key] = item


@dataclass(frozen=True, slots=True)
class SeatEdit:
    """What `write_drafter_schedule` did to a seat file."""

    path: Path  # the file written (a seat linked into place: the link's target)
    changed: bool
    diff: str  # unified diff of the seat, "" when nothing changed
    k_before: int | None
    schedule_before: Schedule | None


def write_drafter_schedule(path: Path, k: int, schedule: Schedule | None, *,
                           advised_up_to: int | None = None, read_only_ok: bool = False,
                           lock_timeout_s: float = 30.0) -> SeatEdit:
    """Write K and the schedule into the seat at `path` (module docstring). ConfigError naming
    the file on every refusal; the seat is left as it was."""
    shown = printable(str(path), 4096)
    try:
        return _write_schedule(path, shown, k, schedule, advised_up_to=advised_up_to,
                               read_only_ok=read_only_ok, lock_timeout_s=lock_timeout_s)
    except OSError as exc:  # the seat vanished or its directory went away meanwhile
        raise ConfigError(f"{shown}: {exc.strerror or type(exc).__name__}: not written"
                          ) from None


def _write_schedule(path: Path, shown: str, k: int, schedule: Schedule | None, *,
                    advised_up_to: int | None, read_only_ok: bool,
                    lock_timeout_s: float) -> SeatEdit:
    target = _seat_target(path, shown)
    info = os.stat(target)
    if info.st_nlink > 1:
        raise ConfigError(f"{shown}: has {info.st_nlink} hard links; a rewrite by rename would "
                          "split them (the other names keep the old seat): edit by hand, or "
                          "give a file with one link")
    if not read_only_ok and not info.st_mode & 0o222:
        raise ConfigError(f"{shown}: is read-only (mode {stat.S_IMODE(info.st_mode):04o}): "
                          "not written", hint="pass --write-read-only to write it anyway (the "
                                              "mode stays)")
    with exclusive_lock(target.parent / f".{target.name}.lock", timeout_s=lock_timeout_s):
        before = os.stat(target)
        text = read_regular_text(target, limit_bytes=SEAT_LIMIT_BYTES)
        if file_identity(os.stat(target)) != file_identity(before):
            raise ConfigError(f"{shown}: changed while it was read: not written; run again "
                              "once the other writer is done")
        seat = _loaded(text, path)
        if (advised_up_to is not None and seat.serve.max_num_seqs > advised_up_to):
            raise ConfigError(
                f"{shown}: serve.max_num_seqs = {seat.serve.max_num_seqs}, but the advice covers "
                f"batch sizes up to {advised_up_to}: its last tier would cover batch sizes "
                f"{advised_up_to + 1}-{seat.serve.max_num_seqs} that were never evaluated: not "
                "written", hint=f"advise with --max-num-seqs {seat.serve.max_num_seqs}, or gate "
                                "the seat at its own max_num_seqs")
        k_before, sched_before = ((seat.drafter.num_speculative_tokens,
                                   seat.drafter.num_speculative_tokens_per_batch_size)
                                  if seat.drafter else (None, None))
        edited = edit_drafter_schedule(text, shown, k, schedule)
        if edited == text:
            return SeatEdit(target, False, "", k_before, sched_before)
        try:
            parse_seat(edited, path)
        except ConfigError as exc:
            raise ConfigError(f"{shown}: the edited seat would not load ({exc.message}): not "
                              "written") from None
        try:
            write_into(target.parent, target.name, edited.encode("utf-8"),
                       mode=stat.S_IMODE(before.st_mode),
                       owner=(before.st_uid, before.st_gid),
                       unchanged=file_identity(before))
        except WriteRefused as exc:
            raise ConfigError(exc.message) from None
    # no context lines: the lines around [drafter] may be [env] values (tokens, keys), and only
    # the changed lines, which are the schedule's, reach output
    diff = "".join(difflib.unified_diff(text.splitlines(keepends=True),
                                        edited.splitlines(keepends=True),
                                        fromfile=f"{shown} (before)", tofile=shown, n=0))
    return SeatEdit(target, True, diff, k_before, sched_before)


def _loaded(text: str, path: Path) -> Seat:
    try:
        return parse_seat(text, path)
    except ConfigError as exc:
        raise ConfigError(f"{exc.message} (--write edits only a seat that loads)",
                          hint=exc.hint) from None


def current_drafter(path: Path) -> tuple[int | None, Schedule | None]:
    """The K and schedule the seat at `path` drafts with now ((None, None): no [drafter]), read
    with the editor's refusals (not a seat file, a link loop, a seat that does not load): what
    `--write` keeps at the batch sizes it does not write
    (rocmseat.speculation.advise.basis.write_plan)."""
    shown = printable(str(path), 4096)
    try:
        seat = _loaded(read_regular_text(_seat_target(path, shown),
                                         limit_bytes=SEAT_LIMIT_BYTES), path)
    except OSError as exc:
        raise ConfigError(f"{shown}: {exc.strerror or type(exc).__name__}: not written"
                          ) from None
    if seat.drafter is None:
        return None, None
    return seat.drafter.num_speculative_tokens, seat.drafter.num_speculative_tokens_per_batch_size


def _seat_target(path: Path, shown: str) -> Path:
    """The regular file behind `path` (a seat linked into place: its target), refused before
    any lock is created: `--write /dev/null` once created /dev/.null.lock."""
    try:
        target = path.resolve(strict=True)
    except FileNotFoundError:
        raise ConfigError(f"{shown}: does not exist") from None
    except RuntimeError:
        raise ConfigError(f"{shown}: is a symlink loop") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"{shown}: is a symlink loop") from None
        raise ConfigError(f"{shown}: {exc.strerror or type(exc).__name__}") from None
    except ValueError:
        raise ConfigError(f"{shown}: not a path (it holds a NUL character)") from None
    try:
        info = os.stat(target)
    except OSError as exc:
        raise ConfigError(f"{shown}: {exc.strerror or type(exc).__name__}") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{shown}: is {file_kind(info.st_mode)}, not a seat file: not written")
    return target


def _check_only_schedule_changed(before: dict[str, Any], after: dict[str, Any], k: int,
                                 schedule: Sequence[Sequence[int]] | None, where: str) -> None:
    # compared as tomllib values (dates and times included: a JSON round trip raised on them)
    expected = copy.deepcopy(before)
    expected["drafter"]["num_speculative_tokens"] = k
    if schedule is None:
        expected["drafter"].pop("num_speculative_tokens_per_batch_size", None)
    else:
        expected["drafter"]["num_speculative_tokens_per_batch_size"] = [list(e) for e in schedule]
    if after != expected:
        raise ConfigError(f"{where}: editing the [drafter] schedule would change other keys; "
                          "edit the seat by hand")
