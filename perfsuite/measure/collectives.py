"""What one call spends on collectives, from torch's profiler events named after their
backend (``gloo:all_reduce``, ``nccl:all_gather``): on CPU the whole exchange, waits
included; on CUDA the NCCL kernels' time on the device (docs/scale-out.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from perfsuite.measure.profile import run_profiled

BACKENDS = ("gloo:", "nccl:")
# The profiler's dtype names (c10's scalar type names and C type names).
_ITEMSIZE = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
    "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "Float": 4, "Double": 8,
    "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4,
}  # fmt: skip


@dataclass(frozen=True)
class Collectives:
    """Per call: how many collectives one rank issued, the bytes of their inputs, and
    their time (ms) on this rank."""

    count: int
    nbytes: int
    ms: float


def measure_collectives(fn: Callable[[], object], device: torch.device) -> Collectives:
    """Run ``fn`` once under the profiler; its collectives' count, bytes and time."""
    prof, _ = run_profiled(fn, device, record_shapes=True)
    # Input dtypes: torch 2.13's ``FunctionEvent.input_dtypes``, or (torch 2.11) the
    # ``dtypes()`` of the Kineto event of the same correlation id (collectives only: a
    # device activity's correlation id may repeat a host op's).
    events = prof.kineto_results.events() if prof.kineto_results is not None else []
    kineto = {e.correlation_id(): e.dtypes() for e in events if e.name().startswith(BACKENDS)}
    count = nbytes = 0
    host_us = device_us = 0.0
    for event in prof.function_events:
        if event.name.startswith(BACKENDS):
            dtypes = getattr(event, "input_dtypes", None) or list(kineto.get(event.id, []))
            count += 1
            for shape, dtype in zip(event.input_shapes, dtypes, strict=False):
                if isinstance(shape, list) and shape and all(isinstance(x, int) for x in shape):
                    nbytes += math.prod(shape) * _ITEMSIZE.get(str(dtype), 4)
            host_us += event.cpu_time_total
        elif device.type == "cuda" and "nccl" in event.name.lower():
            device_us += event.device_time_total
    return Collectives(count, nbytes, (device_us if device.type == "cuda" else host_us) / 1e3)
