"""Time and memory to read, parse and tally a 1,000,000-line kernel log, against `grep -cE` over
the catalogue's trigger words on the same file, measured in the same run (issue 34 "Speed").

    python3 bench/bench_kernel_log.py [--lines 1000000] [--gpu-share 0.10] [--event-share 0.01]

The log (about 80 MB) is written to a temp file with dmesg stamps:
- `--event-share` of the lines come from the corpus excerpts with events
  (tests/fixtures/kernel-log/corpus/: ring timeouts, resets, page faults, AER, their context);
- `--gpu-share` from the benign boot excerpts there (amdgpu's init chatter: every one of those
  lines names the GPU, so it passes the cheap test and meets the class words);
- the rest are lines of a boot log that are not about a GPU, built from the printk formats of the
  drivers named beside them in NOT_GPU below (synthetic: addresses and values made up). A real
  boot log is mostly these; `--gpu-share 1 --event-share 0` is the worst case.

Measured, each best of 3 in child processes:
- baseline: `grep -cE WORDS FILE` (GNU grep), WORDS the alternation of every class's trigger
  words (rocmseat.sysfs.kernel_events.WORDS);
- after: rocmseat.preflight.events.read_kernel_events on the file (open, read in chunks, parse
  every line, tally per subject and class) from this checkout, with the child's peak RSS
  (getrusage) against its RSS before reading;
- before: the same call from main's tree (`git archive main` into a temp dir), when git and a
  main branch are there; else said.
The load average is printed first and last: on a shared machine the ratio, both sides measured
in the same run, is the figure to read. Target: after / grep <= 10.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "tests" / "fixtures" / "kernel-log" / "corpus"
TARGET_RATIO = 10.0

# Lines that are not about a GPU, from printk formats of other drivers (synthetic values)
NOT_GPU = (
    # drivers/usb/core/hub.c hub_port_init(): "new %s USB device number %d using %s"
    "usb 1-4: new high-speed USB device number 3 using xhci_hcd",
    # drivers/usb/core/generic.c / message.c announce_device()
    "usb 1-4: New USB device found, idVendor=0bda, idProduct=5411, bcdDevice= 1.36",
    # fs/ext4/super.c ext4_fill_super()
    "EXT4-fs (nvme0n1p2): mounted filesystem 3f6c1c2e-5b1e-4d1a-9b7e-2c0d1e4f5a6b r/w with "
    "ordered data mode. Quota mode: none.",
    # kernel/audit.c audit_log_*: an AppArmor denial
    'audit: type=1400 audit(1767340800.123:412): apparmor="DENIED" operation="open" '
    'profile="snap.slurmd" name="/proc/12/mounts" pid=4410 comm="slurmd"',
    # net/ipv6/addrconf.c addrconf_notify()
    "IPv6: ADDRCONF(NETDEV_CHANGE): enp65s0f0: link becomes ready",
    # drivers/net/ethernet/mellanox/mlx5 mlx5e_update_carrier()
    "mlx5_core 0000:41:00.0 enp65s0f0: Link up",
    # drivers/nvme/host/pci.c nvme_setup_io_queues()
    "nvme nvme0: 64/0/0 default/read/poll queues",
    # arch/x86/kernel/cpu/mce/core.c (corrected, logged by mcelog)
    "mce: [Hardware Error]: Machine check events logged",
    # kernel/cgroup: systemd-run scopes
    "systemd[1]: Started session-812.scope - Session 812 of User slurm.",
    # net/bridge/br_stp.c br_port_state_selection()
    "docker0: port 2(veth8c1d2e3) entered forwarding state",
    # mm/oom_kill.c dump_header()
    "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
    "oom_score_adj=0",
    # drivers/scsi/sd.c sd_read_capacity()
    "sd 0:0:0:0: [sda] 7814037168 512-byte logical blocks: (4.00 TB/3.64 TiB)",
    # net/netfilter/nf_conntrack_core.c
    "nf_conntrack: default automatic helper assignment has been turned off for security reasons",
    # kernel/time/clocksource.c
    "clocksource: Switched to clocksource tsc",
)

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


def write_log(path: Path, lines: int, gpu_share: float, event_share: float) -> None:
    chatter, loud = _lines(benign=True), _lines(benign=False)

    def due(i: int, share: float) -> bool:  # evenly spread: share * lines of them
        return int((i + 1) * share) > int(i * share)

    n_loud = n_chatter = 0
    with path.open("w") as out:
        for i in range(lines):
            if due(i, event_share):
                text, n_loud = loud[n_loud % len(loud)], n_loud + 1
            elif due(i, gpu_share):
                text, n_chatter = chatter[n_chatter % len(chatter)], n_chatter + 1
            else:
                text = NOT_GPU[i % len(NOT_GPU)]
            out.write(f"[{i / 1000:12.6f}] {text}\n")


def grep_pattern(words: tuple[str, ...]) -> str:
    """The ERE alternation of the trigger words (each escaped)."""
    return "|".join(re.sub(r"([.\[\]()*+?{}|^$\\])", r"\\\1", w) for w in words)


def best_of(n: int, argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    best, out = float("inf"), ""
    for _ in range(n):
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
        best = min(best, time.perf_counter() - start)
        out = done.stdout
    return best, out


def reader_runs(root: Path, log: Path, n: int = 3) -> tuple[float, int, int, int, int]:
    """(wall s, RSS before KiB, peak RSS KiB, lines, events) of the best of n child runs."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    runs = []
    for _ in range(n):
        done = subprocess.run([sys.executable, "-c", _CHILD, str(log)], capture_output=True,
                              text=True, check=True, env=env, cwd=root)
        runs.append(done.stdout.split())
    best = min(runs, key=lambda r: float(r[0]))
    return float(best[0]), int(best[1]), int(best[2]), int(best[3]), int(best[4])


def main_tree(tmp: Path, rev: str = "main") -> Path | None:
    """`rev`'s rocmseat package in a temp dir (git archive), or None."""
    dest = tmp / "main"
    dest.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, "rocmseat"],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        return None
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--gpu-share", type=float, default=0.10)
    parser.add_argument("--event-share", type=float, default=0.01)
    parser.add_argument("--no-before", action="store_true", help="skip main's code path")
    parser.add_argument("--before", default="main", metavar="REV",
                        help="the revision whose code path is 'before' (default: main)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from rocmseat.sysfs.kernel_events import WORDS

    print(f"load average (1, 5, 15 min) at start: {_load()} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        log = tmp / "kern.log"
        write_log(log, args.lines, args.gpu_share, args.event_share)
        size = log.stat().st_size
        pattern = grep_pattern(WORDS)
        grep_s, grep_out = best_of(3, ["grep", "-cE", pattern, str(log)])
        after = reader_runs(REPO, log)
        before_root = None if args.no_before else main_tree(tmp, args.before)
        before = reader_runs(before_root, log) if before_root is not None else None
    print(f"log: {args.lines:,} lines, {size / 1e6:.1f} MB; {args.event_share:.0%} from event "
          f"excerpts, {args.gpu_share:.0%} amdgpu chatter, the rest not about a GPU")
    print(f"grep -cE ({len(WORDS)} trigger words): {grep_s * 1e3:9.1f} ms  "
          f"({grep_out.strip()} matching lines)")
    rows = [("after (this tree)", after)]
    rows += [(f"before ({args.before})", before)] if before else []
    for label, (wall, rss0, rss1, lines, events) in rows:
        print(f"{label:19} read_kernel_events: {wall * 1e3:9.1f} ms  ({lines:,} lines, "
              f"{events:,} events)  ratio to grep {wall / grep_s:6.1f}x  "
              f"peak RSS {rss1 / 1024:.1f} MiB (+{(rss1 - rss0) / 1024:.1f} MiB while reading)")
    if before is None:
        print("before (main): not measured (no git or no main branch here)")
    else:
        print(f"speed-up after / before: {before[0] / after[0]:.1f}x")
    ratio = after[0] / grep_s
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"target: after <= {TARGET_RATIO:g}x grep -cE: {verdict} ({ratio:.1f}x)")
    print(f"this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
          f"load average at end: {_load()}")


if __name__ == "__main__":
    main()
