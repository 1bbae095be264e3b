"""Time `rocmseat preflight --json` over a 16-GPU sysfs tree as a whole process (start included),
against the baseline `python -c pass` measured in the same run; print both and the ratio.

    python3 bench/bench_preflight.py [--gpus 16] [--runs 15]

Budget (docs/architecture.md, issue 10): well under a second for 16 GPUs without the HIP probe.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _builder():  # type: ignore[no-untyped-def]
    path = REPO / "tests" / "fixtures" / "build_sysfs_fixtures.py"
    spec = importlib.util.spec_from_file_location("build_sysfs_fixtures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _time(argv: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1):
            sys.exit(f"{argv[0]} exited {proc.returncode}: {proc.stderr.strip()}")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=16)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    builder = _builder()
    script = shutil.which("rocmseat")
    command = (
        [script] if script else [sys.executable, "-c", "from rocmseat.cli.main import main; main()"]
    )
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        builder.write_host(tree, builder.many_gpus(args.gpus))
        argv = [
            *command,
            "preflight",
            "--sysfs-root",
            str(tree),
            "--state-dir",
            str(Path(tmp) / "state"),
            "--json",
        ]
        _time(argv, 1)  # warm the page cache and write the AER baseline once
        baseline = statistics.median(_time([sys.executable, "-c", "pass"], args.runs))
        preflight = statistics.median(_time(argv, args.runs))
    runs = f"over {args.runs} runs"
    print(f"python -c pass (baseline):             median {baseline * 1000:7.1f} ms {runs}")
    print(f"rocmseat preflight --json ({args.gpus} GPUs): median {preflight * 1000:7.1f} ms {runs}")
    print(f"ratio preflight / python -c pass: {preflight / baseline:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
