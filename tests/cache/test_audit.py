"""cache-audit over a built fixture tree: states, diffs, in-use, goldens, prune plan."""

# ruff: noqa: E501  (tables of cases read best one per line)

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from rocmseat.cache.audit import audit_seat, judge_entry
from rocmseat.cache.audit_render import audit_json, audit_table, human_age, human_size
from rocmseat.cache.current import CurrentKey
from rocmseat.cache.prune import execute_prune, parse_duration, plan_prune
from rocmseat.cache.usage import InUse, ProcessView, Use, judge_use
from rocmseat.errors import ConfigError
from tests.cache.builders import AUDIT_NOW_TS, CURRENT_FACTORS, build_audit_tree

NOW = dt.datetime.fromtimestamp(AUDIT_NOW_TS, dt.UTC)


def currents(**unknown: str) -> dict[str, CurrentKey]:
    factors = {k: v for k, v in CURRENT_FACTORS.items() if k not in unknown}
    return {r: CurrentKey("audit-seat", r, dict(factors), dict(unknown)) for r in ("r0", "r1", "r2")}


def processes(root: Path) -> list[ProcessView]:
    return [
        ProcessView(4242, "python", {"VLLM_CACHE_ROOT": f"{root}/r0/vllm", "PATH": "/usr/bin"}, ()),
        ProcessView(777, "tar", {"HOME": "/root"},
                    (f"{root}/r1.stale-20261127T080000Z/vllm/torch_compile_cache/dd/rank_0_0/model",)),
        ProcessView(1, "init", {}, ()),
    ]


def run_audit(tmp_path: Path, **unknown: str):  # type: ignore[no-untyped-def]
    root = tmp_path / "cache"
    build_audit_tree(root)
    return audit_seat("audit-seat", "launchers/audit.toml", root, currents(**unknown), now=NOW,
                      processes=processes(root))


def test_states(tmp_path: Path) -> None:
    audit = run_audit(tmp_path)
    by_name = {e.path.name: e for e in audit.entries}
    assert set(by_name) == {"r0", "r0.stale-20261120T101500Z", "r1", "r1.stale-20261127T080000Z", "r2"}
    assert by_name["r0"].state == "current" and by_name["r0"].in_use.pids == (4242,)
    assert by_name["r0"].stats.file_count == 4 and by_name["r0"].stats.size_bytes > 6 << 20
    assert by_name["r1"].state == "stale"
    assert [c.describe() for c in by_name["r1"].changes] == ["speculative.num_speculative_tokens: 5 -> 7"]
    assert by_name["r2"].state == "unkeyed" and by_name["r2"].in_use.use is Use.NO
    moved = by_name["r0.stale-20261120T101500Z"]
    assert moved.state == "moved-aside" and moved.replica == "r0"
    assert {c.factor for c in moved.changes} == {"env.RADIANCE_MXFP4_MOE", "speculative.num_speculative_tokens"}
    assert by_name["r1.stale-20261127T080000Z"].in_use.pids == (777,)
    # why each dir was moved comes from the manifest of the dir that replaced it
    assert moved.moved_because == "changed: env.RADIANCE_MXFP4_MOE: 0 -> 1; speculative.num_speculative_tokens: 5 -> 7"
    assert by_name["r1.stale-20261127T080000Z"].moved_because == "changed: env.RADIANCE_MXFP4_MOE: 0 -> 1"
    assert by_name["r0"].moved_because is None


def test_unknown_factors_are_not_guessed(tmp_path: Path) -> None:
    audit = run_audit(tmp_path, engine="engine python /opt/vllm/bin/python: not found")
    by_name = {e.path.name: e for e in audit.entries}
    assert by_name["r0"].state == "unknown" and by_name["r0"].unknown == ("engine",)
    assert by_name["r1"].state == "stale"  # a known factor differs: stale whatever the engine
    table = audit_table([audit])
    assert "current key unknown: these factors could not be computed:\n      engine: engine python /opt/vllm/bin/python: not found\n" in table


def test_golden_json_and_table(tmp_path: Path, golden: Callable[[str, str], None]) -> None:
    audit = run_audit(tmp_path)
    text = json.dumps(audit_json([audit], now=NOW), indent=2, sort_keys=True) + "\n"
    golden("cache-audit.json", text.replace(str(tmp_path), "<tmp>"))
    golden("cache-audit-table.txt", audit_table([audit]).replace(str(tmp_path), "<tmp>"))


def test_judge_entry_digest_mismatch() -> None:
    current = CurrentKey("s", "r0", dict(CURRENT_FACTORS), {})
    assert judge_entry({"key": "0" * 64, "factors": CURRENT_FACTORS}, current) == ("stale", ())


def test_symlinked_root_is_a_problem(tmp_path: Path) -> None:
    build_audit_tree(tmp_path / "real")
    (tmp_path / "cache").symlink_to(tmp_path / "real")
    audit = audit_seat("audit-seat", "f", tmp_path / "cache", currents(), now=NOW, processes=[])
    assert len(audit.problems) == 1
    assert audit.problems[0].startswith(f"cache root {tmp_path / 'cache'} is a symlink to ")
    assert audit.problems[0].endswith("launch will refuse it")
    assert "  ! cache root" in audit_table([audit])


def test_missing_root(tmp_path: Path) -> None:
    audit = audit_seat("s", "f", tmp_path / "nope", currents(), now=NOW, processes=[])
    assert audit.entries == () and "does not exist yet" in audit.problems[0]


@pytest.mark.parametrize(("views", "expected"), [
    ([], InUse(Use.NO)),
    ([ProcessView(5, "x", None, None)], InUse(Use.UNKNOWN, (), 1, (5,))),
    ([ProcessView(5, "x", None, None), ProcessView(6, "y", {"P": "/c/r0"}, None)], InUse(Use.YES, (6,), 1, (5,))),
    ([ProcessView(6, "y", {"PYTHONPATH": "/a:/c/r0/lib"}, None)], InUse(Use.YES, (6,))),
    ([ProcessView(6, "y", {"P": "/c/r0x"}, ("/c/r00/f",))], InUse(Use.NO)),
    ([ProcessView(6, "y", None, ("/c/r0/f",))], InUse(Use.YES, (6,))),
])
def test_judge_use(views: list[ProcessView], expected: InUse) -> None:
    assert judge_use(Path("/c/r0"), views) == expected


def test_prune_plan_and_act(tmp_path: Path) -> None:
    audit = run_audit(tmp_path)
    plan = plan_prune([audit], older_than_s=parse_duration("1d"))
    decisions = {item.entry.path.name: (item.remove, item.why) for item in plan}
    assert decisions == {
        "r0.stale-20261120T101500Z": (True, "moved aside 9d ago, no process uses it"),
        "r1.stale-20261127T080000Z": (False, "in use: yes (pid 777)"),
    }
    younger = plan_prune([audit], older_than_s=parse_duration("14d"))
    assert not any(item.remove for item in younger)
    done = execute_prune(plan)
    assert [(item.entry.path.name, error) for item, error in done] == [("r0.stale-20261120T101500Z", None)]
    remaining = sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith("."))
    assert remaining == ["r0", "r1", "r1.stale-20261127T080000Z", "r2"]


def test_prune_keeps_when_use_unknown(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    build_audit_tree(root)
    audit = audit_seat("audit-seat", "f", root, currents(), now=NOW,
                       processes=[ProcessView(1, "init", None, None)])
    plan = plan_prune([audit], older_than_s=0)
    assert not any(item.remove for item in plan)
    assert all("cannot tell" in item.why and "not readable: pid 1)" in item.why for item in plan)


def test_prune_rechecks_before_removing(tmp_path: Path) -> None:
    """Between the printed plan and --yes a process may start using a dir, or an operator may
    rename it back to live for a rollback: either way it is kept."""
    audit = run_audit(tmp_path)
    plan = [item for item in plan_prune([audit], older_than_s=0) if item.remove]
    [item] = plan
    done = execute_prune(plan, recheck=lambda path: InUse(Use.YES, (99,)))
    assert done == [(item, "in use now: yes (pid 99): kept")] and item.entry.path.is_dir()
    done = execute_prune(plan, recheck=lambda path: InUse(Use.UNKNOWN, (), 1, (1,)))
    assert done[0][1] is not None and "unknown" in done[0][1] and item.entry.path.is_dir()
    item.entry.path.rename(tmp_path / "cache" / "r0-rollback")
    item.entry.path.symlink_to(tmp_path / "cache" / "r0-rollback")
    done = execute_prune(plan, recheck=lambda path: InUse(Use.NO))
    assert done == [(item, "no longer a moved-aside directory: kept")]
    assert (tmp_path / "cache" / "r0-rollback").is_dir()


@pytest.mark.parametrize(("text", "seconds"), [("14d", 14 * 86400), ("36h", 129600), ("90m", 5400), ("2w", 1209600), ("1.5d", 129600)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["14", "d", "-1d", "14 days", ""])
def test_parse_duration_bad(text: str) -> None:
    with pytest.raises(ConfigError, match="--older-than"):
        parse_duration(text)


def test_human_units() -> None:
    assert human_size(512) == "512 B" and human_size(3 << 20) == "3.0 MiB" and human_size(5 << 40) == "5120.0 GiB"
    assert human_age(None) == "-" and human_age(59) == "59s" and human_age(9 * 86400 + 5) == "9d"


def test_cache_root_under_a_linked_folder_is_in_use_by_a_process_holding_a_file(
        tmp_path: Path) -> None:
    """The kernel reports open files with links resolved (/proc/PID/fd); a cache root reached
    through a linked folder (/var/cache -> /srv/cache) must still match (issue 11)."""
    import subprocess
    import sys
    import time

    from rocmseat.cache.usage import scan_processes

    real = tmp_path / "srv"
    (real / "cache" / "r0").mkdir(parents=True)
    (real / "cache" / "r0" / "graph.bin").write_text("x")
    (tmp_path / "var").symlink_to(real)
    root = tmp_path / "var" / "cache"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; f = open(sys.argv[1]); print('open', flush=True); time.sleep(60)",
         str(root / "r0" / "graph.bin")], stdout=subprocess.PIPE, text=True,
        env={"PATH": "/usr/bin:/bin"})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        deadline = time.monotonic() + 10
        views = [v for v in scan_processes() if v.pid == holder.pid]
        while not views and time.monotonic() < deadline:
            time.sleep(0.1)
            views = [v for v in scan_processes() if v.pid == holder.pid]
        audit = audit_seat("s", "f", root, currents(), now=NOW, processes=views)
        (entry,) = [e for e in audit.entries if e.path.name == "r0"]
        assert entry.in_use.use is Use.YES and holder.pid in entry.in_use.pids
    finally:
        holder.kill()
        holder.wait()
