"""The command hook the gate gives `rocmseat watch --command-hook`: one alert document
(`rocmseat.watch-alert/v1`, rocmseat/watch/alerts.py `Transition.to_json`) on stdin, appended
as one line to the file named by argv[1]. The gate follows that file
(rocmseat.speculation.gate.procs
WatchChild) instead of reading the watchdog's log lines by regex.

Run by path with `python -I`, without importing rocmseat: the hook starts once per alert change
and must be quick. The document is bounded (64 KiB), must be one JSON object, and is written in
one O_APPEND write, so two hooks at once never interleave their lines.
"""

from __future__ import annotations

import json
import os
import sys

LIMIT_BYTES = 64 << 10


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: alert_sink.py FILE < alert.json", file=sys.stderr)
        return 2
    data = sys.stdin.buffer.read(LIMIT_BYTES + 1)
    if len(data) > LIMIT_BYTES:
        print(f"alert_sink: alert document over {LIMIT_BYTES} bytes", file=sys.stderr)
        return 2
    try:
        doc = json.loads(data)
    except ValueError as exc:
        print(f"alert_sink: not JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(doc, dict):
        print("alert_sink: not a JSON object", file=sys.stderr)
        return 2
    line = (json.dumps(doc, sort_keys=True, allow_nan=False, separators=(",", ":")) + "\n")
    fd = os.open(argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
