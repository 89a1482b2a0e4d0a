"""Peak memory of one phase, measured in a pass of its own.

CUDA: the caching allocator's own counters (``reset_peak_memory_stats`` then
``max_memory_allocated``), which count what tensors hold, not what the cache
keeps.

CPU, two meters:

* tensors (the reported ``peak_bytes``, same meaning as on CUDA): torch's
  profiler records every CPU-allocator allocation and free with its size; the
  running sum's maximum is the phase's peak above its start. It ignores what is
  not a torch tensor, which matters for Triton under the interpreter: its numpy
  tile temporaries are an artefact of emulation, not memory the kernel holds.
* process (``rss_peak_bytes``, ``peak_abs_bytes``): the RSS high-water mark.
  Writing ``5`` to ``/proc/self/clear_refs`` resets ``VmHWM`` to the current
  RSS, so ``VmHWM - VmRSS(start)`` is what the phase added at its peak. glibc
  keeps freed heap chunks (and raises its mmap threshold after each large
  free), so the runner starts workers with ``CPU_MALLOC_ENV``: a fixed mmap
  threshold makes every large buffer an ``mmap`` returned to the kernel on free,
  and a huge trim threshold stops small frees of unrelated objects from
  shrinking the heap mid-phase (which would hide bytes). Resolution: the kernel
  keeps RSS in per-CPU counters batched by 32 pages, so a reading is exact to
  about 32 pages x cores (256 KiB on 2 cores).
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

# Environment for worker processes whose CPU memory is measured.
CPU_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


@dataclass
class Peak:
    """``delta``: peak above the phase's starting point; ``absolute``: total peak.

    ``rss_delta``: on CPU, the process RSS growth at its peak (``None`` on CUDA).
    ``net``, ``rss_net``: what the phase left held at its end over its start (tensors,
    RSS), so that consecutive spans add up (a training step's phases).
    """

    delta: int
    absolute: int
    rss_delta: int | None = None
    net: int = 0
    rss_net: int = 0


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def cpu_meter_supported() -> str | None:
    """``None`` if the CPU high-water-mark meter works here, else why not."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        _status_kib("VmHWM")
    except (OSError, RuntimeError) as err:
        return f"process high-water mark unavailable: {err}"
    return None


def _malloc_trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def measure_rss_peak(fn: Callable[[], object], collect: bool = True) -> Peak:
    """Peak RSS growth while ``fn`` runs (bytes), from the kernel's high-water mark.
    ``collect``: garbage-collect and trim the heap first (~170 ms once transformers is
    loaded: more than a smoke training step)."""
    if collect:
        gc.collect()
        _malloc_trim()
    Path("/proc/self/clear_refs").write_text("5")
    start = _status_kib("VmRSS")
    fn()
    peak, end = _status_kib("VmHWM"), _status_kib("VmRSS")
    delta = max(peak - start, 0) * 1024
    return Peak(delta, peak * 1024, delta, rss_net=(end - start) * 1024)


def tensor_peak_from_events(events: list[tuple[int, int]]) -> int:
    """Largest running sum of ``(time, bytes)`` allocation (+) and free (-) events."""
    current = peak = 0
    for _, nbytes in sorted(events):
        current += nbytes
        peak = max(peak, current)
    return peak


def measure_tensor_peak(fn: Callable[[], object]) -> int:
    """Peak bytes of CPU tensors allocated while ``fn`` runs, above those live at its start."""
    return _tensor_span(fn)[0]


def _tensor_span(fn: Callable[[], object]) -> tuple[int, int]:
    """The tensor peak of ``fn`` and the bytes it left held.

    The autograd profiler (Kineto, CPU activity, as ``torch.profiler.profile`` runs it):
    the latter's first start imports ``torch._inductor`` and dynamo, seconds per worker
    and ~150 MB that are no phase's."""
    from torch.autograd.profiler import profile

    gc.collect()
    with profile(use_kineto=True, profile_memory=True) as prof:
        fn()
    events = [
        (ev.start_ns(), ev.nbytes())
        for ev in prof.kineto_results.events()
        if ev.name() == "[memory]" and ev.device_type() == torch.autograd.DeviceType.CPU
    ]
    return tensor_peak_from_events(events), sum(n for _, n in events)


_profiler_ready = False


def measure_cpu_peak(fn: Callable[[], object]) -> Peak:
    """Both CPU meters over the same call: tensors (``delta``) and process RSS."""
    global _profiler_ready
    if not _profiler_ready:  # the profiler's first start sets up Kineto: not the phase's
        measure_tensor_peak(lambda: None)
        _profiler_ready = True
    tensors: list[tuple[int, int]] = []
    rss = measure_rss_peak(lambda: tensors.append(_tensor_span(fn)))
    ((delta, net),) = tensors
    return Peak(delta, rss.absolute, rss.delta, net, rss.rss_net)


def measure_cuda_peak(fn: Callable[[], object], device: torch.device) -> Peak:
    """Peak bytes held by tensors while ``fn`` runs, above those held at its start."""
    torch.cuda.synchronize(device)
    gc.collect()
    torch.cuda.empty_cache()
    start = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    peak, end = torch.cuda.max_memory_allocated(device), torch.cuda.memory_allocated(device)
    return Peak(delta=peak - start, absolute=peak, net=end - start)


def measure_peak(fn: Callable[[], object], device: torch.device) -> Peak:
    if device.type == "cuda":
        return measure_cuda_peak(fn, device)
    return measure_cpu_peak(fn)
