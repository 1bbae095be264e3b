"""Issue 11's hostile battery, the long version, and the memory figures of `watch --once`.

    python3 bench/bench_watch_hostile.py [--count 3000] [--cli 100] [--rounds 100] [--seed 11]

1. `--count` seeded hostile answers (tests/watch/hostile.py: non-finite, negative, huge and
   impossible values, duplicate series, truncation, HTML, binary, resets, drips, hangs, gzip
   bombs, oversized bodies, bad chunking, header bombs, not-HTTP ...) through a real Watcher
   and its scraper, two scrapes each (the real page, then the hostile one). Counted: exit 3
   (an exception out of the evaluation), hangs (an evaluation past twice its deadline plus 2 s),
   verdicts on unreadable input, windows across a counter reset, valid pages refused.
2. `--cli` of them through `rocmseat watch --once` in a child process: exit codes (never 3;
   unreadable input is 2).
3. `--rounds` multi-target rounds: one Watcher evaluates, at once, four slow answers (hangs,
   drips, oversized bodies, bombs), two of any kind, three blackholed ports (a connection the
   kernel accepts and nobody answers) and a healthy replica: the healthy one must be judged in
   every round (a hung target used to hold one of 64 scrape slots until the deadline).
4. Peak RSS of `rocmseat watch --once` (GNU time) against a 200 MB page, with and without
   Content-Length, and two 1 MB gzip bombs (one line of '#', and short lines), against the
   baseline: the same command against the real vLLM page.

The unit tier runs part 1 with 300 answers and part 3 with 10 rounds
(tests/watch/test_battery.py).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rocmseat.httpclient import MAX_BODY_BYTES, AsyncScraper  # noqa: E402
from rocmseat.watch.loop import WatchConfig, Watcher  # noqa: E402
from rocmseat.watch.scrape import Target  # noqa: E402
from tests.watch.hostile import HostileServer, Reply, base_pages, cases, http, run_case  # noqa: E402

CLI = [sys.executable, "-c", "from rocmseat.cli.main import main; main()"]
TIME = "/usr/bin/time"  # GNU time (Debian package 'time')
TIMEOUT_S = 0.25


def battery(seed: int, count: int, state: Path) -> None:
    scraper = AsyncScraper()
    outcomes = []

    def factory(url: str) -> Watcher:
        cfg = WatchConfig(interval_s=1.0, timeout_s=TIMEOUT_S, down_after=1, state_dir=state,
                          pinned_al=2.9)
        return Watcher([Target("r0", url)], cfg, scraper=scraper)

    started = time.monotonic()
    try:
        for kind, expect, first, second in cases(seed, count, cap=MAX_BODY_BYTES):
            outcomes.append(run_case(factory, kind, expect, first, second))
    finally:
        scraper.close()
    wall = time.monotonic() - started
    by_kind: dict[str, list] = collections.defaultdict(list)
    for o in outcomes:
        by_kind[o.kind].append(o)
    print(f"{'kind':<22} {'expect':<11} {'pages':>6} {'errors':>7} {'windows':>8} "
          f"{'exit 3':>7} {'hangs':>6} {'wrong':>6} {'max s':>6}")
    for kind, group in sorted(by_kind.items()):
        print(f"{kind:<22} {group[0].expect:<11} {len(group):>6} "
              f"{sum(not o.up for o in group):>7} {sum(o.window for o in group):>8} "
              f"{sum(bool(o.crashed) for o in group):>7} "
              f"{sum(o.seconds > 2 * TIMEOUT_S + 2 for o in group):>6} "
              f"{sum(bool(o.wrong) for o in group):>6} {max(o.seconds for o in group):>6.2f}")
    unreadable = [o for o in outcomes if o.expect == "unreadable"]
    print(f"total: {len(outcomes)} pages in {len(by_kind)} kinds, {wall:.1f} s; "
          f"exit 3: {sum(bool(o.crashed) for o in outcomes)}; hangs: "
          f"{sum(o.seconds > 2 * TIMEOUT_S + 2 for o in outcomes)}; healthy verdicts on "
          f"{len(unreadable)} unreadable pages: {sum(o.healthy or o.up for o in unreadable)}; "
          f"wrong: {sum(bool(o.wrong) for o in outcomes)}")
    for o in [o for o in outcomes if o.wrong][:5]:
        print(f"  WRONG {o.kind}: {o.wrong}")


def through_cli(seed: int, count: int, state: Path) -> None:
    codes: collections.Counter[int] = collections.Counter()
    bad = []
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROCMSEAT_ERROR_LOG": str(state / "err.log")}
    for kind, expect, first, second in cases(seed, count, cap=MAX_BODY_BYTES):
        answers = [first, second]
        server = HostileServer(lambda n, a=answers: a[min(n, 1)])
        try:
            done = subprocess.run([*CLI, "watch", "--target", f"r0={server.url}", "--once",
                                   "--interval", "0.05", "--timeout", str(TIMEOUT_S),
                                   "--state-dir", str(state), "--json"],
                                  capture_output=True, text=True, timeout=60, env=env)
        finally:
            server.close()
        codes[done.returncode] += 1
        if done.returncode not in (0, 1, 2) or (expect in ("unreadable", "no-window")
                                                and done.returncode != 2):
            bad.append((kind, done.returncode, done.stderr[-200:]))
    print(f"watch --once: {sum(codes.values())} runs, exit codes {dict(sorted(codes.items()))}; "
          f"exit 3: {codes[3]}; wrong exit: {len(bad)}")
    for item in bad[:5]:
        print(f"  WRONG {item}")


def rounds(seed: int, count: int, state: Path) -> None:
    from tests.watch.hostile import SLOW_KINDS, run_round

    scraper = AsyncScraper()
    done = []

    def factory(named: list[tuple[str, str]]) -> Watcher:
        cfg = WatchConfig(interval_s=1.0, timeout_s=TIMEOUT_S, down_after=1, state_dir=state,
                          pinned_al=2.9)
        return Watcher([Target(n, u) for n, u in named], cfg, scraper=scraper)

    started = time.monotonic()
    try:
        slow = iter(cases(seed, count * 4, cap=MAX_BODY_BYTES, only=SLOW_KINDS))
        mixed = iter(cases(seed + 1, count * 2, cap=MAX_BODY_BYTES))
        for _ in range(count):
            picks = [next(slow) for _ in range(4)] + [next(mixed) for _ in range(2)]
            done.append(run_round(factory, picks, 3))
    finally:
        scraper.close()
    outcomes = [o for r in done for o in r.outcomes]
    judged = sum(r.healthy.healthy for r in done)
    print(f"multi-target rounds: {len(done)} rounds ({len(outcomes)} hostile targets, "
          f"{sum(r.blackholes for r in done)} of them blackholed ports), "
          f"{time.monotonic() - started:.1f} s; healthy replica judged in {judged}/{len(done)}; "
          f"exit 3: {sum(bool(o.crashed) for o in outcomes)}; wrong: "
          f"{sum(bool(o.wrong) for o in outcomes)}; slowest round "
          f"{max(r.seconds for r in done):.2f} s (two evaluations of {TIMEOUT_S} s)")


def _bomb(line: bytes = b"#" * (1 << 20)) -> tuple[bytes, int]:
    """About 1 MB of gzip that inflates to about 1 GB of `line` repeated."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk, parts, inflated = line * max(1, (1 << 20) // len(line)), [], 0
    while sum(map(len, parts)) < 1_000_000:
        parts.append(z.compress(chunk))
        inflated += len(chunk)
    return b"".join(parts) + z.flush(), inflated


def _big(length: bool) -> Reply:
    size = 200 * 1000 * 1000
    line = b"# " + b"x" * 1021 + b"\n"
    block = line * 1000  # ~1 MB
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    if length:
        head += b"Content-Length: " + str(size).encode() + b"\r\n"
    steps: list[tuple[object, ...]] = [("send", head + b"\r\n")]
    steps += [("send", block)] * (size // len(block))
    return Reply([*steps, ("close",)])


def peak_rss(reply: Reply, state: Path) -> tuple[int, float, str]:
    """(peak RSS KiB, seconds, last line) of `watch --once` against a server that answers a
    real page, then `reply`. Measured by GNU time (%M): a child's getrusage high-water mark
    starts at its parent's RSS when forked, and this harness is not small."""
    page = base_pages()[0]
    answers = [http(page[0].encode()), reply]
    server = HostileServer(lambda n: answers[min(n, 1)])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROCMSEAT_ERROR_LOG": str(state / "err.log")}
    started = time.monotonic()
    try:
        done = subprocess.run([TIME, "-f", "maxrss_kb=%M", *CLI, "watch", "--target",
                               f"r0={server.url}", "--once", "--interval", "0.05", "--timeout",
                               "60", "--state-dir", str(state)],
                              capture_output=True, text=True, timeout=300, env=env)
    finally:
        server.close()
    rss = int(done.stderr.strip().splitlines()[-1].split("=", 1)[1])
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    return rss, time.monotonic() - started, last


def memory(state: Path) -> None:
    if not Path(TIME).exists():
        print(f"peak RSS: skipped, no GNU time at {TIME}")
        return
    bomb, inflated = _bomb()
    lines, lines_inflated = _bomb(b"#\n")
    runs = [
        ("baseline: the real vLLM page", http(base_pages()[0][1].encode())),
        ("200 MB page, Content-Length", _big(True)),
        ("200 MB page, no Content-Length", _big(False)),
        (f"gzip bomb {len(bomb) / 1e6:.1f} MB -> {inflated / 2**20:.0f} MiB",
         http(bomb, headers=((b"Content-Encoding", b"gzip"),))),
        (f"gzip bomb, short lines -> {lines_inflated / 2**20:.0f} MiB",
         http(lines, headers=((b"Content-Encoding", b"gzip"),))),
    ]
    base = None
    print(f"{'watch --once against':40} {'peak RSS MiB':>13} {'x baseline':>11} {'s':>6}  verdict")
    for name, reply in runs:
        rss, seconds, last = peak_rss(reply, state)
        base = base or rss
        print(f"{name:40} {rss / 1024:>13.1f} {rss / base:>10.2f}x {seconds:>6.1f}  "
              f"{last[:110]}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--cli", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rocmseat-hostile-") as name:
        state = Path(name)
        battery(args.seed, args.count, state)
        through_cli(args.seed + 1, args.cli, state)
        rounds(args.seed + 2, args.rounds, state)
        memory(state)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
