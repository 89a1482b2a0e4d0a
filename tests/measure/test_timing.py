"""The timer: sample counts, untimed set-up, quantiles, cache flushing."""

from __future__ import annotations

import time

import pytest
import torch

from perfsuite.measure.timing import (
    INTERPRETED_SAMPLES,
    CacheFlusher,
    Sampling,
    sampling,
    time_samples,
    time_spans,
)

CPU = torch.device("cpu")


def test_times_a_known_duration_and_refuses_no_samples():
    timing = time_samples(lambda: time.sleep(0.02), CPU, samples=5, warmup=1)
    assert len(timing.samples_ms) == 5
    # A sleep never returns early; it may overshoot on a busy VM, the median hardly.
    assert all(s >= 19.5 for s in timing.samples_ms), timing.samples_ms
    assert timing.median_ms < 30, timing.samples_ms
    assert timing.p20_ms <= timing.median_ms <= timing.p80_ms
    with pytest.raises(ValueError, match="samples"):
        time_samples(lambda: None, CPU, samples=0, warmup=0)


def test_one_protocol_interpreted_or_compiled():
    """Compiled: the plan's samples and warm-up on the wall clock. Interpreted: one sample,
    no warm-up, on the CPU clock, which a sleep (a paused worker, a core taken) leaves
    alone while the wall clock counts it."""
    assert sampling(7, 2, interpreted=False) == Sampling(7, 2, cpu_time=False)
    how = sampling(7, 2, interpreted=True)
    assert how == Sampling(INTERPRETED_SAMPLES, 0, cpu_time=True)
    timing = time_samples(
        lambda: time.sleep(0.05), CPU, samples=how.samples, warmup=how.warmup,
        cpu_time=how.cpu_time,
    )  # fmt: skip
    assert len(timing.samples_ms) == INTERPRETED_SAMPLES and timing.median_ms < 25, timing


def test_setup_and_flush_stay_outside_the_timed_region():
    calls = []
    timing = time_samples(
        lambda: calls.append("fn"),
        CPU,
        samples=4,
        warmup=2,
        setup=lambda: (calls.append("setup"), time.sleep(0.05)),
    )
    assert calls == ["setup", "fn"] * 6  # warm-up goes through setup too
    # The 50 ms set-up is in no sample (the margin absorbs a preempted append).
    assert max(timing.samples_ms) < 25, timing.samples_ms


def test_flush_buffer_exceeds_the_cache_it_flushes():
    flusher = CacheFlusher(CPU)
    assert flusher.nbytes >= 2 * (1 << 20)
    before = flusher.buffer.clone()
    flusher.buffer.fill_(7)
    flusher()
    assert int(flusher.buffer.abs().sum()) == 0 and before.numel() == flusher.buffer.numel()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_events_time_device_work():
    device = torch.device("cuda")
    a = torch.randn(4096, 4096, device=device)
    timing = time_samples(lambda: a @ a, device, samples=20, warmup=3)
    assert len(timing.samples_ms) == 20 and timing.median_ms > 0
    assert CacheFlusher(device).nbytes >= 2 * torch.cuda.get_device_properties(device).L2_cache_size


def test_spans_of_one_sample_add_up_and_follow_the_barrier():
    """One timer for a step's phases and for ranks: a clock read at each boundary, the
    set-up untimed before every call, a barrier before each sample's clock."""
    calls = {"setup": 0, "barrier": 0}

    def count(name: str) -> None:
        calls[name] += 1

    phases = [lambda: time.sleep(0.01), lambda: time.sleep(0.03)]
    spans = time_spans(
        phases, CPU, samples=3, warmup=2, setup=lambda: count("setup"),
        barrier=lambda: count("barrier"),
    )  # fmt: skip
    assert len(spans) == 3 and all(len(s) == 2 for s in spans)
    assert all(9.5 <= a < b and b >= 29.5 for a, b in spans), spans
    assert calls == {"setup": 5, "barrier": 3}
