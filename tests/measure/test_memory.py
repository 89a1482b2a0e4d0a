"""The memory meters read back allocations of known size."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from perfsuite.measure.memory import CPU_MALLOC_ENV, cpu_meter_supported, measure_peak

PROBE = r"""
import sys, torch
from perfsuite.measure.memory import measure_cpu_peak
sizes = [int(s) for s in sys.argv[1:]]
for n in sizes:
    measure_cpu_peak(lambda: torch.ones(1024))  # first-use costs out of the way
    def alloc(n=n):
        t = torch.ones(n // 4, dtype=torch.float32)  # touched, so resident
        del t
    print(measure_cpu_peak(alloc).delta)
"""


@pytest.mark.skipif(cpu_meter_supported() is not None, reason=str(cpu_meter_supported()))
@pytest.mark.parametrize("nbytes", [64 << 20, 256 << 20])
def test_cpu_meter_reads_known_allocation_within_one_percent(nbytes):
    env = {**os.environ, **CPU_MALLOC_ENV}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(nbytes), str(nbytes)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    for measured in map(int, out.stdout.split()):
        assert abs(measured - nbytes) <= 0.01 * nbytes, (measured, nbytes)


@pytest.mark.skipif(cpu_meter_supported() is not None, reason=str(cpu_meter_supported()))
def test_cpu_meter_counts_peak_not_final():
    # A buffer freed before the end still counts: the meter sees the high-water mark.
    def spike():
        a = torch.ones(32 << 20 >> 2)
        del a
        return torch.ones(1 << 20 >> 2)

    peak = measure_peak(spike, torch.device("cpu"))
    assert peak.delta >= (32 << 20) * 0.99
    assert peak.absolute > peak.delta


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_meter_reads_known_allocation_exactly():
    device = torch.device("cuda")
    keep = torch.empty(1 << 20, device=device)
    peak = measure_peak(lambda: torch.ones(64 << 20 >> 2, device=device), device)
    assert peak.delta == 64 << 20
    assert peak.absolute >= peak.delta + keep.numel() * 4
