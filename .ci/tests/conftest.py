"""The GPU checklist's own tests (not the product's: ``python -m pytest .ci/tests``)."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """As in tests/: slow tests (whole calls rehearsed) need ``-m slow`` or PERFSUITE_SLOW=1."""
    if "slow" in (config.option.markexpr or "") or os.environ.get("PERFSUITE_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow on a 2-core CPU: run with -m slow or PERFSUITE_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
