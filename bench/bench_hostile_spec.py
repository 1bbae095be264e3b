"""The long hostile batteries of the speculation room (issue 18): mutated gate directories
through `spec advise --from-gate` and seat edits through `write_drafter_schedule`, as the
unit-tier test tests/speculation/test_hostile_spec_battery.py does with a few dozen.

Prints each battery's counts and failures (exit 3, a traceback, a hang past the per-call
deadline, a write outside the directory, a byte of a file outside in the output, a seat edit
that does not load or changes more than the schedule) and the cost of one mutated gate against
the named baseline measured in the same run: `spec advise --from-gate` of the unmutated
recorded gate. Exit 1 when any failure was found.

    python bench/bench_hostile_spec.py [--rounds 500] [--seed 20261201] [--keep DIR]
"""

from __future__ import annotations

import shutil
import sys
import time

from hostile_workdir import battery_args  # bench/, the script's own directory


def main() -> int:
    args, workdir = battery_args(__doc__, rounds=500, seed=20261201,
                                 prefix="rocmseat-hostile-spec-")
    from tests.seat.test_hostile_battery import cli_runner
    from tests.speculation.test_hostile_spec_battery import GATE, GateBattery, SeatEditBattery

    cli = cli_runner()
    clean = workdir / "clean"
    shutil.copytree(GATE, clean, dirs_exist_ok=True)
    cli("spec", "advise", "--from-gate", str(clean), "--json")  # imports, matplotlib's cache
    start = time.perf_counter()
    for _ in range(3):
        cli("spec", "advise", "--from-gate", str(clean), "--json")
    baseline_s = (time.perf_counter() - start) / 3

    gates = GateBattery(workdir / "gates", cli, seed=args.seed)
    start = time.perf_counter()
    gates.run(args.rounds)
    per_gate_s = (time.perf_counter() - start) / max(args.rounds, 1)
    seats = SeatEditBattery(workdir / "seats", cli, seed=args.seed)
    seats.run(args.rounds)
    print(gates.summary())
    print(seats.summary())
    print(f"baseline spec advise of the recorded gate: {baseline_s * 1e3:.0f} ms; one mutated "
          f"gate: {per_gate_s * 1e3:.0f} ms ({per_gate_s / baseline_s:.2f}x the baseline)")
    failures = gates.failures + seats.failures
    for line in failures[:50]:
        print("FAIL", line)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
