"""Time `rocmseat preflight --json` over a 16-GPU sysfs tree as a whole process (start included),
against the baseline `python -c pass` measured in the same run, from two installs: the editable
one of this checkout, and a regular one (a wheel built from this checkout, installed into a temp
venv that sees the system's site-packages for the dependencies). Also times the
node-problem-detector answer from a cached verdict (`--format npd --cached`) and prints its
length in bytes.

    python3 bench/bench_preflight.py [--gpus 16] [--runs 21] [--before REV] [--under-load]
                                     [--metrics-format 1.5|1.9] [--host mi300x-hive]
    python3 bench/bench_preflight.py --hostile 5000 [--seed 1]   # issue 11's long battery

Budget (issue 10): the regular install within 4x `python -c pass`, with gpu_metrics decoded and
the RAS counts read for every GPU (issue 17); the cached NPD answer within 3x (issue 32). The
commands run interleaved (baseline, editable, regular, npd, baseline, ...) and medians and
minimums are printed. A busy host does not slow them alike: it slows the baseline more than
the ratio's numerator and flatters the ratios (3.2-3.9x under load against 6.2x on a quiet host,
issue 32), so the load average is printed before and after, and above MAX_LOAD the ratios are
refused (`--under-load` prints them anyway, marked as such). As on a node, the commands run
with PYTHONDONTWRITEBYTECODE unset: the installs' bytecode is written once and read after.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
MAX_LOAD = 1.0  # the 1-minute load average above which a ratio is not reported
# what setuptools needs to build the wheel (pyproject.toml's data-files: systemd/, deploy/,
# checks/, launchers/, grafana/, prometheus/; a missing one fails the build)
WHEEL_SOURCES = ("pyproject.toml", "README.md", "rocmseat", "systemd", "deploy", "checks",
                 "launchers", "grafana", "prometheus")


def _builder() -> ModuleType:
    path = REPO / "tests" / "fixtures" / "build_sysfs_fixtures.py"
    spec = importlib.util.spec_from_file_location("build_sysfs_fixtures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _own_env() -> dict[str, str]:
    """The environment without PYTHONPATH: the regular install imports its own copy (a
    PYTHONPATH that names a checkout, as the editable run of a worktree needs, would shadow it);
    and without PYTHONDONTWRITEBYTECODE, as on a node."""
    return {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}


def _node_env() -> dict[str, str]:
    """This environment without PYTHONDONTWRITEBYTECODE (the editable run and the baseline)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def load_average() -> float:
    """The 1-minute load average (os.getloadavg: /proc/loadavg on Linux)."""
    return os.getloadavg()[0]


def _once(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env)
    return time.perf_counter() - start, proc


def _check(name: str, proc: subprocess.CompletedProcess[str]) -> None:
    if proc.returncode not in (0, 1):
        sys.exit(f"{name}: exited {proc.returncode}: {proc.stderr.strip()}")


def sources(tmp: Path, tag: str, rev: str | None) -> Path:
    """What a wheel is built from: this checkout's files, or those of git revision `rev`."""
    src = tmp / f"src-{tag}"
    src.mkdir()
    if rev is not None:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, *WHEEL_SOURCES],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        return src
    for name in WHEEL_SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(
                REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
            )
        else:
            shutil.copy2(REPO / name, src / name)
    return src


def install(tmp: Path, src: Path, tag: str, *, editable: bool) -> Path:
    """Install `src` into a venv of its own (a wheel, or editable); its `rocmseat` script."""
    venv = tmp / f"venv-{tag}"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                   check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    if editable:
        subprocess.run([*pip, "install", "--no-deps", "-e", str(src)],
                       check=True, env=_own_env())
    else:
        dist = tmp / f"dist-{tag}"
        subprocess.run([*pip, "wheel", "--no-deps", "-w", str(dist), str(src)], check=True)
        (wheel,) = dist.glob("rocmseat-*.whl")
        subprocess.run([*pip, "install", "--no-deps", "--no-index", str(wheel)], check=True)
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import rocmseat; print(rocmseat.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp, env=_own_env(),
    )
    home = src if editable else venv
    if not probe.stdout.strip().startswith(str(home)):
        sys.exit(f"the venv imports rocmseat from {probe.stdout.strip()}, not {home}")
    return venv / "bin" / "rocmseat"


def regular_install(tmp: Path) -> Path:
    """Build a wheel of this checkout and install it into a venv; its `rocmseat` script."""
    return install(tmp, sources(tmp, "this", None), "this", editable=False)


def editable_command() -> list[str]:
    script = shutil.which("rocmseat")
    return [script] if script else [sys.executable, "-m", "rocmseat"]


def timing(args: argparse.Namespace) -> int:
    builder = _builder()
    with tempfile.TemporaryDirectory(prefix="rocmseat-bench-") as tmp_name:
        tmp = Path(tmp_name)
        tree = tmp / "tree"
        rocm7 = args.metrics_format == "1.9"
        if args.host:
            # a committed fixture host (mi300x-hive: the xgmi family joins the run)
            host = builder.HOSTS[args.host]()
            builder.write_host(tree, host)
            args.gpus = len(host.kfd_gpus) // (8 if args.host.endswith("-cpx") else 1)
            print(f"fixture host {args.host}")
        else:
            builder.write_host(tree, builder.many_gpus(args.gpus, rocm7=rocm7))
        # every GPU of the tree carries the firmware's gpu_metrics (v1.5, or with 1.9 the
        # attribute table of the amdgpu ROCm 7 installs, issue 24, with ip_discovery, the BARs
        # and the module parameter) and amdgpu's ras/ (issue 17): preflight decodes one table
        # and reads the RAS counts per GPU
        print(f"gpu_metrics format {'of the host' if args.host else args.metrics_format}")
        metrics = sorted(tree.rglob("gpu_metrics"))
        ras = sorted(tree.rglob("ras"))
        print(f"{len(metrics)} gpu_metrics tables and {len(ras)} ras/ directories in the tree")
        if len(metrics) != args.gpus:
            sys.exit(f"the tree holds {len(metrics)} gpu_metrics files for {args.gpus} GPUs")
        state = tmp / "state"
        print("building a wheel of this checkout and installing it into a temp venv ...")
        regular = regular_install(tmp)
        common = ["preflight", "--sysfs-root", str(tree), "--state-dir", str(state)]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "editable install": [*editable_command(), *common, "--json"],
            "regular install": [str(regular), *common, "--json"],
            "npd --cached (regular)": [str(regular), *common, "--format", "npd", "--cached"],
        }
        envs = {name: _own_env() if "regular" in name else _node_env() for name in commands}
        if args.before:  # the same commands from revision REV, interleaved in the same run
            print(f"installing {args.before} (a wheel and an editable install) ...")
            old = sources(tmp, "before", args.before)
            old_regular = install(tmp, old, "before-regular", editable=False)
            old_editable = install(tmp, old, "before-editable", editable=True)
            before = {
                f"editable ({args.before})": [str(old_editable), *common, "--json"],
                f"regular ({args.before})": [str(old_regular), *common, "--json"],
                f"npd --cached ({args.before})": [str(old_regular), *common, "--format", "npd",
                                                  "--cached"],
            }
            commands.update(before)
            envs.update({name: _own_env() for name in before})
        for name, argv in commands.items():  # warm the page cache; write baseline and verdict
            _check(name, _once(argv, tmp, envs[name])[1])
        times: dict[str, list[float]] = {name: [] for name in commands}
        npd_line = ""
        load_before = load_average()
        for _ in range(args.runs):
            for name, argv in commands.items():
                seconds, proc = _once(argv, tmp, envs[name])
                _check(name, proc)
                times[name].append(seconds)
                if name == "npd --cached (regular)":
                    npd_line = proc.stdout.rstrip("\n")
    load_after = load_average()
    base_median = statistics.median(times["python -c pass"])
    base_min = min(times["python -c pass"])
    load = max(load_before, load_after)
    quiet = load <= MAX_LOAD
    print(f"{args.gpus}-GPU tree, {args.runs} interleaved runs each; load average "
          f"{load_before:.2f} before, {load_after:.2f} after (1 min, {os.cpu_count()} CPUs)")
    if not quiet:
        print(f"load average {load:.2f} > {MAX_LOAD:g}: the host is busy, and a busy host slows "
              "the baseline more than the commands: "
              + ("ratios printed anyway (--under-load), NOT budget figures" if args.under_load
                 else "no ratio is reported (run on a quiet host, or --under-load)"))
    for name, values in times.items():
        median, fastest = statistics.median(values), min(values)
        ratio = ""
        if name != "python -c pass" and (quiet or args.under_load):
            ratio = (f"  ratio {median / base_median:.2f}x median, {fastest / base_min:.2f}x min"
                     + ("" if quiet else f" (UNDER LOAD {load:.2f})"))
        print(f"  {name:<24} median {median * 1000:7.1f} ms  min {fastest * 1000:7.1f} ms{ratio}")
    print(f"npd line ({len(npd_line.encode())} bytes): {npd_line}")
    return 0


def hostile(args: argparse.Namespace) -> int:
    sys.path.insert(0, str(REPO))
    from tests.preflight import hostile as battery

    start = time.monotonic()
    code = battery.main(["--rounds", str(args.hostile), "--seed", str(args.seed)])
    print(f"{args.hostile} rounds in {time.monotonic() - start:.1f} s")
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--gpus", type=int, default=16)
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--metrics-format", choices=("1.5", "1.9"), default="1.5",
                        help="the gpu_metrics tables of the tree (1.9: the ROCm 7 amdgpu)")
    parser.add_argument("--host", metavar="NAME",
                        help="time this committed fixture host instead (build_sysfs_fixtures "
                        "HOSTS, e.g. mi300x-hive: eight GPUs in one XGMI hive)")
    parser.add_argument("--hostile", type=int, default=0, metavar="ROUNDS",
                        help="run issue 11's hostile sysfs battery this many rounds instead")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--before", metavar="REV",
                        help="also time git revision REV's installs in the same run")
    parser.add_argument("--under-load", action="store_true",
                        help=f"print the ratios even above load {MAX_LOAD:g}, marked as such")
    args = parser.parse_args()
    os.environ.pop("ROCMSEAT_SYSFS_ROOT", None)
    return hostile(args) if args.hostile else timing(args)


if __name__ == "__main__":
    sys.exit(main())
