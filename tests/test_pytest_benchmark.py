"""`pytest tests/benchmarks --benchmark-only` times the suite's cells through
pytest-benchmark: a saved run holds each cell's samples, our synchronised clock and the
cell it measured. (Its `--benchmark-compare-fail` gate is pytest-benchmark's own
behaviour, not tested here; docs/regressions.md shows it.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CELL = "tests/benchmarks/test_bench_methods.py::test_method[eager-fwd]"


def bench(storage: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", CELL, "--benchmark-only", "-p", "no:cacheprovider",
         f"--benchmark-storage={storage}", "-q", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        # an xdist worker's variables would tell pytest-benchmark it runs under xdist
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")},
    )  # fmt: skip


@pytest.mark.integration
def test_benchmark_only_saves_each_cell_with_our_clock(tmp_path):
    first = bench(tmp_path, "--benchmark-autosave")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert "test_method[eager-fwd]" in first.stdout and "1 passed" in first.stdout
    saved = json.loads(next(tmp_path.rglob("*.json")).read_text())
    (entry,) = saved["benchmarks"]
    assert entry["stats"]["rounds"] == 20 and "synced_perf_counter" in entry["options"]["timer"]
    assert entry["extra_info"]["method"] == "eager" and entry["extra_info"]["phase"] == "fwd"
