"""The README and the shipped profiles say the AER window the code uses (issue 35, item 7):
a fixed window (rocmseat.preflight.windows.DEFAULT_WINDOW_S), never "since the last run"."""

from __future__ import annotations

import re

import pytest

from rocmseat.preflight.windows import DEFAULT_WINDOW_S
from tests.conftest import REPO

SHIPPED = [REPO / "README.md", *sorted((REPO / "checks").glob("*.toml"))]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_no_since_the_last_run(path):
    text = " ".join(path.read_text().split())
    said = [m.start() for m in re.finditer(r"since the last run", text)]
    # only ever as the thing the window is not
    assert all(text[max(0, i - 7):i] == 'never "' for i in said), path


def test_readme_names_the_window_the_code_uses():
    text = " ".join((REPO / "README.md").read_text().split())
    assert f"the last {DEFAULT_WINDOW_S // 3600} h" in text
    profile = (REPO / "checks" / "x99-r9700.toml").read_text()
    assert f"the last {DEFAULT_WINDOW_S // 3600} h" in profile
