"""One watcher, one core, a thousand replicas: rocmseat watch against Debian's Prometheus
scraping the same local fleet at the same interval (issue 13, "Scale").

    python3 bench/bench_watch_fleet.py [--replicas 1000] [--interval 10] [--evaluations 12]

The fleet: `--servers` child processes (asyncio, HTTP/1.1 keep-alive) listen on `--replicas`
ports of 127.0.0.1 and serve the page a real vLLM 0.32 CPU server served
(tests/fixtures/recorded/metrics-drafter-same-weights.txt, 642 lines, 64 KB) with its counters
moving: each replica drafts 5-24 drafts/s at K=3 with per-position acceptance 0.8/0.64/0.512,
generates tokens, has requests running. The targets are one Prometheus file_sd file that both
sides read.

- rocmseat: a child process runs the watch loop (rocmseat.watch.loop.Watcher with its real
  scraper, the targets from rocmseat.watch.filesd, the fixed-schedule `run`) for
  `--evaluations` intervals and reports each evaluation's wall time, the CPU seconds it used
  (getrusage of the child, idle waits included) and its peak RSS; a second, smaller run gives
  the RSS per replica.
- baseline: /usr/bin/prometheus (its own config, a temporary TSDB dir, a free port) scrapes
  the same file_sd targets with the same interval and timeout for the same time; its CPU
  seconds per second come from /proc/<pid>/stat over the steady part (after its first scrapes)
  and it must report every target up.

Goal (issue 13): every evaluation inside the interval, and less CPU than Prometheus.

    python3 bench/bench_watch_fleet.py --against main [--rounds 2]

The engine seam's check (issue 36): the same watch child, the same fleet, run with this tree's
rocmseat and with REF's (`git archive REF` unpacked into a temporary dir, put first on the
child's PYTHONPATH), in alternating order `--rounds` times; the ratio is this tree's CPU seconds
per evaluation over REF's (the median of each side's evaluations). Prometheus is not run then.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "tests" / "fixtures" / "recorded" / "metrics-drafter-same-weights.txt"
RATES = (0.8, 0.64, 0.512)  # per-position acceptance: AL 1 + 1.952


# ----- the fleet server (child process) ----------------------------------------------------
def _template() -> tuple[list[str], dict[str, int]]:
    lines = PAGE.read_text().split("\n")
    where: dict[str, int] = {}
    for i, line in enumerate(lines):
        name = line.split("{", 1)[0]
        key = name
        if name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
            position = line.split('position="', 1)[1][0]
            key = f"{name}/{position}"
        if key in ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
                   "vllm:spec_decode_num_accepted_tokens_total", "vllm:generation_tokens_total",
                   "vllm:prompt_tokens_total", "vllm:num_requests_running") or "/" in key:
            where[key] = i
            lines[i] = line.rsplit(" ", 1)[0] + " "
    return lines, where


def _page(lines: list[str], where: dict[str, int], replica: int, t: float) -> bytes:
    out = list(lines)
    drafts = float(int(48 + (5 + replica % 20) * t))
    per_pos = [float(int(drafts * r)) for r in RATES]
    values = {
        "vllm:spec_decode_num_drafts_total": drafts,
        "vllm:spec_decode_num_draft_tokens_total": 3 * drafts,
        "vllm:spec_decode_num_accepted_tokens_total": sum(per_pos),
        "vllm:generation_tokens_total": 192.0 + drafts + sum(per_pos),
        "vllm:prompt_tokens_total": float(int(17 + 40 * t)),
        "vllm:num_requests_running": float(1 + replica % 4),
    }
    for i, c in enumerate(per_pos):
        values[f"vllm:spec_decode_num_accepted_tokens_per_pos_total/{i}"] = c
    for key, index in where.items():
        out[index] = lines[index] + repr(values[key])
    body = "\n".join(out).encode()
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
    return head + body


def serve(first: int, count: int, ports_file: Path) -> None:
    lines, where = _template()
    start = time.time()

    async def handle(replica: int, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head:
                    break
                writer.write(_page(lines, where, replica, time.time() - start))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        servers = []
        for i in range(first, first + count):
            servers.append(await asyncio.start_server(
                lambda r, w, i=i: handle(i, r, w), "127.0.0.1", 0, backlog=64))
        ports = [s.sockets[0].getsockname()[1] for s in servers]
        tmp = ports_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(ports))
        tmp.replace(ports_file)
        await asyncio.Event().wait()

    asyncio.run(main())


# ----- the watcher (child process) ---------------------------------------------------------
def watch_child(targets_file: Path, interval_s: float, evaluations: int, state: Path) -> None:
    import threading

    from rocmseat.watch.filesd import read_targets_file
    from rocmseat.watch.loop import WatchConfig, Watcher
    from rocmseat.watch.service import raise_fd_limit

    targets = read_targets_file(targets_file)
    raise_fd_limit(len(targets))
    config = WatchConfig(interval_s=interval_s, timeout_s=min(5.0, interval_s), pinned_al=2.9,
                         state_dir=state)
    watcher = Watcher(targets, config)
    stop = threading.Event()
    walls: list[float] = []
    cpus: list[float] = []
    alerts = 0
    before = resource.getrusage(resource.RUSAGE_SELF)

    def on_step(statuses: list) -> None:
        nonlocal alerts, before
        now = resource.getrusage(resource.RUSAGE_SELF)
        cpus.append(now.ru_utime + now.ru_stime - before.ru_utime - before.ru_stime)
        before = now
        walls.append(watcher.last_duration_s or 0.0)
        alerts = sum(len(s.alerts) for s in statuses)
        if len(walls) >= evaluations:
            stop.set()
        ups = sum(s.up for s in statuses)
        if ups != len(statuses):
            errors = [s.error for s in statuses if not s.up][:3]
            print(json.dumps({"warning": f"{len(statuses) - ups} down", "errors": errors}),
                  file=sys.stderr, flush=True)

    watcher.run(stop, on_step)
    watcher.close()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"walls": walls, "cpus": cpus, "maxrss_kb": usage.ru_maxrss,
                      "alerts": alerts, "replicas": len(targets),
                      "windows": sum(s.window is not None for s in watcher.statuses)}))


# ----- the harness -------------------------------------------------------------------------
def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_rss_kb(pid: int, key: str = "VmHWM") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_fleet(replicas: int, servers: int, tmp: Path) -> tuple[list[subprocess.Popen[bytes]],
                                                               list[int]]:
    procs, files = [], []
    share = (replicas + servers - 1) // servers
    for k in range(servers):
        first, count = k * share, min(share, replicas - k * share)
        ports_file = tmp / f"ports-{k}.json"
        procs.append(subprocess.Popen([sys.executable, __file__, "--serve", str(first),
                                       str(count), str(ports_file)]))
        files.append(ports_file)
    deadline = time.monotonic() + 120
    while not all(f.exists() for f in files):
        if time.monotonic() > deadline:
            raise SystemExit("the fleet servers did not start within 120 s")
        time.sleep(0.2)
    ports = [p for f in files for p in json.loads(f.read_text())]
    return procs, ports


def run_watch(targets_file: Path, interval: float, evaluations: int, tmp: Path,
              code: Path = ROOT) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run([sys.executable, __file__, "--watch-child", str(targets_file),
                           str(interval), str(evaluations), str(tmp / "state")],
                          capture_output=True, text=True, env=env,
                          timeout=interval * (evaluations + 2) + 120)
    if done.returncode != 0:
        raise SystemExit(f"watch child failed:\n{done.stderr[-3000:]}")
    warnings = [ln for ln in done.stderr.splitlines() if ln.startswith("{")]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["warnings"] = len(warnings)
    return dict(result)


def run_prometheus(targets_file: Path, interval: float, seconds: float, tmp: Path,
                   replicas: int) -> dict:
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("no /usr/bin/prometheus (Debian package 'prometheus')")
    port = _free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {interval:g}s\n  scrape_timeout: {min(5.0, interval):g}s\n"
        f"scrape_configs:\n  - job_name: vllm\n    file_sd_configs:\n"
        f"      - files: ['{targets_file}']\n")
    with open(tmp / "prometheus.log", "wb") as log_file:
        proc = subprocess.Popen([binary, f"--config.file={config}",
                                 f"--storage.tsdb.path={tmp / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=log_file)
    from rocmseat.httpclient import ScrapeError, request

    try:
        def up_count() -> int:
            url = f"http://127.0.0.1:{port}/api/v1/query?query=count(up%3D%3D1)"
            try:  # rocmseat's one HTTP client (rocmseat.httpclient)
                done = request("GET", url, timeout_s=5)
                data = json.loads(done.body)["data"]["result"] if done.status == 200 else []
                return int(float(data[0]["value"][1])) if data else 0
            except (ScrapeError, ValueError, KeyError, IndexError):
                return 0

        deadline = time.monotonic() + 120
        while up_count() < replicas:  # warm-up: every target scraped once
            if time.monotonic() > deadline or proc.poll() is not None:
                log = (tmp / "prometheus.log").read_text(errors="replace").splitlines()[-5:]
                raise SystemExit(f"Prometheus saw {up_count()} of {replicas} targets up:\n"
                                 + "\n".join(log))
            time.sleep(1)
        t0, c0 = time.monotonic(), _proc_cpu_s(proc.pid)
        time.sleep(seconds)
        t1, c1 = time.monotonic(), _proc_cpu_s(proc.pid)
        up = up_count()
        rss = _proc_rss_kb(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return {"cpu_per_s": (c1 - c0) / (t1 - t0), "seconds": t1 - t0, "up": up,
            "maxrss_kb": rss}


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def export_ref(ref: str, into: Path) -> Path:
    """REF's tree (`git archive`), unpacked under `into`: the package the baseline imports."""
    into.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", ref],
                             capture_output=True, check=True, timeout=120).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True, timeout=120)
    return into


def against(args: argparse.Namespace) -> int:
    """This tree's watch against REF's on the same fleet, in alternating order."""
    with tempfile.TemporaryDirectory(prefix="rocmseat-fleet-") as name:
        tmp = Path(name)
        base = export_ref(args.against, tmp / "ref")
        servers, ports = start_fleet(args.replicas, args.servers, tmp)
        runs: dict[str, list[float]] = {"this": [], "ref": []}
        windows: dict[str, int] = {}
        try:
            targets = tmp / "fleet.json"
            targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{p}" for p in ports],
                                            "labels": {"fleet": "bench"}}]))
            for round_ in range(args.rounds):
                order = ("this", "ref") if round_ % 2 == 0 else ("ref", "this")
                for side in order:
                    result = run_watch(targets, args.interval, args.evaluations, tmp / side,
                                       ROOT if side == "this" else base)
                    runs[side] += result["cpus"][1:]  # the first opens every connection
                    windows[side] = result["windows"]
        finally:
            for proc in servers:
                proc.terminate()
                proc.wait(10)
    this, ref = statistics.median(runs["this"]), statistics.median(runs["ref"])
    print(f"fleet: {args.replicas} replicas (recorded vLLM 0.32 page), interval "
          f"{args.interval:g} s, {args.rounds} rounds x {args.evaluations} evaluations a side")
    print(f"{'':34} {'this tree':>12} {args.against:>12}")
    print(f"{'CPU s per evaluation (median)':34} {this:>12.3f} {ref:>12.3f}")
    print(f"{'CPU s per evaluation (min)':34} {min(runs['this']):>12.3f} "
          f"{min(runs['ref']):>12.3f}")
    print(f"{'targets read at the end':34} {windows['this']:>12} {windows['ref']:>12}")
    print(f"ratio: this tree CPU / {args.against} CPU = {this / ref:.3f}x (baseline: "
          f"{args.against}'s rocmseat watching the same fleet in the same run)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=10.0)
    parser.add_argument("--evaluations", type=int, default=12)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--small", type=int, default=250, help="replicas of the RSS-slope run")
    parser.add_argument("--against", metavar="REF", help="compare with REF's rocmseat instead "
                        "of Prometheus (a git ref of this repository)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)[1:] * 2)
    if args.against:
        return against(args)
    with tempfile.TemporaryDirectory(prefix="rocmseat-fleet-") as name:
        tmp = Path(name)
        servers, ports = start_fleet(args.replicas, args.servers, tmp)
        try:
            targets = tmp / "fleet.json"
            targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{p}" for p in ports],
                                            "labels": {"fleet": "bench"}}]))
            small = tmp / "small.json"
            small.write_text(json.dumps([{"targets": [f"127.0.0.1:{p}"
                                                      for p in ports[:args.small]]}]))
            ours = run_watch(targets, args.interval, args.evaluations, tmp)
            few = run_watch(small, args.interval, 3, tmp)
            prom = run_prometheus(targets, args.interval, args.interval * args.evaluations,
                                  tmp, args.replicas)
        finally:
            for proc in servers:
                proc.terminate()
                proc.wait(10)
    walls = ours["walls"][1:]  # the first evaluation opens every connection
    cpus = ours["cpus"][1:]
    cpu_eval = statistics.mean(cpus)
    ours_per_s = cpu_eval / args.interval
    per_replica_kb = (ours["maxrss_kb"] - few["maxrss_kb"]) / (args.replicas - args.small)
    print(f"fleet: {args.replicas} replicas (recorded vLLM 0.32 page, {PAGE.stat().st_size:,} "
          f"bytes, counters moving), interval {args.interval:g} s, {args.servers} server "
          f"processes")
    print(f"{'':34} {'rocmseat watch':>16} {'prometheus':>12}")
    print(f"{'evaluations / scrape rounds':34} {len(ours['walls']):>16} "
          f"{prom['seconds'] / args.interval:>12.0f}")
    print(f"{'evaluation wall p50 s':34} {_pct(walls, 0.5):>16.2f} {'-':>12}")
    print(f"{'evaluation wall p99 s':34} {_pct(walls, 0.99):>16.2f} {'-':>12}")
    print(f"{'evaluation wall max s':34} {max(walls):>16.2f} {'-':>12}")
    inside = f"{sum(w < args.interval for w in ours['walls'])}/{len(ours['walls'])}"
    print(f"{'evaluations inside the interval':34} {inside:>16} {'-':>12}")
    print(f"{'CPU s per evaluation (per round)':34} {cpu_eval:>16.3f} "
          f"{prom['cpu_per_s'] * args.interval:>12.3f}")
    print(f"{'CPU s per second':34} {ours_per_s:>16.4f} {prom['cpu_per_s']:>12.4f}")
    print(f"{'peak RSS MiB':34} {ours['maxrss_kb'] / 1024:>16.1f} "
          f"{prom['maxrss_kb'] / 1024:>12.1f}")
    print(f"{'RSS per replica KiB (vs ' + str(args.small) + ')':34} {per_replica_kb:>16.1f} "
          f"{'-':>12}")
    print(f"{'targets read at the end (up)':34} {ours['windows']:>16} {prom['up']:>12}")
    print(f"{'alerts active at the end':34} {ours['alerts']:>16} {'-':>12}")
    print(f"ratio: Prometheus CPU / rocmseat CPU = {prom['cpu_per_s'] / ours_per_s:.2f}x "
          f"(baseline: Debian Prometheus scraping the same targets, same interval)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--watch-child":
        watch_child(Path(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5]))
    else:
        raise SystemExit(main())
