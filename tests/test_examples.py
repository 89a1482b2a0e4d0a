"""The examples run as their docstrings say (torchrun on CPU, gloo)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # 7-30 s of ranks, workers or compiles here; `-m slow` runs it
def test_vocab_parallel_example_matches_one_device() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "examples/vocab_parallel.py"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 ranks, V=32000 in shards of 16000" in done.stdout
    found = re.search(r"loss (\S+), dE (\S+), dC (\S+)", done.stdout)
    assert found, done.stdout
    assert all(float(x) < 1e-5 for x in found.groups()), found.groups()


@pytest.mark.integration
def test_patch_model_example_prints_its_line_and_no_other_projects_noise() -> None:
    """torchao's "Failed to load ..._C_mxfp8...so" and torch's pytree deprecation lines
    (other projects', printed on import of transformers) are filtered out by name."""
    done = subprocess.run(
        [sys.executable, "examples/patch_model.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.fullmatch(r"one AdamW step, loss \d+\.\d{4}\n", done.stdout), done.stdout
    noise = ("Failed to load", "is an Enum subclass")
    assert not [line for line in done.stderr.splitlines() if any(n in line for n in noise)]
