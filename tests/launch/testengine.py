"""A TEST ENGINE for the supervision tests. It is not vLLM and does not pretend to be.

It serves GET /health and POST /v1/completions on 127.0.0.1, can replay a startup-log fixture
file to stdout (so the classifier has lines to read), and can misbehave on request: answer the
canary never, ignore SIGTERM, leave a grandchild behind, exit with a given status.
It accepts and ignores unknown arguments, so a seat's vLLM flags can be passed to it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default="test")
    parser.add_argument("--replay", help="print this file's lines to stdout before serving")
    parser.add_argument("--delay-s", type=float, default=0.0, help="wait before listening")
    parser.add_argument("--hang-canary", action="store_true", help="never answer completions")
    parser.add_argument("--health-status", type=int, default=200)
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--sigterm-exit", type=int, default=0, help="status on SIGTERM")
    parser.add_argument("--grandchild", action="store_true",
                        help="spawn a sleeping child that ignores SIGTERM")
    parser.add_argument("--pid-file", help="write 'engine PID [child PID]' here")
    parser.add_argument("--exit-after-canary", type=int, default=None,
                        help="exit with this status right after answering the first completion")
    args, _unknown = parser.parse_known_args()

    pids = [os.getpid()]
    if args.grandchild:
        child = subprocess.Popen([sys.executable, "-c",
                                  "import signal, time\n"
                                  "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                  "time.sleep(600)\n"])
        pids.append(child.pid)
    if args.pid_file:
        with open(args.pid_file + ".tmp", "w") as handle:
            handle.write(" ".join(map(str, pids)))
        os.replace(args.pid_file + ".tmp", args.pid_file)

    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: os._exit(args.sigterm_exit))

    print(f"test engine pid {os.getpid()} (not vLLM)", flush=True)
    if args.replay:
        with open(args.replay, encoding="utf-8") as handle:
            for line in handle:
                sys.stdout.write(line)
        sys.stdout.flush()
    time.sleep(args.delay_s)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *fargs: object) -> None:
            print("test engine http: " + fmt % fargs, flush=True)

        def do_GET(self) -> None:
            self.send_response(args.health_status if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/v1/completions":
                self.send_response(404)
                self.end_headers()
                return
            if args.hang_canary:
                time.sleep(600)
            if body.get("model") != args.served_model_name:
                payload = json.dumps({"error": {"message": "model not found"}}).encode()
                self.send_response(404)
            else:
                n = int(body.get("max_tokens", 1))
                payload = json.dumps({"choices": [{"text": " x" * n}]}).encode()
                self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
            if args.exit_after_canary is not None:
                print(f"test engine exits {args.exit_after_canary}", flush=True)
                threading.Timer(0.2, os._exit, (args.exit_after_canary,)).start()

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"test engine listening on 127.0.0.1:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
