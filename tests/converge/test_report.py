"""A quiet dry run (issue 30); the held-out table at 80 columns is checked with the
other tables in tests/render/test_fit.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_a_dry_run_prints_no_third_party_noise():
    """torchao's `Failed to load ..._C_mxfp8...so` and torch's `_pytree` enum warning,
    logged when transformers is first imported: only a fresh process shows them."""
    env = {k: v for k, v in os.environ.items() if k != "PERFSUITE_PLUGINS"}
    env["COLUMNS"] = "80"
    proc = subprocess.run(
        [sys.executable, "-m", "perfsuite.cli", "converge", "--preset", "smoke", "--dry-run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0 and "dry run: nothing trained" in proc.stdout
    printed = proc.stdout + proc.stderr
    assert "Failed to load" not in printed and "_pytree" not in printed, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(map(len, lines)) <= 80 and not any(line.endswith(" ") for line in lines)


@pytest.mark.parametrize("level", ["torchao", "torch.utils._pytree"])
def test_the_quieted_loggers_are_given_back(level):
    import logging

    from perfsuite.converge.model import quiet_imports

    logger = logging.getLogger(level)
    before = logger.level
    with quiet_imports():
        assert logger.level == logging.ERROR
    assert logger.level == before
