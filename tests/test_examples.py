"""The examples run as their docstrings say (torchrun on CPU, gloo)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
