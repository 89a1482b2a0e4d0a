"""Worker folders are removed even after the run that made them was SIGKILLed."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from perfsuite.harness.scratch import PREFIX, remove_stale, scratch


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
