"""The hostile sysfs battery of issue 11: copy a fixture tree, apply random mutations, run
preflight, and judge the outcome.

    python3 -m tests.preflight.hostile --rounds 5000 --seed 1   # the long version

Each round copies one fixture tree to a temp dir, applies 1-3 mutations to files or symlinks of
the tree (garbage, empty, huge, NUL bytes, a directory, a dangling or looping symlink, a FIFO,
mode 000, non-finite numbers), runs `rocmseat preflight --json` in this process through the real
error boundary (`rocmseat.cli.main.main`), and records a violation when:

- the exit code is 3 (or anything but 0, 1, 2), or stderr holds a traceback;
- stdout is not strict JSON (NaN/Infinity refused) when the run made a report;
- a GPU of the pristine tree vanished without a finding naming its card;
- the exit code is 0 although a file the verdict needs was made unreadable.

`needed_files` lists what the verdict needs, from the pristine tree's own inventory: the
identity (vendor, device, class), link, NUMA and AER files of each GPU's function, the link,
vendor and AER files of every hop on its path, its NUMA node's cpulist and distance, every CPU's
physical_package_id, pp_dpm_pcie and pcie_replay_count, and the DRM card links.

A round that hangs is caught by the caller's deadline (the test runs the battery in a child
process with a timeout and names the round that was running).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "sysfs"
TREES = ("x99-r9700", "x99-r9700-degraded", "mi300x-8gpu", "mi300x-8gpu-rocm7", "mi300x-hive",
         "single-socket-numa-unknown",
         "vm-rdna4", "vm-qemu-rootport", "vm-polaris")

MUTATIONS = (
    "garbage", "empty", "huge", "nul", "directory", "dangling", "loop", "fifo", "mode000",
    "nonfinite",
)
LINK_FILES = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
AER_FILES = (
    "aer_dev_correctable", "aer_dev_nonfatal", "aer_dev_fatal", "aer_rootport_total_err_cor",
    "aer_rootport_total_err_fatal", "aer_rootport_total_err_nonfatal",
)
# Files whose empty content is a legal value: pp_dpm_pcie ("the ASIC prints no levels"),
# cpulists (a memory-only NUMA node).
EMPTY_IS_LEGAL = ("pp_dpm_pcie", "cpulist", "local_cpulist", "gpu_vram_bad_pages")


@dataclass
class Outcome:
    round: int
    tree: str
    mutations: list[tuple[str, str]]  # (mutation, path relative to the tree)
    exit_code: int
    seconds: float
    damaged_needed: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


def needed_files(tree: Path) -> set[str]:
    """Paths (relative to `tree`, no symlink resolved in the last component) the verdict needs."""
    from rocmseat.node.firmware import firmware_link
    from rocmseat.node.inventory import read_inventory

    inv = read_inventory(tree)
    needed: set[str] = set()

    def rel(path: Path) -> str:
        return os.path.relpath(path, tree)

    for gpu in inv.gpus:
        endpoint = gpu.endpoint
        card = tree / "class" / "drm" / (gpu.card or "")
        needed.add(rel(card))
        device_dir = Path(os.path.realpath(card))
        needed.add(rel(device_dir / "device"))
        gpu_dir = _function_dir(tree, endpoint.address)
        # Where the GPU firmware states the link (pp_dpm_pcie's star, gpu_metrics), a damaged
        # link file is judged from the firmware and said so (issue 17): the firmware's files are
        # what the verdict needs then.
        links = () if firmware_link(gpu).known else LINK_FILES
        for name in ("vendor", "device", "class", "numa_node", "local_cpulist",
                     "pp_dpm_pcie", "gpu_metrics", "pcie_replay_count", *links, *AER_FILES):
            needed.add(rel(gpu_dir / name))
        if gpu.amdgpu.ras is not None:  # amdgpu's RAS counts decide the ras family
            needed.update(rel(p) for p in (gpu_dir / "ras").iterdir())
            # and the driver's bad-page threshold: its module parameter and MP0 version
            needed.add("module/amdgpu/parameters/bad_page_threshold")
            mp0 = gpu_dir / "ip_discovery/die/0/255/0"
            needed.update(rel(mp0 / n) for n in ("major", "minor", "revision"))
        needed.add(rel(gpu_dir / "resource"))  # the large-BAR check (issue 24)
        for hop in gpu.path[1:]:
            hop_dir = _function_dir(tree, hop.address)
            for name in (*(("vendor",) if links else ()), *links, *AER_FILES):
                needed.add(rel(hop_dir / name))
        if gpu.numa_node is not None:
            node = tree / "devices/system/node" / f"node{gpu.numa_node}"
            needed.update({rel(node / "cpulist"), rel(node / "distance")})
    for cpu in (tree / "devices/system/cpu").glob("cpu[0-9]*"):
        needed.add(rel(cpu / "topology" / "physical_package_id"))
    return {path for path in needed if os.path.lexists(tree / path)}


def _function_dir(tree: Path, address: str) -> Path:
    return Path(os.path.realpath(tree / "bus" / "pci" / "devices" / address))


def candidates(tree: Path) -> list[str]:
    """Every file and symlink of the tree (the README aside), relative to it."""
    out = []
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            if name != "README":
                out.append(os.path.relpath(path, tree))
    return sorted(out)


def mutate(path: Path, how: str, rng: random.Random) -> None:
    """Apply one mutation in place (the path may be a file or a symlink)."""
    old = b""
    if path.is_file() and not path.is_symlink():
        old = path.read_bytes()
    if how == "mode000":
        if not path.is_symlink():
            path.chmod(0)
        return
    _remove(path)
    if how == "garbage":
        path.write_bytes(b"\xff" + os.urandom(rng.randrange(0, 24)) + b"garbage\n")
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "huge":
        path.write_bytes(b"1" * (2 << 16))
    elif how == "nul":
        cut = rng.randrange(0, max(len(old), 1))
        path.write_bytes(old[:cut] + b"\x00" + old[cut:] if old else b"\x00")
    elif how == "directory":
        path.mkdir()
    elif how == "dangling":
        path.symlink_to(path.parent / f".gone-{rng.randrange(1 << 30)}")
    elif how == "loop":
        path.symlink_to(path.name)
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "nonfinite":
        path.write_bytes(rng.choice([b"nan\n", b"inf\n", b"-inf\n", b"1e999\n", b"NaN 1\n"]))
    else:
        raise ValueError(how)


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink()
    else:
        shutil.rmtree(path)


def damages(how: str, relpath: str, needed: set[str], as_root: bool, was_link: bool) -> bool:
    """Does this mutation make a file the verdict needs unreadable?"""
    if relpath not in needed:
        return False
    if how == "mode000":
        # root reads mode-000 files; a symlink's mode is not changed (chmod follows it)
        return not as_root and not was_link
    if how == "empty":
        return os.path.basename(relpath) not in EMPTY_IS_LEGAL
    return True


def _strict_json(text: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"non-finite {name} in JSON output")

    return json.loads(text, parse_constant=refuse)


def run_preflight_in_process(tree: Path, state: Path) -> tuple[int, str, str]:
    from rocmseat.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["preflight", "--sysfs-root", str(tree), "--state-dir", str(state), "--json"])
    return code, out.getvalue(), err.getvalue()


def judge(outcome: Outcome, stdout: str, stderr: str, pristine_cards: set[str]) -> None:
    code = outcome.exit_code
    if code not in (0, 1, 2):
        outcome.violations.append(f"exit {code}")
    if "Traceback" in stderr or "internal error" in stderr:
        outcome.violations.append(f"traceback: {stderr.strip().splitlines()[-1:]}")
    doc: object = None
    if stdout:
        try:
            doc = _strict_json(stdout)
        except ValueError as exc:
            outcome.violations.append(f"stdout is not strict JSON: {exc}")
    elif code != 2 or len(stderr.strip().splitlines()) != 1:
        outcome.violations.append("no report and no one-line error")
    if isinstance(doc, dict) and "error" in doc:
        # `--json` that could not check prints its error document (schema, exit_code, error)
        if code != 2 or doc.get("exit_code") != 2 or not isinstance(doc["error"], str) \
                or "\n" in doc["error"] or doc.get("schema") != "rocmseat.preflight/v1":
            outcome.violations.append(f"error document that is not one exit-2 line: {doc}")
    elif isinstance(doc, dict):
        seen = {g["card"] for g in doc["gpus"]}
        named = {f["subject"] for f in doc["findings"] if f["check_id"] == "inventory.card"}
        lost = pristine_cards - seen - named
        if lost and "class/drm" not in named:
            outcome.violations.append(f"GPU card(s) vanished without a finding: {sorted(lost)}")
    if code == 0 and outcome.damaged_needed:
        outcome.violations.append(f"healthy verdict with unreadable {outcome.damaged_needed}")


@dataclass
class _Pristine:
    needed: set[str]
    candidates: list[str]
    cards: set[str]


def pristine_facts() -> dict[str, _Pristine]:
    from rocmseat.node.inventory import read_inventory

    facts = {}
    for name in TREES:
        tree = FIXTURES / name
        inv = read_inventory(tree)
        facts[name] = _Pristine(
            needed_files(tree), candidates(tree), {g.card or "" for g in inv.gpus}
        )
    return facts


@dataclass(frozen=True)
class _Saved:
    link: str | None
    data: bytes
    mode: int


def _save(path: Path) -> _Saved:
    if path.is_symlink():
        return _Saved(os.readlink(path), b"", 0)
    return _Saved(None, path.read_bytes(), path.stat().st_mode & 0o777)


def _restore(path: Path, saved: _Saved) -> None:
    if os.path.lexists(path):
        _remove(path)
    if saved.link is not None:
        os.symlink(saved.link, path)
    else:
        path.write_bytes(saved.data)
        path.chmod(saved.mode)


def battery(
    rounds: int,
    seed: int,
    workdir: Path,
    progress: Path | None = None,
    mutations: tuple[str, ...] = MUTATIONS,
) -> Iterator[Outcome]:
    """`rounds` rounds over working copies of the trees (mutated, then restored each round)."""
    rng = random.Random(seed)
    facts = pristine_facts()
    as_root = os.geteuid() == 0
    copies = {name: workdir / "trees" / name for name in TREES}
    for name, tree in copies.items():
        shutil.copytree(FIXTURES / name, tree, symlinks=True)
    for index in range(rounds):
        name = rng.choice(TREES)
        fact, tree = facts[name], copies[name]
        needed = sorted(fact.needed)
        picks: list[tuple[str, str]] = []
        for _ in range(rng.randint(1, 3)):
            pool = needed if rng.random() < 0.6 else fact.candidates
            relpath = rng.choice(pool)
            if any(relpath == p or relpath.startswith(p + "/") or p.startswith(relpath + "/")
                   for _, p in picks):
                continue
            picks.append((rng.choice(mutations), relpath))
        saved = {relpath: _save(tree / relpath) for _, relpath in picks}
        links = {p for p, s in saved.items() if s.link is not None}
        for how, relpath in picks:
            mutate(tree / relpath, how, rng)
        if progress is not None:
            progress.write_text(json.dumps({"round": index, "tree": name, "mutations": picks}))
        state = workdir / "state" / str(index)
        start = time.monotonic()
        try:
            code, stdout, stderr = run_preflight_in_process(tree, state)
        finally:
            for relpath, old in saved.items():
                _restore(tree / relpath, old)
        outcome = Outcome(index, name, picks, code, time.monotonic() - start)
        outcome.damaged_needed = [
            p for how, p in picks if damages(how, p, fact.needed, as_root, p in links)
        ]
        judge(outcome, stdout, stderr, fact.cards)
        shutil.rmtree(state, ignore_errors=True)
        yield outcome
    for name, tree in copies.items():
        left = _differences(FIXTURES / name, tree)
        if left:
            raise AssertionError(f"{name}: the battery did not restore {left[:3]}")


def _differences(left: Path, right: Path) -> list[str]:
    sys.path.insert(0, str(REPO / "tests" / "fixtures"))
    try:
        import build_sysfs_fixtures
    finally:
        sys.path.pop(0)
    return list(build_sysfs_fixtures.tree_differences(left, right))


def summarize(outcomes: list[Outcome]) -> dict[str, object]:
    by_exit: dict[str, int] = {}
    for o in outcomes:
        by_exit[str(o.exit_code)] = by_exit.get(str(o.exit_code), 0) + 1
    return {
        "rounds": len(outcomes),
        "mutations": sum(len(o.mutations) for o in outcomes),
        "rounds_with_needed_file_damaged": sum(bool(o.damaged_needed) for o in outcomes),
        "exit_codes": dict(sorted(by_exit.items())),
        "exit_3": by_exit.get("3", 0),
        "healthy_on_unreadable": sum(
            1 for o in outcomes if o.exit_code == 0 and o.damaged_needed
        ),
        "violations": [
            {"round": o.round, "tree": o.tree, "mutations": o.mutations, "why": o.violations}
            for o in outcomes
            if o.violations
        ],
        "slowest_round_s": round(max((o.seconds for o in outcomes), default=0.0), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--progress", type=Path, default=None)
    parser.add_argument("--mutations", default=",".join(MUTATIONS), help="comma-separated")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="work here (default: a temp dir removed at the end)")
    args = parser.parse_args(argv)
    mutations = tuple(args.mutations.split(","))
    if not set(mutations) <= set(MUTATIONS):
        parser.error(f"--mutations: choose from {','.join(MUTATIONS)}")
    with contextlib.ExitStack() as stack:
        if args.workdir is None:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rocmseat-hostile-")))
        else:
            tmp = args.workdir
            tmp.mkdir(parents=True, exist_ok=True)
        os.environ["ROCMSEAT_ERROR_LOG"] = str(tmp / "crash.log")
        outcomes = list(battery(args.rounds, args.seed, tmp, args.progress, mutations))
    print(json.dumps(summarize(outcomes), indent=2))
    return 1 if any(o.violations for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
