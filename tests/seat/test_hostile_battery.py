"""The hostile battery of seat files (issue 11, "Must show"): a seeded, bounded regression.

Start from the shipped seats, apply random mutations (control characters in every string and
key, non-finite and huge numbers, wrong types, deep nesting, huge strings, dates, unknown and
removed keys, hostile hosts and paths, broken TOML text ...), then run `load_seat` and every
command that reads a seat: `rocmseat key`, `launch --dry-run` and `systemd render` into a temp
dir, in-process through the real error boundary. Never exit 3, never a traceback, never a hang
(a per-call alarm), and no rendered unit holds a control character.

The unit tier runs ROUNDS mutations (100; 300 under ROCMSEAT_FULL_BATTERIES=1;
ROCMSEAT_HOSTILE_ROUNDS sets it) from SEED (ROCMSEAT_HOSTILE_SEED); bench/bench_hostile_seats.py
runs the long version through the same `Battery`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import os
import random
import re
import signal
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rocmseat.errors import ConfigError
from rocmseat.seat.load import load_seat
from tests.conftest import REPO, CliResult, battery_rounds, write_fake_engine_python
from tests.seat.test_hostile import dumps

SEED = int(os.environ.get("ROCMSEAT_HOSTILE_SEED", "20261130"))
ROUNDS = battery_rounds(100, 300, "ROCMSEAT_HOSTILE_ROUNDS")
CALL_DEADLINE_S = 60
SHIPPED = [REPO / "launchers" / "demo-cpu.toml", REPO / "launchers" / "r9700-mxfp4-dflash.toml"]
X99 = REPO / "tests" / "fixtures" / "sysfs" / "x99-r9700"
# What may not appear in a unit file: every control character but LF (the line end).
UNIT_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")
CONTROLS = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)]
HOSTS = ["127.0.0.1@evil.example/#", "evil.example/x?", "[::1]", "", "a b", "::1", "0.0.0.0",
         "x" * 300, "localhost:8000", "http://h", "fe80::1%eth0", "..", "ünïcode.example"]
PATHS = ["", " ", "/", "/..", "~nosuchuser-rocmseat/x", "relative/dir", "/x/" + "y" * 300,
         "/tmp/$HOME/%n", "/srv/ok dir", "-leading-dash"]
NUMBERS: list[Any] = [float("inf"), float("-inf"), float("nan"), 1e308, 1e-300, 0, -1, 0.0,
                      2**31, 2**63 - 1, 2**63, -(2**70), 65536, 4.5]
DATES: list[Any] = [dt.datetime(1979, 5, 27, 7, 32, tzinfo=dt.UTC), dt.date(1979, 5, 27),
                    dt.time(7, 32), dt.datetime(2026, 1, 1)]


# ----- mutations ------------------------------------------------------------------------------
Slot = tuple[Any, Any]  # (container, key or index)


def slots(doc: Any) -> list[Slot]:
    """Every (container, key) of the document, containers included, depth first."""
    out: list[Slot] = []
    stack: list[Any] = [doc]
    while stack:
        node = stack.pop()
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            out.append((node, key))
            if isinstance(value, dict | list):
                stack.append(value)
    return out


def _of_type(rng: random.Random, kinds: tuple[type, ...]) -> Callable[[Slot], bool]:
    return lambda s: isinstance(s[0][s[1]], kinds) and not isinstance(s[0][s[1]], bool)


def _pick(rng: random.Random, doc: Any, want: Callable[[Slot], bool] | None = None) -> Slot | None:
    found = [s for s in slots(doc) if want is None or want(s)]
    return rng.choice(found) if found else None


def _table(doc: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The table `name` (created when absent), or None when a mutation made it something else."""
    value = doc.setdefault(name, {})
    return value if isinstance(value, dict) else None


def _nested(rng: random.Random, depth: int) -> Any:
    value: Any = rng.choice([1, "x", 1.5, True])
    for _ in range(depth):
        value = [value] if rng.random() < 0.5 else {"k": value}
    return value


def m_control_in_string(rng: random.Random, doc: Any) -> str:
    slot = _pick(rng, doc, _of_type(rng, (str,)))
    if slot is None:
        return "no string"
    holder, key = slot
    text = holder[key]
    char = rng.choice(CONTROLS)
    at = rng.randint(0, len(text))
    holder[key] = text[:at] + char + text[at:]
    return f"control U+{ord(char):04X} into a string"


def m_control_in_key(rng: random.Random, doc: Any) -> str:
    tables = [s for s in slots(doc) if isinstance(s[0][s[1]], dict)] + [(None, None)]
    holder, key = rng.choice(tables)
    table = doc if holder is None else holder[key]
    char = rng.choice(CONTROLS)
    table[f"K{char}Y"] = "1"
    return f"control U+{ord(char):04X} in a key name"


def m_number(rng: random.Random, doc: Any) -> str:
    slot = _pick(rng, doc, _of_type(rng, (int, float)))
    if slot is None:
        return "no number"
    value = rng.choice(NUMBERS)
    slot[0][slot[1]] = value
    return f"number -> {value!r}"


def m_wrong_type(rng: random.Random, doc: Any) -> str:
    slot = _pick(rng, doc)
    if slot is None:
        return "empty"
    value = rng.choice(["text", 7, 2.5, True, [], ["a", 1], {}, {"k": "v"}, *DATES])
    slot[0][slot[1]] = value
    return f"wrong type -> {type(value).__name__}"


def m_deep(rng: random.Random, doc: Any) -> str:
    slot = _pick(rng, doc)
    depth = rng.choice([12, 17, 40, 120])
    if slot is None:
        return "empty"
    slot[0][slot[1]] = _nested(rng, depth)
    return f"nested {depth} deep"


def m_huge_string(rng: random.Random, doc: Any) -> str:
    slot = _pick(rng, doc, _of_type(rng, (str,)))
    size = rng.choice([4097, 70_000, 300_000])
    if slot is None:
        return "no string"
    slot[0][slot[1]] = "x" * size
    return f"string of {size}"


def m_date(rng: random.Random, doc: Any) -> str:
    value = rng.choice(DATES)
    if "drafter" in doc and isinstance(doc["drafter"], dict) and rng.random() < 0.6:
        extra = doc["drafter"].setdefault("extra", {})
        if isinstance(extra, dict):
            extra[rng.choice(["when", "draft_tensor_parallel_size", "x"])] = value
            return f"{type(value).__name__} in [drafter] extra"
    slot = _pick(rng, doc)
    if slot is not None:
        slot[0][slot[1]] = value
    return f"{type(value).__name__} somewhere"


def m_unknown_key(rng: random.Random, doc: Any) -> str:
    tables = [doc] + [s[0][s[1]] for s in slots(doc) if isinstance(s[0][s[1]], dict)]
    rng.choice(tables)[rng.choice(["bogus", "tmeout_s", "mdoe", "VLLM_NEW_THING", "a-b"])] = "1"
    return "unknown key"


def m_remove_key(rng: random.Random, doc: Any) -> str:
    slot = _pick(rng, doc, lambda s: isinstance(s[0], dict))
    if slot is None:
        return "empty"
    del slot[0][slot[1]]
    return f"removed {slot[1]!r}"


def m_empty_string(rng: random.Random, doc: Any) -> str:
    slot = _pick(rng, doc, _of_type(rng, (str,)))
    if slot is not None:
        slot[0][slot[1]] = ""
    return "empty string"


def m_host(rng: random.Random, doc: Any) -> str:
    host = rng.choice(HOSTS)
    if isinstance(doc.get("engine"), dict):
        doc["engine"]["host"] = host
    return f"host {host[:20]!r}"


def m_path(rng: random.Random, doc: Any) -> str:
    path = rng.choice(PATHS)
    where = rng.choice([("cache_root",), ("state_dir",), ("engine", "python"), ("model", "path"),
                        ("drafter", "path"), ("preflight", "profile")])
    holder = doc
    for part in where[:-1]:
        holder = holder.get(part) if isinstance(holder, dict) else None
    if isinstance(holder, dict):
        holder[where[-1]] = path
    return f"path {'.'.join(where)} = {path[:20]!r}"


def m_long_list(rng: random.Random, doc: Any) -> str:
    count = rng.choice([100, 4097])
    if isinstance(doc.get("serve"), dict):
        doc["serve"]["extra_args"] = ["--x"] * count
    return f"extra_args of {count}"


def m_json_arg(rng: random.Random, doc: Any) -> str:
    depth = rng.choice([10, 17, 3000])
    flag = rng.choice(["-cc", "--compilation-config", "-sc", "--speculative-config"])
    if (serve := _table(doc, "serve")) is not None:
        serve["extra_args"] = [flag, '{"a": ' + "[" * depth + "]" * depth + "}"]
    return f"{flag} JSON nested {depth}"


def m_listen(rng: random.Random, doc: Any) -> str:
    value = rng.choice(["127.0.0.1:²", "127.0.0.1:99999", "[::1]:9464", "::1:9464", "off",
                        "h:0", "127.0.0.1:8000", "a@b:1", "x"])
    if (watch := _table(doc, "watch")) is not None:
        watch["exporter_listen"] = value
    return f"exporter_listen {value!r}"


def m_names(rng: random.Random, doc: Any) -> str:
    value = rng.choice([["r0", "r0"], ["R0"], ["a" * 40], [""], ["r0", "r1", "r2"], ["-x"]])
    if (replicas := _table(doc, "replicas")) is not None:
        replicas["names"] = value
    return f"names {value!r}"[:60]


def m_pairs(rng: random.Random, doc: Any) -> str:
    value = rng.choice([[["0000:05:00.0", "0000:09:00.0"]], [["05:00.0", "x"]],
                        [["0000:05:00.0", "0000:05:00.0"]], [["0000:ff:00.0", "0000:fe:00.0"]]])
    if (replicas := _table(doc, "replicas")) is not None:
        replicas.update(mode="explicit", pairs=value)
        replicas.pop("names", None)
    return f"pairs {value!r}"[:60]


# Variations a seat may well have: the commands must handle them, not merely refuse them.
def b_valid_numbers(rng: random.Random, doc: Any) -> str:
    doc.setdefault("readiness", {})["timeout_s"] = rng.choice([1, 0.5, 86400, 600.25])
    doc.setdefault("watch", {})["interval_s"] = rng.choice([0.05, 3600, 2.5])
    doc["serve"]["port_base"] = rng.choice([1, 1024, 65534])
    return "valid numbers"


def b_valid_host(rng: random.Random, doc: Any) -> str:
    doc["engine"]["host"] = rng.choice(["::1", "0.0.0.0", "::", "node-1.example.", "10.0.0.7"])
    return "valid host"


def b_odd_paths(rng: random.Random, doc: Any) -> str:
    odd = rng.choice(["dollar $HOME", "percent %n %%", "quote \" '", "semi;colon", "back\\slash",
                      "ünïcode", "#hash", "x=y"])
    doc["cache_root"] = str(Path(doc["cache_root"]).parent / odd / "cache")
    doc["state_dir"] = str(Path(doc["state_dir"]).parent / odd / "state")
    return f"odd path {odd!r}"


def b_env(rng: random.Random, doc: Any) -> str:
    env = doc.setdefault("env", {})
    env[rng.choice(["VLLM_USE_V1", "HIP_FORCE_DEV_KERNARG", "NCCL_DEBUG", "MY_LOG_LEVEL"])] = (
        rng.choice(["1", "0", "a b", "$HOME", "%n", "'\"", "x" * 1000]))
    return "env var"


def b_args(rng: random.Random, doc: Any) -> str:
    doc["serve"]["extra_args"] = rng.choice([
        ["--enforce-eager"], ["-cc", '{"level": 3}'], ["--api-key", "sk-secret $x %n"],
        ["--max-logprobs", "5", "--seed=1"], ["--speculative-config-unrelated"]])
    return "extra args"


def b_names(rng: random.Random, doc: Any) -> str:
    doc["name"] = rng.choice(["a", "x" * 64, "s-1", "0"])
    return "seat name"


def b_extra(rng: random.Random, doc: Any) -> str:
    doc.setdefault("drafter", {"method": "ngram", "num_speculative_tokens": 3})["extra"] = (
        rng.choice([{"draft_tensor_parallel_size": 1}, {"a": {"b": [1, 2.5, True, "x\"y"]}},
                    {"prompt_lookup_max": 4, "note": "100% $HOME"}]))
    return "drafter extra"


BENIGN = [b_valid_numbers, b_valid_host, b_odd_paths, b_env, b_args, b_names, b_extra]

DOC_MUTATIONS = [m_control_in_string, m_control_in_string, m_control_in_key, m_number, m_number,
                 m_wrong_type, m_deep, m_huge_string, m_date, m_unknown_key, m_remove_key,
                 m_empty_string, m_host, m_path, m_long_list, m_listen, m_names, m_pairs,
                 m_json_arg]


def t_deep_text(rng: random.Random, text: str) -> tuple[str, str]:
    depth = rng.choice([300, 5000])
    opener, closer = rng.choice([("[", "]"), ("{ a = ", " }")])
    body = opener * depth + "1" + closer * depth
    return text + f"\n[deep]\nv = {body}\n", f"text nesting {depth}"


def t_long_number(rng: random.Random, text: str) -> tuple[str, str]:
    number = rng.choice(["9" * 5000, "0x" + "f" * 5000, "1" + "0" * 400 + ".0"])
    return text + f"\n[numbers]\nv = {number}\n", "long number"


def t_truncate(rng: random.Random, text: str) -> tuple[str, str]:
    return text[: rng.randint(0, len(text))], "truncated"


def t_duplicate(rng: random.Random, text: str) -> tuple[str, str]:
    lines = text.split("\n")
    keys = [line for line in lines if "=" in line and not line.startswith("#")]
    if keys:
        at = rng.randint(0, len(lines))
        lines.insert(at, rng.choice(keys))
    return "\n".join(lines), "duplicated line"


def t_raw_separator(rng: random.Random, text: str) -> tuple[str, str]:
    # raw C1 / U+2028 are legal inside TOML strings: put one into the first string on the line
    char = rng.choice(["\x85", "\u2028", "\u2029", "\x9b"])
    quote = text.find('"', rng.randint(0, max(0, len(text) - 1)))
    if quote < 0:
        return text, "no string"
    return text[: quote + 1] + char + text[quote + 1 :], f"raw U+{ord(char):04X}"


def t_flip_byte(rng: random.Random, text: str) -> tuple[str, str]:
    at = rng.randint(0, max(0, len(text) - 1))
    char = rng.choice(["\x00", "\ufffd", "\\", "'", '"', "[", "]", "=", "\n"])
    return text[:at] + char + text[at + 1 :], "flipped char"


TEXT_MUTATIONS = [t_deep_text, t_long_number, t_truncate, t_duplicate, t_raw_separator, t_flip_byte]


# ----- running ------------------------------------------------------------------------------
class CallTimeout(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise CallTimeout(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Battery:
    """Generate and run mutated seats; count outcomes; keep reproducers of every failure."""

    workdir: Path
    cli: Callable[..., CliResult]
    seed: int = SEED
    counts: Counter[str] = field(default_factory=Counter)
    exits: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        from tests.cache.builders import write_model

        self.rng = random.Random(self.seed)
        python = write_fake_engine_python(self.workdir / "engine")
        models = self.workdir / "models"
        if not models.exists():
            write_model(models / "target", shards=1)
            write_model(models / "drafter", hidden=32, layers=1, shards=1)
        self.bases: list[dict[str, Any]] = []
        for path in SHIPPED:
            doc = tomllib.loads(path.read_text())
            doc["cache_root"] = str(self.workdir / "cache")
            doc["state_dir"] = str(self.workdir / "state")
            doc["engine"]["python"] = str(python)
            doc["model"]["path"] = str(models / "target")
            doc["drafter"]["path"] = str(models / "drafter")
            if "profile" in doc.get("preflight", {}):
                doc["preflight"]["profile"] = str(REPO / "checks" / "x99-r9700.toml")
            self.bases.append(doc)

    def mutant(self, index: int) -> tuple[str, str]:
        """The seat text of mutation `index` and what was done to it."""
        doc = _copy(self.rng.choice(self.bases))
        chosen = [self.rng.choice(BENIGN) for _ in range(self.rng.choice([0, 1, 2]))]
        hostile = self.rng.choice([0, 1, 1, 1, 2, 3])
        chosen += [self.rng.choice(DOC_MUTATIONS) for _ in range(hostile)]
        done = [mutate(self.rng, doc) for mutate in chosen]
        # without state_dir a seat uses the host's state dir, which tests never touch
        doc.setdefault("state_dir", str(self.workdir / "state"))
        text = dumps(doc)
        if self.rng.random() < 0.25:
            on_text = self.rng.choice(TEXT_MUTATIONS)
            text, what = on_text(self.rng, text)
            chosen.append(on_text)  # type: ignore[arg-type]
            done.append(what)
        self.kinds.update(m.__name__ for m in chosen)
        return text, "; ".join(done)

    def run(self, rounds: int) -> None:
        for index in range(rounds):
            text, what = self.mutant(index)
            seat = self.workdir / f"m{index % 8}.toml"
            seat.write_text(text, encoding="utf-8", errors="surrogatepass")
            self.one(index, seat, what, text)
        self.counts["rounds"] = rounds

    def one(self, index: int, seat: Path, what: str, text: str) -> None:
        try:
            with deadline(CALL_DEADLINE_S):
                load_seat(seat)
            self.counts["loaded"] += 1
        except ConfigError as exc:
            self.counts["refused"] += 1
            if "\n" in str(exc):
                self._fail(index, what, text, "load", f"error of more than one line: {exc!s:.200}")
        except BaseException as exc:
            self._fail(index, what, text, "load", f"{type(exc).__name__}: {exc!s:.200}")
        out = self.workdir / f"units-{index}"
        state = self.workdir / "state-cli"
        for name, args in (
            ("key", ["key", str(seat), "--sysfs-root", str(X99)]),
            ("dry-run", ["launch", str(seat), "--dry-run", "--sysfs-root", str(X99)]),
            ("render", ["systemd", "render", str(seat), "--out", str(out), "--rocmseat-bin",
                        "/usr/bin/rocmseat", "--state-dir", str(state), "--sysfs-root", str(X99)]),
        ):
            try:
                with deadline(CALL_DEADLINE_S):
                    result = self.cli(*args)
            except BaseException as exc:
                self._fail(index, what, text, name, f"raised {type(exc).__name__}: {exc!s:.200}")
                continue
            self.exits[f"{name} exit {result.exit_code}"] += 1
            if result.exit_code == 3 or "Traceback" in result.stderr + result.stdout:
                why = f"exit {result.exit_code}: {result.stderr[-300:]}"
                self._fail(index, what, text, name, why)
        if out.exists():
            for unit in sorted(out.iterdir()):
                self.counts["units"] += 1
                body = unit.read_text(encoding="utf-8", errors="replace")
                bad = UNIT_CONTROL.search(body)
                if bad is not None:
                    self._fail(index, what, text, "render",
                               f"{unit.name} holds U+{ord(bad.group()):04X}")
                unit.unlink()
            out.rmdir()

    def _fail(self, index: int, what: str, text: str, where: str, why: str) -> None:
        keep = self.workdir / "failures" / f"m{index}.toml"
        keep.parent.mkdir(exist_ok=True)
        keep.write_text(text, encoding="utf-8", errors="surrogatepass")
        self.failures.append(f"round {index} [{what}] {where}: {why} (seat kept in {keep})")

    def summary(self) -> str:
        count = self.counts
        lines = [f"seed {self.seed}: {count['rounds']} mutated seats, {count['loaded']} loaded, "
                 f"{count['refused']} refused; {count['units']} units rendered and checked; "
                 f"{len(self.failures)} failures"]
        lines += [f"  {k}: {v}" for k, v in sorted(self.exits.items())]
        lines.append("  mutations: " + ", ".join(f"{k} {v}" for k, v in sorted(self.kinds.items())))
        return "\n".join(lines)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def cli_runner() -> Callable[..., CliResult]:
    """`rocmseat ARGS` in-process through the real error boundary, output captured (the bench's
    stand-in for the `rocmseat_cli` fixture)."""
    from rocmseat.cli.main import main

    def invoke(*args: str) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(args))
        return CliResult(code, out.getvalue(), err.getvalue())

    return invoke


def test_hostile_seat_battery(
    tmp_path: Path, rocmseat_cli: Callable[..., CliResult], capsys: pytest.CaptureFixture[str]
) -> None:
    battery = Battery(tmp_path, rocmseat_cli)
    battery.run(ROUNDS)
    with capsys.disabled():
        print("\n" + battery.summary())
    if battery.failures:
        (tmp_path / "failures" / "all.txt").write_text("\n".join(battery.failures) + "\n")
    assert battery.failures == [], "\n".join(battery.failures[:20])
    # the battery reached every stage: refusals, loads and rendered units
    assert battery.counts["refused"] > ROUNDS // 4 and battery.counts["loaded"] > 0
    assert battery.counts["units"] > 0


def test_mutants_are_reproducible(tmp_path: Path, rocmseat_cli: Callable[..., CliResult]) -> None:
    """Same seed, same seats: a failure's round number reproduces it."""
    first = Battery(tmp_path, rocmseat_cli, seed=7)
    second = Battery(tmp_path, rocmseat_cli, seed=7)
    assert [first.mutant(i) for i in range(30)] == [second.mutant(i) for i in range(30)]
