"""Issue 18's hostile battery extended to scontrol's answers, seeded and bounded.

Each case is one forged answer of `scontrol -o show node` (built from the line recorded from
Slurm 22.05, tests/fleet/test_slurm_unit.py) fed to the whole health check through the injected
runner, with a fresh verdict of the degraded fixture (a drain is due) or the healthy one (a
resume could be). What must hold for every case: no internal error (exit 3), no hang, every
`scontrol update` names exactly the one plain node name resolved for this host, the output line
holds no control character; and a forged identity (a hostlist, ALL, several nodes for this
host, a name with controls, no line for this host) is exit 2 with no update at all: never a
healthy verdict, never an action.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

from rocmseat.errors import RocmseatError
from rocmseat.fleet import scontrol, slurm
from rocmseat.runner import Completed
from tests.fleet.test_slurm_unit import IDLE
from tests.sysfs.conftest import SYSFS_FIXTURES

SEED = 18
COUNT = 400
HOST = "gpu07"
CASE_BOUND_S = 10.0  # a hang, not a speed target: each case takes milliseconds
CONTROLS = ["\x00", "\x1b[2J", "\x07", "\x7f", "\x9b", "\x85", "\u2028", "\r", "\t", "\x0b"]


def _line(name, host=HOST, state="IDLE", reason=None):
    line = IDLE.replace("NodeName=vm ", f"NodeName={name} ").replace(
        "NodeHostName=vm ", f"NodeHostName={host} ").replace(
        "State=IDLE+NOT_RESPONDING", f"State={state}")
    return line + (f" Reason={reason} [root@2026-11-30T14:22:54]" if reason else "")


def _forged_identity(rng):
    kind = rng.choice(["hostlist", "list", "reserved", "several", "control", "absent",
                       "empty", "long", "spaced"])
    name = {
        "hostlist": f"gpu[{rng.randint(0, 9):02d}-{rng.randint(10, 99)}]",
        "list": f"gpu{rng.randint(0, 9):02d},gpu{rng.randint(10, 99)}",
        "reserved": rng.choice(["ALL", "all", "DEFAULT", "Default"]),
        "control": f"gpu{rng.choice(CONTROLS)}07",
        "long": "g" * rng.randint(65, 5000),
        "spaced": "gpu 07",
    }.get(kind, HOST)
    lines = [_line(f"n{i:03d}", host=f"n{i:03d}") for i in range(rng.randint(0, 20))]
    if kind == "several":
        lines += [_line(f"{HOST}{c}") for c in "ab"[: rng.randint(2, 2)]]
    elif kind == "absent":
        pass
    elif kind == "empty":
        lines = ["", " ", "scontrol: error: Invalid node name specified"]
    else:
        lines.append(_line(name))
    rng.shuffle(lines)
    return f"identity:{kind}", "\n".join(lines) + rng.choice(["\n", "", "\r\n"])


def _forged_answer(rng):
    """An answer that names this node once, plainly, but is otherwise hostile: what it may do
    is any honest outcome (drain, resume, leave alone, could not check), safely."""
    kind = rng.choice(["controls-in-reason", "long-reason", "spaces-reason", "bad-state",
                       "garbage-fields", "truncated", "binary", "unicode-lines", "our-reason",
                       "huge-line"])
    reason = None
    state = "IDLE"
    line_extra = ""
    if kind == "controls-in-reason":
        reason = "rocmseat: x" + "".join(rng.choice(CONTROLS) for _ in range(5)) + " [pcie]"
        state = "IDLE+DRAIN"
    elif kind == "long-reason":
        reason = "r" * rng.randint(1000, 200_000)
    elif kind == "spaces-reason":
        # `\s*...$` over this backtracked quadratically
        reason = "a" + " " * rng.randint(10_000, 200_000) + "b"
    elif kind == "bad-state":
        state = rng.choice(["", "+", "IDLE++DRAIN", "idle+drain", "IDLE\x1b[31m", "DRAIN",
                            "ALLOC+DRAIN+DRAIN", "9" * 100])
    elif kind == "garbage-fields":
        line_extra = " " + " ".join(f"K{i}=" + "=" * rng.randint(0, 3) for i in range(500))
    elif kind == "our-reason":
        reason = rng.choice(["rocmseat: pcie.link.degraded 0000:89:00.0 [pcie]",
                             "rocmseat: [[[@]]]", "rocmseat: x [a@b] [c@d]", "rocmseat:"])
        state = "IDLE+DRAIN"
    elif kind == "unicode-lines":
        reason = "x\u2028NodeName=evil NodeHostName=gpu07 State=IDLE\x85NodeName=ALL"
    elif kind == "huge-line":
        line_extra = " Comment=" + "c" * rng.randint(100_000, 2_000_000)
    line = _line(HOST, state=state, reason=reason) + line_extra
    if kind == "truncated":
        line = line[: rng.randint(0, len(line))]
    if kind == "binary":
        raw = bytearray(line.encode())
        for _ in range(20):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        line = raw.decode("utf-8", "replace")  # what the runner hands over
    return f"answer:{kind}", line + "\n"


class Forged:
    """The injected runner: scontrol answers `answer`, updates are recorded."""

    def __init__(self, answer):
        self.answer = answer
        self.updates = []

    def __call__(self, argv, *, timeout_s=None, env=None, cwd=None, input_text=None):
        argv = [str(a) for a in argv]
        if argv[:2] == ["scontrol", "update"]:
            self.updates.append(argv)
            return Completed(tuple(argv), 0, "", "")
        if argv[:3] == ["scontrol", "-o", "show"]:
            return Completed(tuple(argv), 0, self.answer, "")
        raise AssertionError(f"no preflight may run here: {argv}")


def _run_case(answer, fixture, state_dir):
    runner = Forged(answer)
    box = []

    def call():
        try:
            out = slurm.health(slurm.HealthRequest(SYSFS_FIXTURES / fixture, state_dir),
                               env={}, runner=runner)
            box.append(("ok", out))
        except RocmseatError as exc:
            box.append(("error", exc))
        except BaseException as exc:  # an internal error: exit 3
            box.append(("internal", exc))

    started = time.monotonic()
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(CASE_BOUND_S)
    if thread.is_alive():
        return "hang", None, runner, time.monotonic() - started
    return box[0][0], box[0][1], runner, time.monotonic() - started


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    from rocmseat.cli.main import main

    out = {}
    for name in ("x99-r9700-degraded", "x99-r9700"):
        state = tmp_path_factory.mktemp(name)
        main(["preflight", "--sysfs-root", str(SYSFS_FIXTURES / name), "--state-dir",
              str(state), "--format", "json"])
        out[name] = state
    return out


def test_forged_scontrol_answers(verdicts, monkeypatch, capsys):
    monkeypatch.setattr(scontrol, "_hostnames", lambda: [HOST])
    rng = random.Random(SEED)
    tally: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    slowest = 0.0
    for index in range(COUNT):
        identity = index % 2 == 0
        kind, answer = _forged_identity(rng) if identity else _forged_answer(rng)
        fixture = "x99-r9700-degraded" if index % 4 < 2 else "x99-r9700"
        result, value, runner, took = _run_case(answer, fixture, verdicts[fixture])
        slowest = max(slowest, took)
        tally[kind] += 1
        outcomes[result] += 1
        where = f"case {index} ({kind}, {fixture})"
        assert result not in ("hang", "internal"), f"{where}: {result} {value!r}"
        for argv in runner.updates:
            assert argv[2] == f"NodeName={HOST}", f"{where}: {argv}"
        if identity:
            assert result == "error" and value.exit_code == 2, f"{where}: {value}"
            assert runner.updates == [], where
        if result == "ok":
            line = f"{value.node}: {value.verdict_line}; {value.action.why}"
            assert not any(c in line for c in CONTROLS if c != "\t"), f"{where}: {line!r}"
        else:
            assert not any(c in str(value) for c in CONTROLS), f"{where}: {value!s}"
    with capsys.disabled():
        print(f"\nscontrol battery (seed {SEED}): {COUNT} cases, {dict(sorted(tally.items()))}; "
              f"outcomes {dict(outcomes)}; 0 exit 3, 0 hangs, 0 actions on a forged identity; "
              f"slowest {slowest:.2f} s")
    assert len(tally) >= 15  # the seed reaches most kinds
    assert outcomes["ok"] > 0  # not passing by refusing everything



def test_forged_answers_through_the_command(verdicts, rocmseat_cli, monkeypatch, tmp_path):
    """A share of the battery through `rocmseat slurm health` itself: a fake `scontrol` on PATH
    answers the forged text (the real runner, the CLI's error boundary): exit 2 for every forged
    identity, never exit 3, and no `scontrol update` reaches the fake."""
    import os
    import shlex

    monkeypatch.setattr(scontrol, "_hostnames", lambda: [HOST])
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    answer, asked = tmp_path / "answer.txt", tmp_path / "asked.txt"
    (fakebin / "scontrol").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {shlex.quote(str(asked))}\n'
        f'case "$1" in update) exit 0;; esac\nexec cat {shlex.quote(str(answer))}\n')
    (fakebin / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fakebin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("SLURMD_NODENAME", raising=False)
    rng = random.Random(SEED + 1)
    codes: Counter[int] = Counter()
    for index in range(40):
        kind, text = _forged_identity(rng)
        answer.write_bytes(text.encode("utf-8", "surrogateescape"))
        asked.write_text("")
        result = rocmseat_cli("slurm", "health", "--sysfs-root",
                              str(SYSFS_FIXTURES / "x99-r9700-degraded"), "--state-dir",
                              str(verdicts["x99-r9700-degraded"]))
        codes[result.exit_code] += 1
        assert result.exit_code == 2, f"case {index} ({kind}): {result}"
        assert "update" not in asked.read_text(), f"case {index} ({kind})"
        assert result.stderr.startswith("rocmseat: error: "), result.stderr
    assert codes == Counter({2: 40})
