"""What the README says about its own test command is what the tests do (issue 35, item 7)."""

from __future__ import annotations

from tests.conftest import REPO
from tests.e2e.harness import DEFAULT_PYTHON


def test_readme_says_the_suite_takes_30_minutes_and_starts_real_engines():
    text = " ".join((REPO / "README.md").read_text().split())
    assert "takes about 30 minutes" in text
    assert "**starts real engines**" in text
    # the venv it names is the one the engine tier looks for
    assert f"default `{DEFAULT_PYTHON}`" in text
    assert "$ROCMSEAT_VLLM_PYTHON" in text
    assert '`python3 -m pytest -m "not engine"` leaves them out' in text
