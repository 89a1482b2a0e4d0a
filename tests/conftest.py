"""Shared fixtures: the fake-method plugin on PERFSUITE_PLUGINS for worker processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def fake_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registers tests/plugins/fake_methods.py, here and in every worker started."""
    monkeypatch.setenv("PERFSUITE_PLUGINS", "plugins.fake_methods")
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", f"{TESTS}{os.pathsep}{path}" if path else str(TESTS))
    monkeypatch.syspath_prepend(str(TESTS))
