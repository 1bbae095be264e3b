"""Issue 18's hostile battery for the cached verdict: forge or damage a real verdict file, read
it back the way the fleet does, and judge the outcome.

    python3 -m tests.fleet.verdict_battery --rounds 2000 --seed 1   # the long version

The base is the verdict a real full run writes for the degraded fixture (two failing findings),
and its "forged ok" twin (every finding ok, exit code 0: what someone who wants a drained node
back in service would leave there). Each round applies one mutation that makes the file
untrustworthy or malformed, and sometimes one or two more:

- trust: the file owned by nobody, group- or other-writable; the state dir or its `preflight/`
  dir group- or other-writable or owned by nobody; the file a symlink to a forged copy;
- kind: a FIFO, a directory, a symlink to /dev/zero, a file over the 4 MiB cap;
- content: torn (cut before its end), a required key deleted or given a hostile value (NaN,
  Infinity, 10**400, -1, true, null, [], {}, an escape sequence, deep nesting), an unknown key,
  a finding's field made hostile.

Then `rocmseat preflight --format npd --cached` runs in this process through the real error
boundary (`rocmseat.cli.main.main`), and every tenth round `slurm health` (scontrol answered by
a fake that records the calls) on a node rocmseat drained for AER. A violation is: any exit code
but 2 (0 or 1 would mean the forged file was believed), a line that is not `UNKNOWN: ...` within
80 bytes, a traceback or "internal error", or a `State=RESUME` sent. A round that hangs is
caught by the caller's deadline (the test runs the battery in a child process and names the
round that was running).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DEGRADED = REPO / "tests" / "fixtures" / "sysfs" / "x99-r9700-degraded"
NOBODY = 65534
TRUST = ("file-nobody", "file-0666", "file-0620", "file-0602", "dir-0777", "dir-0770",
         "subdir-0777", "subdir-nobody", "symlink")
KIND = ("fifo", "directory", "dev-zero", "huge")
CONTENT = ("torn", "hostile-value", "delete-key", "extra-key", "hostile-finding")
REQUIRED = ("schema", "written_at_unix_s", "sysfs_root", "families", "gpus", "exit_code",
            "findings")
# every one is invalid for every required key (and for every field of a finding)
HOSTILE = ("NaN", "Infinity", "-Infinity", "1" + "0" * 400, "-1", "true", "null", "[]", "{}",
           json.dumps("x\x1b[31m"), "[" * 3000 + "]" * 3000)
FINDING_FIELDS = ("check_id", "severity", "subject", "message")


def base_documents(workdir: Path) -> tuple[str, str]:
    """(the real verdict of the degraded tree, its forged-ok twin), as file texts."""
    from rocmseat.cli.main import main
    from rocmseat.preflight.verdict_doc import verdict_path

    state = workdir / "base"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["preflight", "--sysfs-root", str(DEGRADED), "--state-dir", str(state)])
    real = verdict_path(state).read_text()
    doc = json.loads(real)
    doc["findings"] = [{**f, "severity": "ok"} for f in doc["findings"]]
    doc["exit_code"] = 0
    return real, json.dumps(doc, indent=2)


def _raw_set(text: str, key: str, raw: str) -> str:
    """The document with `key` set to the raw JSON text `raw` (which may not be valid JSON)."""
    doc = json.loads(text)
    doc[key] = "@@RAW@@"
    return json.dumps(doc).replace('"@@RAW@@"', raw)


def mutate_content(text: str, how: str, rng: random.Random) -> str:
    if how == "torn":
        return text[: rng.randrange(len(text.rstrip()) - 1)]
    if how == "hostile-value":
        return _raw_set(text, rng.choice(REQUIRED), rng.choice(HOSTILE))
    if how == "delete-key":
        doc = json.loads(text)
        del doc[rng.choice(REQUIRED)]
        return json.dumps(doc)
    if how == "extra-key":
        doc = json.loads(text)
        doc[rng.choice(("hint", "trusted", "ok", "verdict"))] = rng.choice((0, "ok", None))
        return json.dumps(doc)
    doc = json.loads(text)
    index = rng.randrange(len(doc["findings"]))
    doc["findings"][index][rng.choice(FINDING_FIELDS)] = "@@RAW@@"
    return json.dumps(doc).replace('"@@RAW@@"', rng.choice(HOSTILE))


def plant(state: Path, text: str, kind: str, rng: random.Random) -> None:
    """Write the verdict file into `state` and apply one trust or kind mutation (or none, or
    several trust mutations joined by "+")."""
    from rocmseat.preflight.verdict_doc import verdict_path

    path = verdict_path(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        forged = state.parent / f"forged-{rng.randrange(1 << 30)}.json"
        forged.write_text(text)
        path.symlink_to(forged)
        return
    if kind == "fifo":
        os.mkfifo(path)
        return
    if kind == "directory":
        path.mkdir()
        return
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
        return
    path.write_text(text + (" " * (5 << 20) if kind == "huge" else ""))
    for one in kind.split("+"):  # "file-nobody+file-0666": both
        _apply(one, path, state)


def _apply(kind: str, path: Path, state: Path) -> None:
    modes = {"file-0666": 0o666, "file-0620": 0o620, "file-0602": 0o602}
    if kind in modes:
        path.chmod(modes[kind])
    elif kind == "file-nobody":
        os.chown(path, NOBODY, NOBODY)
    elif kind == "dir-0777":
        state.chmod(0o777)
    elif kind == "dir-0770":
        state.chmod(0o770)
    elif kind == "subdir-0777":
        path.parent.chmod(0o777)
    elif kind == "subdir-nobody":
        os.chown(path.parent, NOBODY, NOBODY)


def one_round(index: int, rng: random.Random, workdir: Path, bases: tuple[str, str],
              *, root: bool, slurm: bool) -> dict[str, Any]:
    from rocmseat.cli.main import main

    trust = [k for k in TRUST if root or "nobody" not in k]
    text = rng.choice(bases)
    mutations: list[str] = []
    kind = "none"
    # one mutation that must make the file unusable, and sometimes one or two more
    first = rng.choice(("trust", "kind", "content"))
    extra = rng.choice((0, 0, 1, 2))
    for pick in [first, *rng.choices(("trust", "content"), k=extra)]:
        if pick == "content" and not any(m in CONTENT for m in mutations):
            how = rng.choice(CONTENT)
            text = mutate_content(text, how, rng)
            mutations.append(how)
        elif pick != "content" and kind == "none":
            kind = rng.choice(trust if pick == "trust" else KIND)
            mutations.append(kind)
    state = workdir / f"r{index}" / "state"
    state.mkdir(parents=True)
    plant(state, text, kind, rng)
    started = time.monotonic()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["preflight", "--sysfs-root", str(DEGRADED), "--state-dir", str(state),
                     "--format", "npd", "--cached"])
    line = out.getvalue()
    violations = []
    if code != 2:
        violations.append(f"exit {code}: {line.strip()!r}")
    if not line.startswith("UNKNOWN: ") or len(line.rstrip("\n").encode()) > 80 or \
            line.count("\n") != 1:
        violations.append(f"line {line!r}")
    if "Traceback" in err.getvalue() or "internal error" in err.getvalue():
        violations.append(f"stderr {err.getvalue()[-300:]!r}")
    resumed = False
    if slurm:
        resumed = _slurm_resumes(state, workdir / f"r{index}")
        if resumed:
            violations.append("slurm health resumed the node")
    return {"round": index, "mutations": mutations, "exit_code": code,
            "seconds": time.monotonic() - started, "violations": violations,
            "slurm": slurm, "reason": line.strip()}


DRAINED = ("NodeName=vm NodeHostName=vm State=IDLE+DRAIN "
           "Reason=rocmseat: aer.badtlp 0000:80:02.0 [aer] [root@2026-11-30T14:22:54]")


def _slurm_resumes(state: Path, workdir: Path) -> bool:
    from rocmseat.fleet import slurm
    from rocmseat.runner import Completed

    calls: list[list[str]] = []

    def runner(argv: Any, *, timeout_s: Any = None, env: Any = None, cwd: Any = None,
               input_text: Any = None) -> Completed:
        argv = [str(a) for a in argv]
        calls.append(argv)
        out = DRAINED + "\n" if argv[:3] == ["scontrol", "-o", "show"] else ""
        return Completed(tuple(argv), 0, out, "")

    from rocmseat.errors import RocmseatError

    # could not check or could not tell Slurm is an answer; anything else is a bug (raised)
    with contextlib.suppress(RocmseatError):
        slurm.health(slurm.HealthRequest(DEGRADED, state, node="vm"), runner=runner)
    return any("State=RESUME" in argv for argv in calls)


def run_battery(rounds: int, seed: int, workdir: Path, progress: Path | None) -> dict[str, Any]:
    rng = random.Random(seed)
    root = os.geteuid() == 0
    bases = base_documents(workdir)
    results = []
    for index in range(rounds):
        if progress is not None:
            progress.write_text(str(index))
        results.append(one_round(index, rng, workdir, bases, root=root, slurm=index % 10 == 0))
        shutil.rmtree(workdir / f"r{index}", ignore_errors=True)
    return {
        "rounds": rounds,
        "seed": seed,
        "exit_codes": dict(Counter(str(r["exit_code"]) for r in results)),
        "exit_3": sum(r["exit_code"] == 3 for r in results),
        "healthy": sum(r["exit_code"] == 0 for r in results),
        "believed": sum(r["exit_code"] in (0, 1) for r in results),
        "slurm_rounds": sum(r["slurm"] for r in results),
        "mutations": dict(Counter(m for r in results for m in r["mutations"])),
        "max_round_s": round(max((r["seconds"] for r in results), default=0.0), 3),
        "reasons": len({r["reason"] for r in results}),
        "violations": [r for r in results if r["violations"]][:20],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--progress", type=Path)
    args = parser.parse_args(argv)
    # never the host's state dir or /sys: every path is given explicitly above
    os.environ.pop("ROCMSEAT_STATE_DIR", None)
    os.environ.pop("ROCMSEAT_PROC_ROOT", None)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        summary = run_battery(args.rounds, args.seed, workdir, args.progress)
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 1 if summary["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
