"""Methods from outside the tree, declared as a user's plugin module declares them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def use_plugins(monkeypatch: pytest.MonkeyPatch, modules: str) -> None:
    """Registers tests/plugins/ modules on PERFSUITE_PLUGINS, here and in every worker."""
    monkeypatch.setenv("PERFSUITE_PLUGINS", modules)
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", f"{TESTS}{os.pathsep}{path}" if path else str(TESTS))
    monkeypatch.syspath_prepend(str(TESTS))
