"""`history demo` and the issue's check: the committed reports plus a synthetic 60-run
history with a +5 % step at run 40 fail `history check` on the step's cells, and on no
other (the committed reports and the demo's flat method give no false alarm)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from render.conftest import STEP_AT, Site

from history.histories import blocks, history


def test_check_fails_on_the_step_at_its_commit_and_nowhere_else(
    history_site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert history(["check", "--db", str(history_site.db)]) == 1
    lines = blocks(capsys.readouterr().out, "REGRESSION")
    sha, before = history_site.demo_sha(STEP_AT), history_site.demo_sha(STEP_AT - 1)
    # Every cell of the slowed method (2 betas x 3 phases), none of the others'.
    assert len(lines) == 6
    for line in lines:
        assert " ours " in line and "synthetic demo GPU" in line and " time " in line
        assert f"{before[:10]} " in line and f"-> {sha[:10]} " in line
        size = float(re.search(r" time ([+-][\d.]+)%", line).group(1))
        assert 4.4 <= size <= 5.6


def test_demo_writes_synthetic_results_with_its_step_within_the_runs_asked(
    tmp_path: Path, capsys
) -> None:
    """`history demo --runs 5` said "--step-at 40: must be between 1 and --runs - 1",
    a flag never passed (issue 46): the step's default now follows --runs."""
    assert history(["demo", "--runs", "5", "-o", str(tmp_path / "d")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "5 synthetic runs (+5% on ours from run 3)" in out
    files = sorted((tmp_path / "d").glob("demo-*.json"))
    assert len(files) == 5  # results files, marked synthetic, ours 5 % slower at the end
    first, last = (json.loads(p.read_text()) for p in (files[0], files[-1]))
    assert first["env"]["device"]["synthetic"] is True and "step +5.0%" in first["env"]["synthetic"]
    ours = [r["median_ms"] for r in last["rows"] if r["method"] == "ours" and r["phase"] == "fwd"]
    base = [r["median_ms"] for r in first["rows"] if r["method"] == "ours" and r["phase"] == "fwd"]
    assert all(1.02 < a / b < 1.08 for a, b in zip(ours, base, strict=True))
    argv = ["demo", "--runs", "5", "--step-at", "7", "-o", str(tmp_path / "e")]
    assert history(argv) == 2
    assert capsys.readouterr().err == ("error: --step-at 7: must be between 1 and --runs - 1 (4)\n")
