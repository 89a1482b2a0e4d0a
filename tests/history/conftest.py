"""The history tests' database path, and the dashboard tests' shared history (the
committed reports plus the 60-run demo with its +5 % step, built once a session)."""

from __future__ import annotations

from pathlib import Path

import pytest
from render.conftest import history_site  # noqa: F401


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "db" / "history.sqlite"
