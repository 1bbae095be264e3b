"""One `rocmseat slurm health` per line on stdin, each started at the instant the line names:
the fleet tier's stand-in for slurmctld starting HealthCheckProgram on every node at once.

A worker is one process for one node (`--node` among the arguments), started once and used for
every round, so that twenty interpreter start-ups on a two-core runner do not spread the
"same instant" over seconds; each round runs the real command (rocmseat.cli.main, its error
boundary included) with its real scontrol calls. Protocol: a line `<unix time>` in, one JSON
line `{"code": ..., "out": ..., "err": ...}` out; an empty line or EOF ends the worker.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time


def main(argv: list[str]) -> int:
    import rocmseat.fleet.slurm
    import rocmseat.preflight.verdict_doc
    from rocmseat.cli.main import main as rocmseat

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            break
        at = float(line)
        time.sleep(max(0.0, at - time.time()))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = rocmseat(list(argv))
        print(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue()}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
