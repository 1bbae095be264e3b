"""The hostile batteries of the speculation room (issue 18, "Must show"): gate directories and
seat edits, seeded and bounded.

- Gate directories: the recorded CPU gate (tests/fixtures/spec/gate-cpu-deep), 1-3 random
  mutations per round: a value of gate.json, an arm.json or a result file replaced by a
  hostile one (null, booleans, negative, 1e308, 1e-300, a 400-digit integer, NUL and C1
  control characters, paths that lead out, deep nesting, huge strings, NaN), a key removed, a
  file truncated, emptied, flipped to non-UTF-8, replaced by a FIFO, a directory, a symlink
  out or a symlink loop, and links, FIFOs or directories planted at advise.png. Then
  `spec advise --from-gate DIR --json` in-process through the real error boundary.
- Seat edits: the seat battery's mutants (tests/seat/test_hostile_battery.py), each written as
  a seat in one of several file forms (plain, CRLF, no final newline, read-only, hard-linked,
  linked into place, a symlink loop, a FIFO), then `write_drafter_schedule` with a random
  K and schedule.

Never exit 3, never a traceback, never a hang (a per-call alarm), never a write outside the
directory (a sentinel file outside is checked, and the directory tree around it), never a
byte of a file outside in the output; a seat edit either loads as a seat with only the
[drafter] schedule changed and its mode kept, or leaves the file byte for byte.

ROCMSEAT_SPEC_HOSTILE_ROUNDS (default 20 each, 60 under ROCMSEAT_FULL_BATTERIES=1) and
ROCMSEAT_HOSTILE_SEED set the size and the seed; bench/bench_hostile_spec.py runs the long
version through the same classes.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rocmseat.errors import ConfigError
from rocmseat.seat.load import parse_seat
from rocmseat.speculation.advise.seatedit import write_drafter_schedule
from tests.conftest import FIXTURES, CliResult, battery_rounds
from tests.seat.test_hostile import dumps
from tests.seat.test_hostile_battery import Battery as SeatBattery
from tests.seat.test_hostile_battery import deadline

SEED = int(os.environ.get("ROCMSEAT_HOSTILE_SEED", "20261201"))
ROUNDS = battery_rounds(20, 60, "ROCMSEAT_SPEC_HOSTILE_ROUNDS")
CALL_DEADLINE_S = 60
GATE = FIXTURES / "spec" / "gate-cpu-deep"
SECRET = "root:x:0:0:sentinel-outside"

HOSTILE_VALUES: list[Any] = [
    None, True, False, -1, 0, 1e308, -1e308, 1e-300, 2**63, "x", "", "\u0000", "a\u009bb",
    "../../../../etc/passwd", "/etc/passwd", [], {}, [[[[[[[[[[1]]]]]]]]]], "y" * 100_000,
    [1, 2, 3], {"a": 1}, 3.5, "decode", "candidate",
]


def json_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path of a JSON value (lists: their first 20 items)."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += json_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:20]):
            out += json_paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        doc = doc[part]
    doc[path[-1]] = value


def _remove(doc: Any, path: tuple[Any, ...]) -> None:
    for part in path[:-1]:
        doc = doc[part]
    if isinstance(doc, dict):
        doc.pop(path[-1], None)
    else:
        doc.pop(path[-1])


@dataclass
class _Rounds:
    """What both batteries keep: where they work, their random source, the counts of
    outcomes and of what was done, and the failures (each with its round, to reproduce it)."""

    workdir: Path
    cli: Callable[..., CliResult]
    seed: int = SEED
    counts: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def run(self, rounds: int) -> None:
        raise NotImplementedError

    def summary(self) -> str:
        raise NotImplementedError


@dataclass
class GateBattery(_Rounds):
    """Mutated gate directories against `spec advise --from-gate`."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.outside = self.workdir / "outside"
        self.outside.mkdir(parents=True, exist_ok=True)
        self.sentinel = self.outside / "notes.txt"
        self.sentinel.write_text(SECRET + "\n")

    def _json_files(self, gate: Path) -> list[Path]:
        return sorted(p for p in gate.rglob("*.json") if p.is_file() and not p.is_symlink())

    def mutate(self, gate: Path) -> list[str]:
        done = []
        for _ in range(self.rng.choice([1, 1, 2, 3])):
            files = self._json_files(gate)
            if not files:
                break
            target = self.rng.choice(files)
            how = self.rng.choice(["value", "value", "value", "remove", "text", "file", "plant"])
            self.kinds[how] += 1
            rel = target.relative_to(gate)
            if how in ("value", "remove"):
                doc = json.loads(target.read_text())
                paths = json_paths(doc)
                if not paths:
                    continue
                path = self.rng.choice(paths)
                if how == "value":
                    value = self.rng.choice(HOSTILE_VALUES)
                    _set(doc, path, value)
                    done.append(f"{rel}:{'.'.join(map(str, path))}={str(value)[:30]!r}")
                else:
                    _remove(doc, path)
                    done.append(f"{rel}: removed {'.'.join(map(str, path))}")
                text = json.dumps(doc)
                if self.rng.random() < 0.2:  # integers Python writes but no float holds
                    text = text.replace("206.0", "9" * 400, 1)
                target.write_text(text)
            elif how == "text":
                data = target.read_bytes()
                choice = self.rng.choice(["truncate", "empty", "latin1", "nan", "nul"])
                if choice == "truncate":
                    data = data[: self.rng.randrange(len(data) + 1)]
                elif choice == "empty":
                    data = b""
                elif choice == "latin1":
                    data = data[:10] + b"\xff\xfe" + data[10:]
                elif choice == "nan":
                    data = data.replace(b"0.0", b"NaN", 1)
                else:
                    data = data.replace(b'"', b'"\\u0000', 1)
                target.write_bytes(data)
                done.append(f"{rel}: {choice}")
            elif how == "file":
                choice = self.rng.choice(["fifo", "dir", "link-out", "loop"])
                target.unlink()
                if choice == "fifo":
                    os.mkfifo(target)
                elif choice == "dir":
                    target.mkdir()
                elif choice == "link-out":
                    target.symlink_to(self.sentinel)
                else:
                    target.symlink_to(target.name)
                done.append(f"{rel}: {choice}")
            else:
                png = gate / "advise.png"
                if png.exists() or png.is_symlink():
                    continue
                choice = self.rng.choice(["link-out", "fifo", "dir", "loop"])
                if choice == "link-out":
                    png.symlink_to(self.sentinel)
                elif choice == "fifo":
                    os.mkfifo(png)
                elif choice == "dir":
                    png.mkdir()
                else:
                    png.symlink_to("advise.png")
                done.append(f"advise.png: {choice}")
        return done

    def run(self, rounds: int) -> None:
        for index in range(rounds):
            gate = self.workdir / f"g{index % 4}"
            if gate.exists():
                shutil.rmtree(gate)
            shutil.copytree(GATE, gate)
            what = "; ".join(self.mutate(gate)) or "(unchanged)"
            outside_before = sorted(p.name for p in self.outside.iterdir())
            try:
                with deadline(CALL_DEADLINE_S):
                    result = self.cli("spec", "advise", "--from-gate", str(gate), "--json")
            except BaseException as exc:
                self.failures.append(f"round {index} [{what}]: raised {type(exc).__name__}: "
                                     f"{exc!s:.200}")
                continue
            self.counts[f"exit {result.exit_code}"] += 1
            out = result.stdout + result.stderr
            if result.exit_code not in (0, 1, 2) or "Traceback" in out:
                self.failures.append(f"round {index} [{what}]: exit {result.exit_code}: "
                                     f"{result.stderr[-300:]}")
            if result.exit_code == 2 and len(result.stderr.splitlines()) > 2:
                self.failures.append(f"round {index} [{what}]: more than one line (and a "
                                     f"hint): {result.stderr[:300]}")
            if SECRET in out:
                self.failures.append(f"round {index} [{what}]: a byte of a file outside")
            if self.sentinel.read_bytes() != (SECRET + "\n").encode() or sorted(
                    p.name for p in self.outside.iterdir()) != outside_before:
                self.failures.append(f"round {index} [{what}]: wrote outside the gate dir")
                self.sentinel.write_text(SECRET + "\n")
        self.counts["rounds"] = rounds

    def summary(self) -> str:
        return (f"gate directories, seed {self.seed}: {self.counts['rounds']} rounds, "
                + ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()) if k != "rounds")
                + f"; mutations {dict(sorted(self.kinds.items()))}; "
                  f"{len(self.failures)} failures")


FORMS = ["plain", "plain", "crlf", "no-final-newline", "read-only", "hard-link", "linked",
         "loop", "fifo", "told-read-only"]


@dataclass
class SeatEditBattery(_Rounds):
    """The seat battery's mutants, in hostile file forms, against write_drafter_schedule."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.seats = SeatBattery(self.workdir / "seat-battery", self.cli, seed=self.seed)

    def _schedule(self) -> tuple[int, tuple[tuple[int, int, int], ...] | None]:
        k = self.rng.randint(1, 8)
        if self.rng.random() < 0.3:
            return k, None
        cut = self.rng.randint(1, 63)
        return k, ((1, cut, k), (cut + 1, self.rng.choice([64, 256, 1024]), 0))

    def run(self, rounds: int) -> None:
        for index in range(rounds):
            if self.rng.random() < 0.5:
                text, what = self.seats.mutant(index)
            else:  # a seat that loads: the edit's own checks are exercised
                text, what = dumps(self.rng.choice(self.seats.bases)), "a shipped seat"
            directory = self.workdir / f"s{index}"
            directory.mkdir()
            form = self.rng.choice(FORMS)
            self.kinds[form] += 1
            seat = directory / "seat.toml"
            data = text.encode("utf-8", errors="surrogatepass")
            if form == "crlf":
                data = data.replace(b"\n", b"\r\n")
            elif form == "no-final-newline":
                data = data.rstrip(b"\n")
            seat.write_bytes(data)
            path = seat
            if form in ("read-only", "told-read-only"):
                os.chmod(seat, 0o444)
            elif form == "hard-link":
                os.link(seat, directory / "other.toml")
            elif form == "linked":
                (self.workdir / f"link{index}.toml").symlink_to(seat)
                path = self.workdir / f"link{index}.toml"
            elif form == "loop":
                path = directory / "loop.toml"
                path.symlink_to("loop.toml")
            elif form == "fifo":
                seat.unlink()
                os.mkfifo(seat)
            before_mode = None if form == "fifo" else stat.S_IMODE(seat.stat().st_mode)
            listing = sorted(p.name for p in self.workdir.iterdir())
            k, schedule = self._schedule()
            label = f"round {index} [{form}; {what}]"
            try:
                with deadline(CALL_DEADLINE_S):
                    edit = write_drafter_schedule(path, k, schedule,
                                                  advised_up_to=self.rng.choice([None, 16, 4096]),
                                                  read_only_ok=form == "told-read-only")
            except ConfigError as exc:
                self.counts["refused"] += 1
                if "\n" in exc.message:
                    self.failures.append(f"{label}: error of more than one line")
                if form != "fifo" and seat.read_bytes() != data:
                    self.failures.append(f"{label}: refused, but the file changed")
            except BaseException as exc:
                self.failures.append(f"{label}: raised {type(exc).__name__}: {exc!s:.200}")
            else:
                self.counts["edited" if edit.changed else "unchanged"] += 1
                self._check_edit(label, seat, data, k, schedule, before_mode, form)
            stray = [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]
            if stray:
                self.failures.append(f"{label}: temp files left: {stray}")
            if sorted(p.name for p in self.workdir.iterdir()) != listing:
                self.failures.append(f"{label}: a file appeared outside the seat's directory")
        self.counts["rounds"] = rounds

    def _check_edit(self, label: str, seat: Path, data: bytes, k: int,
                    schedule: Any, before_mode: int | None, form: str) -> None:
        if form in ("hard-link", "read-only", "loop", "fifo"):
            self.failures.append(f"{label}: a {form} seat was written")
        after = seat.read_bytes()
        try:
            parse_seat(after.decode("utf-8"), seat)
        except ConfigError as exc:
            self.failures.append(f"{label}: the written seat does not load: {exc.message[:200]}")
            return
        old, new = tomllib.loads(data.decode("utf-8")), tomllib.loads(after.decode("utf-8"))
        old["drafter"]["num_speculative_tokens"] = k
        old["drafter"].pop("num_speculative_tokens_per_batch_size", None)
        if schedule is not None:
            old["drafter"]["num_speculative_tokens_per_batch_size"] = [list(e) for e in schedule]
        if json.dumps(old, default=str, sort_keys=True) != json.dumps(new, default=str,
                                                                      sort_keys=True):
            self.failures.append(f"{label}: the edit changed more than the schedule")
        if stat.S_IMODE(seat.stat().st_mode) != before_mode:
            self.failures.append(f"{label}: the mode changed")
        if form == "crlf" and after.count(b"\n") != after.count(b"\r\n"):
            self.failures.append(f"{label}: a CRLF seat got LF lines")

    def summary(self) -> str:
        c = self.counts
        return (f"seat edits, seed {self.seed}: {c['rounds']} rounds, {c['edited']} edited, "
                f"{c['unchanged']} unchanged, {c['refused']} refused; forms "
                f"{dict(sorted(self.kinds.items()))}; {len(self.failures)} failures")


def _run(battery: _Rounds, capsys: pytest.CaptureFixture[str]) -> Counter[str]:
    battery.run(ROUNDS)
    with capsys.disabled():
        print("\n" + battery.summary())
    assert battery.failures == [], "\n".join(battery.failures[:20])
    return battery.counts


def test_hostile_gate_directory_battery(tmp_path, rocmseat_cli, capsys):
    counts = _run(GateBattery(tmp_path, rocmseat_cli), capsys)
    # the battery reached both ends: refusals and advice
    assert counts["exit 2"] > 0 and counts["exit 1"] + counts["exit 0"] > 0


def test_hostile_seat_edit_battery(tmp_path, rocmseat_cli, capsys):
    counts = _run(SeatEditBattery(tmp_path, rocmseat_cli), capsys)
    assert counts["refused"] > 0 and counts["edited"] > 0


def test_the_batteries_are_reproducible(tmp_path, rocmseat_cli):
    a = GateBattery(tmp_path / "a", rocmseat_cli, seed=5)
    b = GateBattery(tmp_path / "b", rocmseat_cli, seed=5)
    for battery in (a, b):
        shutil.copytree(GATE, battery.workdir / "g")
    assert a.mutate(a.workdir / "g") == b.mutate(b.workdir / "g")
