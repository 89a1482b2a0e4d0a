"""docs/development.md's "Add a cell kind" recipe, run as it stands: a kind of a dozen
lines is measured by the harness, one worker process per method."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "development.md"


def recipe() -> str:
    section = DOC.read_text().split("## Add a cell kind", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return block


@pytest.mark.integration
def test_the_recipe_for_a_cell_kind_runs_as_written():
    scope: dict = {"__name__": "recipe"}
    exec(compile(recipe(), str(DOC), "exec"), scope)
    rows = scope["rows"]
    assert [(r["n"], r["phase"], r["status"]) for r in rows] == [
        (10**5, "count", "ok"),
        (10**6, "count", "ok"),
    ]
    assert all(r["median_ms"] > 0 for r in rows)
    assert all("busy" in r for r in rows)  # the harness marked the machine's state
