"""Peak memory of one phase, measured in a pass of its own.

CUDA: the caching allocator's own counters (``reset_peak_memory_stats`` then
``max_memory_allocated``), which count what tensors hold, not what the cache
keeps. CPU: the process high-water mark. Writing ``5`` to
``/proc/self/clear_refs`` resets ``VmHWM`` to the current RSS, so
``VmHWM - VmRSS(start)`` is what the phase added at its peak. That only works if
freed memory leaves the process: glibc keeps freed heap chunks (and raises its
mmap threshold after each large free), so the runner starts workers with
``CPU_MALLOC_ENV``: a fixed mmap threshold makes every large buffer an ``mmap``
returned to the kernel on free, and a huge trim threshold stops small frees of
unrelated objects from shrinking the heap mid-phase (which would hide bytes).
Resolution: the kernel keeps RSS in per-CPU counters batched by 32 pages, so
a reading is exact to about 32 pages x cores (256 KiB on 2 cores); the tests
check 1% on 64 MiB and more.
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
    """``delta``: peak above the phase's starting point; ``absolute``: total peak."""

    delta: int
    absolute: int


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


def measure_cpu_peak(fn: Callable[[], object]) -> Peak:
    """Peak RSS growth while ``fn`` runs (bytes), from the kernel's high-water mark."""
    gc.collect()
    _malloc_trim()
    Path("/proc/self/clear_refs").write_text("5")
    start = _status_kib("VmRSS")
    fn()
    peak = _status_kib("VmHWM")
    return Peak(delta=max(peak - start, 0) * 1024, absolute=peak * 1024)


def measure_cuda_peak(fn: Callable[[], object], device: torch.device) -> Peak:
    """Peak bytes held by tensors while ``fn`` runs, above those held at its start."""
    torch.cuda.synchronize(device)
    gc.collect()
    torch.cuda.empty_cache()
    start = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device)
    return Peak(delta=peak - start, absolute=peak)


def measure_peak(fn: Callable[[], object], device: torch.device) -> Peak:
    if device.type == "cuda":
        return measure_cuda_peak(fn, device)
    return measure_cpu_peak(fn)
