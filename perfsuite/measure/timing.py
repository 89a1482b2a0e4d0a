"""Timing protocol: warm up, then per sample an untimed ``setup`` and a cache flush (so no
sample profits from the previous one's data), the timed call, every sample kept."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

from perfsuite.measure.stats import quantile

T = TypeVar("T")
# Interpreted timings say nothing about the kernel: one sample keeps the row whole, and the
# time goes to the gate and memory (``sampling``).
INTERPRETED_SAMPLES = 1
CPU_FLUSH_CAP = 64 << 20


def _quantile(q: float) -> property:
    return property(lambda self: quantile(self.samples_ms, q))


@dataclass
class Timing:
    """Every sample (ms); the row's median and 20th and 80th percentiles of them."""

    samples_ms: list[float] = field(default_factory=list)
    median_ms = _quantile(0.5)
    p20_ms = _quantile(0.2)
    p80_ms = _quantile(0.8)


def cpu_cache_bytes() -> int:
    """Largest CPU cache on this machine (sysfs), 32 MiB if it cannot be read."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        with suppress(OSError):
            text = (index / "size").read_text().strip()
            sizes.append(int(text.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}.get(text[-1:], 0))
    return max(sizes, default=32 << 20)


class CacheFlusher:
    """Evicts caches between samples by writing a buffer twice the cache size."""

    def __init__(self, device: torch.device) -> None:
        if device.type == "cuda":
            self.nbytes = max(2 * torch.cuda.get_device_properties(device).L2_cache_size, 64 << 20)
        else:
            # Virtual machines report the host's whole L3 (480 MiB seen here);
            # a core cannot hold more than its slice, so cap the flush.
            self.nbytes = 2 * min(cpu_cache_bytes(), CPU_FLUSH_CAP)
        self.buffer = torch.empty(self.nbytes // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


@dataclass(frozen=True)
class Sampling:
    """How every kind samples a phase: ``samples`` timed calls after ``warmup`` untimed
    ones; on ``cpu_time`` the process's CPU clock, not the wall clock."""

    samples: int
    warmup: int
    cpu_time: bool = False


def sampling(samples: int, warmup: int, interpreted: bool) -> Sampling:
    """The one sampling protocol. Compiled: the plan's samples and warm-up on the wall
    clock (CUDA events on a GPU). Interpreted: ``INTERPRETED_SAMPLES`` on the CPU clock,
    no warm-up: its time says nothing of a GPU, and a wall clock runs while it waits."""
    return Sampling(INTERPRETED_SAMPLES, 0, True) if interpreted else Sampling(samples, warmup)


def cpu_clocked(body: Callable[[], None]) -> tuple[Callable[[], None], list[float]]:
    """``body``, and the list its calls' CPU milliseconds go to: a pass that runs anyway
    (the memory pass) gives an interpreted phase its sample without another call."""
    times: list[float] = []

    def clocked() -> None:
        start = time.process_time()
        body()
        times.append((time.process_time() - start) * 1e3)

    return clocked, times


def wall_ms(fn: Callable[[], T], device: torch.device) -> tuple[T, float]:
    """What one call of ``fn`` returns, and its wall-clock milliseconds, the device drained
    before and after (a first call: compilation and autotuning, never a sample)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    result = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return result, (time.perf_counter() - start) * 1e3


def time_samples(
    fn: Callable[[], object],
    device: torch.device,
    *,
    samples: int,
    warmup: int,
    setup: Callable[[], object] | None = None,
    flush: CacheFlusher | None = None,
    cpu_time: bool = False,
) -> Timing:
    """Run ``warmup`` untimed calls, then time ``samples`` calls of ``fn``."""
    spans = time_spans(
        [fn], device, samples=samples, warmup=warmup, setup=setup, flush=flush, cpu_time=cpu_time
    )
    return Timing([ms for (ms,) in spans])


def warm_up(
    phases: Sequence[Callable[[], object]], warmup: int, setup: Callable[[], object] | None
) -> None:
    """``warmup`` untimed calls through the same ``setup`` as the timed ones, so that
    compilation and autotuning of every code path happen before any clock runs."""
    for _ in range(warmup):
        if setup is not None:
            setup()
        for phase in phases:
            phase()


def time_spans(
    phases: Sequence[Callable[[], object]],
    device: torch.device,
    *,
    samples: int,
    warmup: int,
    setup: Callable[[], object] | None = None,
    flush: CacheFlusher | None = None,
    barrier: Callable[[], object] | None = None,
    cpu_time: bool = False,
) -> list[list[float]]:
    """Per sample, the milliseconds of each of ``phases`` run back to back, the clock read
    at each boundary, so a sample's phases add up to its whole; ``barrier`` (ranks of one
    cell) runs before each sample's clock; ``cpu_time``: the CPU clock (``sampling``)."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    flush = flush or CacheFlusher(device)
    cuda = device.type == "cuda" and not cpu_time
    warm_up(phases, warmup, setup)
    if cuda:
        torch.cuda.synchronize(device)
    marks = []
    for _ in range(samples):
        if setup is not None:
            setup()
        flush()
        if barrier is not None:
            barrier()
            if cuda:
                torch.cuda.synchronize(device)
        sample = [_mark(cuda, cpu_time)]
        for phase in phases:
            phase()
            sample.append(_mark(cuda, cpu_time))
        marks.append(sample)
    if not cuda:
        return [[(b - a) * 1e3 for a, b in itertools.pairwise(m)] for m in marks]
    torch.cuda.synchronize(device)
    return [[float(a.elapsed_time(b)) for a, b in itertools.pairwise(m)] for m in marks]


def _mark(cuda: bool, cpu_time: bool = False) -> Any:
    if cuda:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    return time.process_time() if cpu_time else time.perf_counter()
