"""Shared fixtures: the fake-method plugin on PERFSUITE_PLUGINS for worker processes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perfsuite.checkout import drop_checkout_root

# `python -m pytest` puts the checkout's root on sys.path, where our kernels/ would be
# taken for Hugging Face's `kernels` by transformers (issue 20). The tests import
# their helpers from tests/ (pytest's rootdir entry), never through the root.
drop_checkout_root()

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def fake_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Registers tests/plugins/fake_methods.py, here and in every worker started."""
    monkeypatch.setenv("PERFSUITE_PLUGINS", "plugins.fake_methods")
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", f"{TESTS}{os.pathsep}{path}" if path else str(TESTS))
    monkeypatch.syspath_prepend(str(TESTS))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Slow tests (kernel grids, end-to-end runs) need ``-m slow`` or PERFSUITE_SLOW=1."""
    if "slow" in (config.option.markexpr or "") or os.environ.get("PERFSUITE_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow on a 2-core CPU: run with -m slow or PERFSUITE_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
