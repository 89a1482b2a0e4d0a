"""``run --timer`` and ``--profile`` through the CLI: the timer names every row (part of
its identity), a profiled cell keeps a trace and a breakdown (a timer a device cannot
give, still profiled: tests/run/test_worker_profile.py)."""

from __future__ import annotations

import gzip
import json

import pytest

from perfsuite.cli import main
from perfsuite.results.results import load_results

pytestmark = pytest.mark.integration
SMALL = ["--shape", "smoke", "--tokens", "64", "--vocab", "512", "--hidden", "32"]
ONE = [*SMALL, "--methods", "eager", "--beta", "0", "--phases", "fwd+bwd", "--samples", "2"]


def test_a_profiled_cell_keeps_its_trace_and_breakdown(tmp_path, capsys):
    out, traces = tmp_path / "r.json", tmp_path / "traces"
    argv = [*ONE, "--timer", "kernels", "--profile", str(traces), "--out", str(out)]
    assert main(["run", *argv]) == 0
    (row,) = load_results(out)["rows"]
    assert row["status"] == "ok" and row["timer"] == "kernels"
    breakdown = row["breakdown"]
    assert breakdown["source"] == "cpu-ops" and breakdown["classes"]["gemm"] > 0
    with gzip.open(traces / row["trace"], "rt") as f:
        assert json.load(f)["traceEvents"]
    capsys.readouterr()
    assert main(["report", str(out), "--breakdown"]) == 0
    text = capsys.readouterr().out
    assert "eager" in text and "gemm" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert main(["plot", str(out), "--breakdown", "-o", str(tmp_path / "plots")]) == 0
    (png,) = (tmp_path / "plots").iterdir()
    assert png.name == "breakdown-smoke-fp32-b0-fwdbwd.png" and png.stat().st_size > 10_000


def test_timers_and_profiles_are_refused_across_ranks(tmp_path, capsys):
    argv = ["run", *ONE, "--tp", "1", "--timer", "graph", "--out", str(tmp_path / "r.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: --timer and --profile measure one device: drop them with --tp"]
    assert not (tmp_path / "r.json").exists()
