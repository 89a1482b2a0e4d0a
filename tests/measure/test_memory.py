"""The memory meters read back allocations of known size."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from perfsuite.harness.environment import CPU_MALLOC_ENV
from perfsuite.measure.memory import (
    cpu_meter_supported,
    measure_peak,
    tensor_peak_from_events,
)

PROBE = r"""
import sys, torch
from perfsuite.measure.memory import measure_cpu_peak
sizes = [int(s) for s in sys.argv[1:]]
for n in sizes:
    measure_cpu_peak(lambda: torch.ones(1024))  # first-use costs out of the way
    def alloc(n=n):
        t = torch.ones(n // 4, dtype=torch.float32)  # touched, so resident
        del t
    peak = measure_cpu_peak(alloc)
    print(peak.delta, peak.rss_delta)
"""


@pytest.mark.skipif(cpu_meter_supported() is not None, reason=str(cpu_meter_supported()))
@pytest.mark.integration
def test_cpu_meter_reads_known_allocation_within_one_percent():
    sizes = [64 << 20, 64 << 20, 256 << 20]  # in one fresh process: a repeat reads alike
    env = {**os.environ, **CPU_MALLOC_ENV}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, sizes)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    readings = [[int(v) for v in line.split()] for line in out.stdout.splitlines()]
    assert len(readings) == len(sizes)
    for nbytes, pair in zip(sizes, readings, strict=True):  # tensor meter and RSS meter
        assert all(abs(measured - nbytes) <= 0.01 * nbytes for measured in pair), (readings, nbytes)


@pytest.mark.skipif(cpu_meter_supported() is not None, reason=str(cpu_meter_supported()))
def test_cpu_meter_counts_peak_not_final_and_what_a_span_left_held():
    # A buffer freed before the end still counts: the meter sees the high-water mark.
    def spike():
        a = torch.ones(32 << 20 >> 2)
        del a
        return torch.ones(1 << 20 >> 2)

    peak = measure_peak(spike, torch.device("cpu"))
    assert peak.delta >= (32 << 20) * 0.99
    assert peak.absolute > peak.delta
    # Spans in a row (a training step's phases) add up: each one's ``net`` is what it
    # left allocated, here a tensor kept past the span.
    kept = []
    held = measure_peak(lambda: kept.append(torch.ones(1 << 20)), torch.device("cpu"))
    freed = measure_peak(lambda: torch.ones(1 << 20).sum(), torch.device("cpu"))
    assert held.net == 4 << 20 and held.delta >= 4 << 20
    assert freed.net == 0 and freed.delta >= 4 << 20


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_meter_reads_known_allocation_exactly():
    device = torch.device("cuda")
    keep = torch.empty(1 << 20, device=device)
    peak = measure_peak(lambda: torch.ones(64 << 20 >> 2, device=device), device)
    assert peak.delta == 64 << 20
    assert peak.absolute >= peak.delta + keep.numel() * 4


def test_tensor_meter_counts_torch_tensors_not_numpy_temporaries():
    import numpy as np

    def work():
        scratch = np.ones(16 << 20 >> 3)  # 16 MiB outside torch's allocator
        kept = torch.ones(4 << 20 >> 2)  # 4 MiB tensor, alive at the end
        del scratch
        return kept

    peak = measure_peak(work, torch.device("cpu"))
    assert peak.delta == 4 << 20
    assert peak.rss_delta is not None and peak.rss_delta >= (16 << 20) * 0.99


def test_running_peak_of_events():
    events = [(3, -100), (1, 100), (2, 50), (4, 10)]  # out of order on purpose
    assert tensor_peak_from_events(events) == 150
    assert tensor_peak_from_events([]) == 0
