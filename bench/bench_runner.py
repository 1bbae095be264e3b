"""rocmseat.runner's bounds (issue 18, item 9), measured against a baseline in the same run.

    python3 bench/bench_runner.py [--mib 400]

1. Memory: peak RSS of a fresh Python that runs a child printing `--mib` MiB through
   `rocmseat.runner.run` (kept: at most DEFAULT_LIMIT_BYTES, the child killed), against the same
   Python running `true` through it. Before the cap, 400 MB of scontrol output took 1.2 GB.
2. Time: a child whose `setsid` grandchild holds stdout for 60 s, run with a 1 s timeout:
   the wall time against the timeout (before: as long as the grandchild lived).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rocmseat.runner import DEFAULT_LIMIT_BYTES, run  # noqa: E402

MEASURE = """
import resource, sys
sys.path.insert(0, {root!r})
from rocmseat.runner import run
done = run({argv!r}, timeout_s=120)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, int(done.truncated), len(done.stdout))
"""


def peak_rss_kib(argv: list[str]) -> tuple[int, bool, int]:
    code = MEASURE.format(root=str(ROOT), argv=argv)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300).stdout.split()
    return int(out[0]), out[1] == "1", int(out[2])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=400)
    args = parser.parse_args()
    flood = [sys.executable, "-c", "import sys\nb = b'x' * 65536\n"
             f"for _ in range({args.mib * 16}): sys.stdout.buffer.write(b)\n"]
    base, _, _ = peak_rss_kib(["true"])
    peak, cut, kept = peak_rss_kib(flood)
    print(f"peak RSS, {args.mib} MiB of output: {peak / 1024:.0f} MiB (kept {kept / 2**20:.0f} "
          f"MiB, cut={cut}, cap {DEFAULT_LIMIT_BYTES / 2**20:.0f} MiB); baseline (`true`): "
          f"{base / 1024:.0f} MiB; ratio {peak / base:.1f}x")
    held = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],"
            " start_new_session=True)\n"
            "time.sleep(60)\n")
    started = time.monotonic()
    done = run([sys.executable, "-c", held], timeout_s=1.0)
    wall = time.monotonic() - started
    print(f"timeout 1 s, a setsid grandchild holding stdout: returned after {wall:.2f} s "
          f"(timed_out={done.timed_out}); ratio to the timeout {wall / 1.0:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
