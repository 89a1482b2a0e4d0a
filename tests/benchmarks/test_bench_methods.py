"""pytest-benchmark over the suite's methods, through the suite's own pieces.

    pytest tests/benchmarks --benchmark-only --benchmark-autosave          # measure, save
    pytest tests/benchmarks --benchmark-only --benchmark-compare \\
        --benchmark-compare-fail=median:5%                                  # gate on the last save

Each test is one cell (method x phase on ``PERFSUITE_BENCH_SHAPE``, default
``smoke``; ``PERFSUITE_BENCH_BETA``, default 0.1) built exactly as a worker
builds it: ``make_inputs``, the method's ``prepare``, ``worker.Phase`` for the
untimed set-up and the timed body, and ``measure.timing.CacheFlusher`` between
rounds; only the clock is pytest-benchmark's, with a timer that synchronises
CUDA so that a round ends when the GPU work does. Warm-up and rounds default to
the suite's (``DEFAULT_WARMUP``, ``DEFAULT_SAMPLES``).

Without ``--benchmark-only`` (the plain ``python -m pytest`` of CI) every cheap
cell runs once as a smoke test: torch.compile and Triton-on-CPU cells are skipped.
"""

from __future__ import annotations

import os
import time

import pytest
import torch

from perfsuite.measure.timing import DEFAULT_SAMPLES, DEFAULT_WARMUP, CacheFlusher
from perfsuite.method import Case
from perfsuite.plan.registry import all_methods, methods_for
from perfsuite.plan.shapes import get_shape
from perfsuite.results.results import PHASES
from perfsuite.run.inputs import make_inputs
from perfsuite.run.worker import Phase

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SHAPE = get_shape(os.environ.get("PERFSUITE_BENCH_SHAPE", "smoke"))
BETA = float(os.environ.get("PERFSUITE_BENCH_BETA", "0.1"))
METHODS = [name for name, m in methods_for("loss").items() if m.timed_by_default]
SLOW_TO_PREPARE = {"torch-compile"}  # compiles per cell: minutes on a 2-core CPU


def synced_perf_counter() -> float:
    """``time.perf_counter`` after the GPU's queued work, when there is a GPU."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter()


pytestmark = pytest.mark.benchmark(timer=synced_perf_counter, disable_gc=True)


@pytest.fixture(scope="module")
def flush() -> CacheFlusher:
    return CacheFlusher(torch.device(DEVICE))


def _benchmarking(config: pytest.Config) -> bool:
    return bool(config.getoption("benchmark_only", False))


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("method_name", METHODS)
def test_method(benchmark, request, flush, method_name: str, phase: str) -> None:
    method = all_methods()[method_name]
    case = Case(SHAPE.tokens, SHAPE.vocab, SHAPE.hidden, SHAPE.dtype, BETA, None, DEVICE)
    reason = method.availability(DEVICE) or method.unsupported_reason(case)
    if reason:
        pytest.skip(reason)
    if DEVICE == "cpu" and method.caps.triton:
        pytest.skip("Triton runs interpreted on CPU: its time says nothing")
    full = _benchmarking(request.config)
    if not full and method_name in SLOW_TO_PREPARE:
        pytest.skip("compiles for minutes on CPU; timed with --benchmark-only")
    inputs = make_inputs(case)
    cell = Phase(phase, method.prepare(case, inputs.c), inputs)

    def setup() -> None:  # the order of measure.timing.time_samples: set-up, flush, time
        cell.setup()
        flush()

    benchmark.group = f"{SHAPE.name} {SHAPE.dtype} β={BETA:g} {phase}"
    benchmark.extra_info.update(method=method_name, phase=phase, device=DEVICE)
    benchmark.pedantic(
        cell.body,
        setup=setup,
        rounds=DEFAULT_SAMPLES if full else 1,
        warmup_rounds=DEFAULT_WARMUP if full else 0,
        iterations=1,
    )
    cell.reset()
