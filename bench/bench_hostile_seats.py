"""The long hostile battery of seat files (issue 11): thousands of mutated seats through
`load_seat`, `rocmseat key`, `launch --dry-run` and `systemd render`, as the unit-tier test
tests/seat/test_hostile_battery.py does with a few hundred.

Prints the counts (loaded, refused, exit codes per command, units checked, failures: exit 3, a
traceback, a hang past the per-call deadline, a control character in a rendered unit) and the
cost of one mutated seat against the named baseline measured in the same run: `load_seat` of the
unmutated shipped seats. Exit 1 when any failure was found; reproducers are kept.

    python bench/bench_hostile_seats.py [--rounds 5000] [--seed 20261130] [--keep DIR]
"""

from __future__ import annotations

import sys
import time

from hostile_workdir import battery_args  # bench/, the script's own directory


def main() -> int:
    args, workdir = battery_args(__doc__, rounds=5000, seed=20261130, prefix="rocmseat-hostile-")
    from rocmseat.seat.load import load_seat
    from tests.seat.test_hostile_battery import SHIPPED, Battery, cli_runner

    # Baseline: loading the shipped seats as they are.
    start = time.perf_counter()
    loads = 0
    while time.perf_counter() - start < 1.0:
        for path in SHIPPED:
            load_seat(path)
            loads += 1
    baseline_s = (time.perf_counter() - start) / loads

    battery = Battery(workdir, cli_runner(), seed=args.seed)
    start = time.perf_counter()
    battery.run(args.rounds)
    per_seat_s = (time.perf_counter() - start) / args.rounds

    print(battery.summary())
    print(f"baseline load_seat(shipped seat): {baseline_s * 1e3:.2f} ms; one mutated seat through "
          f"load + 3 commands: {per_seat_s * 1e3:.1f} ms; ratio {per_seat_s / baseline_s:.0f}x")
    for line in battery.failures[:50]:
        print("FAIL", line)
    if battery.failures:
        print(f"reproducers in {workdir / 'failures'}")
    return 1 if battery.failures else 0


if __name__ == "__main__":
    sys.exit(main())
