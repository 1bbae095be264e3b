"""Prune against links: a stale dir named through an alias by a running process is kept, and a
planted lock link is never followed (issue 11)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocmseat.cache.audit import audit_seat
from rocmseat.cache.prune import execute_prune, plan_prune
from rocmseat.cache.usage import scan_processes
from tests.cache.builders import build_audit_tree
from tests.cache.test_audit import NOW, currents, run_audit

STALE = "r0.stale-20261120T101500Z"


@pytest.fixture
def child() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait(timeout=30)


def test_stale_dir_used_through_an_alias_is_kept(
    tmp_path: Path, child: list[subprocess.Popen[str]]
) -> None:
    """Before: the process's VLLM_CACHE_ROOT named the stale dir through a symlink, the scan
    compared the text only, the plan said "no process uses it" and --yes removed it."""
    root = tmp_path / "cache"
    build_audit_tree(root)
    alias = tmp_path / "srv-cache-alias"
    alias.symlink_to(root / STALE)
    proc = subprocess.Popen(
        [sys.executable, "-c", "print('ready', flush=True); import sys; sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={"VLLM_CACHE_ROOT": str(alias / "vllm"), "PATH": "/usr/bin"},
    )
    child.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    # the real scan, narrowed to the child: this sandbox's pid 1 cannot be read at all, which
    # alone would make every answer "unknown"
    views = [v for v in scan_processes() if v.pid == proc.pid]
    audit = audit_seat("audit-seat", "f", root, currents(), now=NOW, processes=views)
    decisions = {item.entry.path.name: (item.remove, item.why)
                 for item in plan_prune([audit], older_than_s=0)}
    assert decisions[STALE] == (False, f"in use: yes (pid {proc.pid})")
    execute_prune(plan_prune([audit], older_than_s=0))
    assert (root / STALE).is_dir()


def test_planted_lock_link_keeps_the_dir(tmp_path: Path) -> None:
    audit = run_audit(tmp_path)
    plan = [item for item in plan_prune([audit], older_than_s=0) if item.remove]
    [item] = plan
    lock = tmp_path / "cache" / ".r0.lock"
    lock.unlink()
    target = tmp_path / "etc-nologin"
    lock.symlink_to(target)
    [(done, error)] = execute_prune(plan)
    assert done is item and error is not None
    assert ".r0.lock is a symlink" in error and error.endswith(": kept")
    assert item.entry.path.is_dir() and not target.exists()
