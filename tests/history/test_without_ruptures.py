"""Without ruptures (the lent GPU's image lacks it) every command starts, and the ones that
search for change points say what is missing in one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from perfsuite.cli import main


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An 8-run demo history (long enough to search), then ruptures made unimportable."""
    db, demo = tmp_path / "history.sqlite", tmp_path / "demo"
    assert main(["history", "demo", "-o", str(demo), "--runs", "8", "--step-at", "4"]) == 0
    assert main(["history", "import", "--db", str(db), str(demo)]) == 0
    monkeypatch.setitem(sys.modules, "ruptures", None)
    return db


def test_history_check_names_the_missing_package(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["history", "check", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err == "error: change points need ruptures: pip install ruptures\n"


def test_dashboard_names_the_missing_package(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["dashboard", "--db", str(db), "-o", str(tmp_path / "site")]) == 2
    assert capsys.readouterr().err == "error: change points need ruptures: pip install ruptures\n"
