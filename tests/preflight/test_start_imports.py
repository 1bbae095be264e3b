"""What preflight's start imports (issue 32, "Speed: preflight's start"): each path imports what
it uses. The cached NPD answer reads one file, so none of the state dir's writers (atomic,
jsonio: json, fcntl, tempfile) nor the full run's readers and renderers, and no click (the
console entry answers it itself, rocmseat.cli.npd_fast); the full run's JSON needs no table
wrapping."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.conftest import REPO

X99 = REPO / "tests" / "fixtures" / "sysfs" / "x99-r9700"


def _imported(args: list[str], modules: tuple[str, ...]) -> tuple[int, list[str]]:
    code = (
        "import sys; from rocmseat.cli.main import main; "
        f"rc = main({args!r}); "
        f"print(rc, [m for m in {modules!r} if m in sys.modules], file=sys.stderr)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=REPO)
    rc, _, found = proc.stderr.strip().splitlines()[-1].partition(" ")
    return int(rc), ast.literal_eval(found)


def test_the_cached_npd_answer_imports_no_writer_and_no_full_run(tmp_path):
    common = ["preflight", "--sysfs-root", str(X99), "--state-dir", str(tmp_path)]
    assert _imported([*common, "--json"], ())[0] == 0  # the verdict the answer reads
    writers = ("rocmseat.atomic", "rocmseat.jsonio", "rocmseat.preflight.run",
               "rocmseat.preflight.render", "rocmseat.node.inventory", "rocmseat.sysfs.pci",
               "pydantic", "pydantic_core", "rich", "click", "rocmseat.cli.root",
               "rocmseat.cli.preflight")
    assert _imported([*common, "--format", "npd", "--cached"], writers) == (0, [])
    # the check can fail: the full run imports them
    assert _imported([*common, "--json"], writers[:5]) == (0, list(writers[:5]))
    assert _imported([*common, "--json"], writers[-3:]) == (0, list(writers[-3:]))


def test_json_output_wraps_no_text(tmp_path):
    args = ["preflight", "--sysfs-root", str(X99), "--state-dir", str(tmp_path), "--json"]
    assert _imported(args, ("textwrap",)) == (0, [])
    assert _imported([*args[:-1], "--problems"], ("textwrap",)) == (0, ["textwrap"])
