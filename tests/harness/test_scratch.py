"""Worker folders are removed even after the run that made them was SIGKILLed."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from perfsuite.harness.scratch import PREFIX, remove_own, remove_stale, scratch


@pytest.mark.integration
def test_a_killed_runs_folder_is_removed_by_the_next(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    pid = int(dead.stdout)  # exited: its folder is stale
    left = tmp_path / f"{PREFIX}{pid}-abc"
    left.mkdir()
    (left / "spec-1.json").write_text("{}")
    with scratch() as mine:
        assert not left.exists()
        assert Path(mine).name.startswith(f"{PREFIX}{__import__('os').getpid()}-")
        assert remove_stale() == []  # a live run's folder stays
        assert Path(mine).exists()
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_removes_the_folders_of_this_run_only(tmp_path, monkeypatch):
    """A folder made but cut short by an interrupt goes; another live run's stays."""
    import os

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = scratch()  # never entered, as when the interrupt lands between make and `with`
    other = tmp_path / f"{PREFIX}{os.getppid()}-abc"
    other.mkdir()
    remove_own()
    assert not Path(made.name).exists() and other.exists()
    made.cleanup()  # already gone: no error
