"""Bad numbers and URLs on the command line are one-line errors (exit 2), never a traceback.

Each test failed before its fix (issue 11 and the watch room's second review).
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("args", [
    ("--target", "http://[::1"),
    ("--target", "r0=http://[::1]:99999/metrics"),
    ("--target", "r0=http://h:8000/metrics\nHost: evil"),
    ("--target", "http://127.0.0.1:9/m", "--interval", "nan"),
    ("--target", "http://127.0.0.1:9/m", "--interval", "inf"),
    ("--target", "http://127.0.0.1:9/m", "--interval", "1e-300"),
    ("--target", "http://127.0.0.1:9/m", "--timeout", "nan"),
    ("--target", "http://127.0.0.1:9/m", "--timeout", "inf"),
    ("--target", "http://127.0.0.1:9/m", "--stall-after", "nan"),
    ("--target", "http://127.0.0.1:9/m", "--baseline-al", "inf"),
], ids=["ipv6-unclosed", "port-range", "newline", "interval-nan", "interval-inf",
        "interval-tiny", "timeout-nan", "timeout-inf", "stall-nan", "baseline-inf"])
def test_bad_numbers_and_urls_are_one_line_errors(rocmseat_cli, tmp_path, args):
    result = rocmseat_cli("watch", *args, "--once", "--state-dir", str(tmp_path))
    assert result.exit_code == 2, result.stderr
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("rocmseat: ")]
    assert len(errors) == 1 and "internal error" not in errors[0], result.stderr
    assert result.stdout == ""  # refused before any scrape


