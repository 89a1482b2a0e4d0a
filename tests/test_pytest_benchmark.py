"""`pytest tests/benchmarks --benchmark-only` times the suite's cells through
pytest-benchmark, and `--benchmark-compare-fail=median:5%` gates on a saved run.

The saved run is doctored to make the verdict deterministic: halving its
timings makes any fresh run look ~100 % slower (must fail), doubling them makes
it look faster (must pass)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CELL = "tests/benchmarks/test_bench_methods.py::test_method[eager-fwd]"
STAT_KEYS = ("min", "max", "mean", "median", "q1", "q3", "stddev", "iqr", "ld15iqr", "hd15iqr")


def bench(storage: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", CELL, "--benchmark-only", "-p", "no:cacheprovider",
         f"--benchmark-storage={storage}", "-q", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def scale_saved(storage: Path, factor: float) -> None:
    (saved,) = storage.rglob("*.json")
    data = json.loads(saved.read_text())
    for b in data["benchmarks"]:
        for key in STAT_KEYS:
            if isinstance(b["stats"].get(key), float):
                b["stats"][key] *= factor
        b["stats"]["data"] = [x * factor for x in b["stats"].get("data", [])]
    saved.write_text(json.dumps(data))


def test_benchmark_only_saves_and_compare_fail_gates(tmp_path):
    first = bench(tmp_path, "--benchmark-autosave")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert "test_method[eager-fwd]" in first.stdout and "1 passed" in first.stdout
    saved = json.loads(next(tmp_path.rglob("*.json")).read_text())
    (entry,) = saved["benchmarks"]
    assert entry["stats"]["rounds"] == 20 and "synced_perf_counter" in entry["options"]["timer"]
    assert entry["extra_info"]["method"] == "eager" and entry["extra_info"]["phase"] == "fwd"

    scale_saved(tmp_path, 0.5)
    slower = bench(tmp_path, "--benchmark-compare", "--benchmark-compare-fail=median:5%")
    assert slower.returncode != 0
    assert "Performance has regressed" in slower.stdout + slower.stderr

    scale_saved(tmp_path, 4.0)  # now twice the original: the fresh run is faster
    faster = bench(tmp_path, "--benchmark-compare", "--benchmark-compare-fail=median:5%")
    assert faster.returncode == 0, faster.stdout[-2000:] + faster.stderr[-2000:]
