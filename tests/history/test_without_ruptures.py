"""Without ruptures (the lent GPU's image lacks it) every command starts, and the ones that
search for change points say what is missing in one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from perfsuite.cli import main


def test_check_and_dashboard_name_the_missing_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db, demo = tmp_path / "history.sqlite", tmp_path / "demo"  # 8 runs: long enough to search
    assert main(["history", "demo", "-o", str(demo), "--runs", "8", "--step-at", "4"]) == 0
    assert main(["history", "import", "--db", str(db), str(demo)]) == 0
    monkeypatch.setitem(sys.modules, "ruptures", None)
    capsys.readouterr()
    said = "error: change points need ruptures: pip install ruptures\n"
    for argv in (["history", "check"], ["dashboard", "-o", str(tmp_path / "site")]):
        assert main([*argv, "--db", str(db)]) == 2
        assert capsys.readouterr().err == said, argv
