"""Time and memory to read and judge a 1,000,000-line kernel log, against `wc -l` on the same file
in the same run.

    python3 bench/bench_kernel_log.py [--lines 1000000]

The log is written to a temp file from the corpus (tests/fixtures/kernel-log/corpus/) with dmesg
stamps: `--event-share` of the lines (5 % by default; a boot log holds far fewer) come from the
excerpts with events (ring timeouts, resets, page faults, AER, and their context lines), the rest
from the benign boot excerpts. Measured:
- baseline: `wc -l FILE` (coreutils), wall time, best of 3;
- rocmseat: rocmseat.preflight.events.read_kernel_events on the same file (open, read in
  chunks, parse every line, tally per subject and class), wall time, best of 3, in a child
  process whose peak RSS (getrusage) is reported against the same child's RSS before reading.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "kernel-log" / "corpus"

_CHILD = """
import resource, sys, time
from pathlib import Path
from rocmseat.preflight.events import read_kernel_events
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
events = read_kernel_events(Path(sys.argv[1]), (), live=False)
wall = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(wall, before, after, events.lines, sum(t.count for t in events.tallies.values()))
"""


def _lines(benign: bool) -> list[str]:
    return [line.split("] ", 1)[-1] if line.startswith("[") else line
            for f in sorted(CORPUS.glob("*.log")) if f.name.endswith("-benign.log") == benign
            for line in f.read_text().splitlines()]


def write_log(path: Path, lines: int, event_share: float = 0.05) -> None:
    quiet, loud = _lines(benign=True), _lines(benign=False)
    every = max(1, round(1 / event_share)) if event_share > 0 else 0
    with path.open("w") as out:
        for i in range(lines):
            text = loud[(i // every) % len(loud)] if every and i % every == 0 else (
                quiet[i % len(quiet)])
            out.write(f"[{i / 1000:12.6f}] {text}\n")


def best_of(n: int, argv: list[str]) -> tuple[float, str]:
    best, out = float("inf"), ""
    for _ in range(n):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        best = min(best, time.perf_counter() - start)
        out = done.stdout
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--event-share", type=float, default=0.05)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "kern.log"
        write_log(log, args.lines, args.event_share)
        size = log.stat().st_size
        wc_s, wc_out = best_of(3, ["wc", "-l", str(log)])
        runs = [subprocess.run([sys.executable, "-c", _CHILD, str(log)], capture_output=True,
                               text=True, check=True).stdout.split() for _ in range(3)]
        best = min(runs, key=lambda r: float(r[0]))
        wall, before_kb, after_kb, lines, events = (float(best[0]), int(best[1]), int(best[2]),
                                                     int(best[3]), int(best[4]))
    print(f"log: {args.lines:,} lines, {size / 1e6:.1f} MB, {args.event_share:.0%} from event "
          f"excerpts; wc -l says {wc_out.split()[0]}")
    print(f"wc -l:                     {wc_s * 1e3:9.1f} ms")
    print(f"read_kernel_events:        {wall * 1e3:9.1f} ms  ({lines:,} lines, {events:,} events)")
    print(f"ratio rocmseat / wc -l:    {wall / wc_s:9.1f}x")
    print(f"peak RSS of the reader:    {after_kb / 1024:9.1f} MiB "
          f"(+{(after_kb - before_kb) / 1024:.1f} MiB while reading {size / 1e6:.0f} MB)")
    print(f"this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
