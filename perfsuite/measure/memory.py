"""Peak memory of one phase, in a pass of its own: on CUDA the allocator's counters; on
CPU the profiler's tensor allocations (``peak_bytes``) and the process high-water mark
``VmHWM`` (``rss_peak_bytes``). docs/run.md, "Memory"."""

from __future__ import annotations

import ctypes
import gc
import itertools
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from perfsuite.measure.profile import run_profiled


@dataclass
class Peak:
    """``delta``: peak above the phase's start; ``absolute``: total peak; ``rss_delta``: on
    CPU, the RSS growth at its peak (None on CUDA); ``net``, ``rss_net``: what the phase left
    held over its start (tensors, RSS), so that consecutive spans add up."""

    delta: int
    absolute: int
    rss_delta: int | None = None
    net: int = 0
    rss_net: int = 0


def freeze_what_exists() -> None:
    """What exists now lives as long as the process: keep it out of each memory pass's
    collection (~0.25 s with transformers)."""
    gc.collect()
    gc.freeze()
    gc.enable()  # off from the start in a harness worker (``python_worker``)


def status_kib(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (VmRSS, VmHWM, VmData)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def cpu_meter_supported() -> str | None:
    """``None`` if the CPU high-water-mark meter works here, else why not."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        status_kib("VmHWM")
    except (OSError, RuntimeError) as err:
        return f"process high-water mark unavailable: {err}"
    return None


def measure_rss_peak(fn: Callable[[], object], collect: bool = True) -> Peak:
    """Peak RSS growth while ``fn`` runs (bytes), from the kernel's high-water mark.
    ``collect``: garbage-collect and trim the heap first (~170 ms once transformers is
    loaded: more than a smoke training step)."""
    if collect:
        gc.collect()
        with suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
    Path("/proc/self/clear_refs").write_text("5")
    start = status_kib("VmRSS")
    fn()
    peak, end = status_kib("VmHWM"), status_kib("VmRSS")
    delta = max(peak - start, 0) * 1024
    return Peak(delta, peak * 1024, delta, rss_net=(end - start) * 1024)


def tensor_peak_from_events(events: list[tuple[int, int]]) -> int:
    """Largest running sum of ``(time, bytes)`` allocation (+) and free (-) events."""
    return max([0, *itertools.accumulate(nbytes for _, nbytes in sorted(events))])


def _tensor_span(fn: Callable[[], object]) -> tuple[int, int]:
    """The tensor peak of ``fn`` and the bytes it left held."""
    gc.collect()
    prof, _ = run_profiled(fn, torch.device("cpu"), profile_memory=True)
    events = [
        (ev.start_ns(), ev.nbytes())
        for ev in prof.kineto_results.events()
        if ev.name() == "[memory]" and ev.device_type() == torch.autograd.DeviceType.CPU
    ]
    return tensor_peak_from_events(events), sum(n for _, n in events)


@cache
def _start_profiler() -> None:
    """The profiler's first start sets up Kineto: never a phase's memory."""
    _tensor_span(lambda: None)


def measure_cpu_peak(fn: Callable[[], object]) -> Peak:
    """Both CPU meters over the same call: tensors (``delta``) and process RSS."""
    _start_profiler()
    tensors: list[tuple[int, int]] = []
    rss = measure_rss_peak(lambda: tensors.append(_tensor_span(fn)))
    ((delta, net),) = tensors
    return Peak(delta, rss.absolute, rss.delta, net, rss.rss_net)


def measure_cuda_peak(fn: Callable[[], object], device: torch.device, collect: bool = True) -> Peak:
    """Peak bytes held by tensors while ``fn`` runs, above those held at its start.
    ``collect=False`` keeps the allocator's cache: a timed ``fn`` would otherwise pay the
    driver's allocations again inside its time."""
    torch.cuda.synchronize(device)
    if collect:
        gc.collect()
        torch.cuda.empty_cache()
    start = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    peak, end = torch.cuda.max_memory_allocated(device), torch.cuda.memory_allocated(device)
    return Peak(delta=peak - start, absolute=peak, net=end - start)


def measure_peak(fn: Callable[[], object], device: torch.device) -> Peak:
    return measure_cuda_peak(fn, device) if device.type == "cuda" else measure_cpu_peak(fn)


def measure_spans(phases: Sequence[Callable[[], object]], device: torch.device) -> list[Peak]:
    """The peak of each of ``phases``, run in turn, above its start; then of them all
    above the first one's start (on CPU process RSS too, alike)."""
    gc.collect()
    spans = [measure_peak(phase, device) for phase in phases]
    peak = base = rss = rss_base = 0
    for span in spans:
        peak, base = max(peak, base + span.delta), base + span.net
        rss, rss_base = max(rss, rss_base + (span.rss_delta or 0)), rss_base + span.rss_net
    cpu = device.type != "cuda"
    return [*spans, Peak(peak, max(s.absolute for s in spans), rss if cpu else None)]
