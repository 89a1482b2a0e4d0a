"""Where one call's time goes, by class (``kernel_classes.CLASSES``): one more call under
the autograd profiler on Kineto (``torch.profiler``'s first start imports dynamo, which
the memory meter would see); on CUDA device activities, on CPU each op's self time."""

from __future__ import annotations

import gzip
import math
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from perfsuite.measure import timing
from perfsuite.measure.kernel_classes import CLASSES, classify, kernel_name
from perfsuite.results.results import write_atomically

NOTES = {
    "cuda-kernels": "device kernel time; host = wall - device busy",
    "cpu-ops": "CPU op self time (no GPU); host = wall - op self time",
}
TOP = 5
DEVICE_ACTIVITIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
# CPU ops that launch no work of their own: views, allocation, no-op conversions.
NO_WORK_OPS = frozenset(
    "as_strided view _unsafe_view _reshape_alias reshape t transpose permute expand "
    "squeeze unsqueeze slice select narrow detach alias resolve_conj resolve_neg empty "
    "empty_like empty_strided to contiguous lift_fresh unflatten flatten split chunk "
    "numpy_T type_as".split()
)
# A row whose timer could not time its call (a graph that cannot be captured) is still
# profiled, one plain call: the method left without a trace is the one most needing it.
PROFILED_UNTIMED = "still profiled (one plain call, no graph): trace and breakdown kept"


@dataclass
class Breakdown:
    """One profiled call: ms by class (every class present) and their sum, launches, host
    time (wall less busy), the ``TOP`` kernels (ops on CPU) by time, in words what it is."""

    source: str
    wall_ms: float
    device_ms: float
    busy_ms: float
    host_ms: float
    launches: int
    classes: dict[str, float] = field(default_factory=dict)
    top: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""


def trace_name(method: str, shape: str, dtype: str, beta: float, phase: str) -> str:
    """A trace's file name for one cell and phase: ``eager__smoke__fp32__b0.1__fwd-bwd.json.gz``."""
    parts = (method, shape, dtype, f"b{beta:g}", phase)
    return "__".join(re.sub(r"[^A-Za-z0-9._-]+", "-", p) for p in parts) + ".json.gz"


def profile_call(
    fn: Callable[[], object],
    device: torch.device,
    *,
    setup: Callable[[], object] | None = None,
    trace: Path | None = None,
    flush: Callable[[], object] | None = None,
) -> Breakdown:
    """One call of ``fn``, warm, under the profiler (``setup`` and ``flush`` before it, not
    profiled); ``trace``: where its gzip JSON trace goes (``trace_name``; Perfetto opens it)."""
    prof, wall_ms = run_profiled(fn, device, setup=setup, flush=flush)
    if trace is not None:  # Kineto's JSON, gzipped into ``trace`` whole or not at all
        with tempfile.TemporaryDirectory(prefix="pst-trace-") as scratch:
            raw = Path(scratch) / "trace.json"
            prof.export_chrome_trace(str(raw))
            write_atomically(trace, gzip.compress(raw.read_bytes()))
    return breakdown_of(prof, device, wall_ms)


_warm: set[str] = set()


def run_profiled(
    fn: Callable[[], object],
    device: torch.device,
    *,
    setup: Callable[[], object] | None = None,
    flush: Callable[[], object] | None = None,
    **options: Any,
) -> tuple[Any, float]:
    """The profiler (``options`` to it: ``record_shapes``, ``profile_memory``) that saw one
    call of ``fn``, and the call's wall milliseconds."""
    from torch.autograd.profiler import profile

    cuda = device.type == "cuda"
    options.update(use_kineto=True, use_device="cuda" if cuda else None)
    if device.type not in _warm:  # the first start sets up Kineto (and CUPTI): not fn's
        with profile(**options):
            pass
        _warm.add(device.type)
    if setup is not None:
        setup()
    if flush is not None:
        flush()
    if cuda:
        torch.cuda.synchronize(device)
    with profile(**options) as prof:  # fn's result is freed inside: the meter sees it go
        wall = timing.wall_ms(fn, device)[1]
    return prof, wall


def breakdown_of(prof: Any, device: torch.device, wall_ms: float) -> Breakdown:
    """The breakdown of what ``prof`` saw in a call of ``wall_ms`` milliseconds."""
    if device.type == "cuda":
        spans = _device_spans(prof)
        busy = _union_ms([(start, end) for _, start, end in spans])
        timed = [(name, (end - start) / 1e6) for name, start, end in spans]
        return _summarise("cuda-kernels", timed, len(spans), wall_ms, busy)
    timed, launches = _cpu_ops(prof)
    device_ms = sum(ms for _, ms in timed)
    return _summarise("cpu-ops", timed, launches, wall_ms, device_ms)


def _device_spans(prof: Any) -> list[tuple[str, int, int]]:
    """(name, start ns, end ns) of each device activity: kernels, memcpy, memset."""
    spans = []
    for ev in prof.kineto_results.events():
        kind = ev.activity_type() if hasattr(ev, "activity_type") else None
        if kind is None:  # older torch: a device event that is not an annotation
            device_side = ev.device_type() == torch.autograd.DeviceType.CUDA
            work = device_side and not ev.is_user_annotation()
        else:
            work = kind in DEVICE_ACTIVITIES
        if work:
            spans.append((ev.name(), ev.start_ns(), ev.start_ns() + ev.duration_ns()))
    return spans


def _cpu_ops(prof: Any) -> tuple[list[tuple[str, float]], int]:
    """(name, self ms) of every CPU op, and how many of them do the work."""
    timed, launches = [], 0
    for ev in prof.function_events:
        if ev.is_async or ev.device_type != torch.autograd.DeviceType.CPU:
            continue
        timed.append((ev.name, ev.self_cpu_time_total / 1e3))
        if not _no_work(ev.name) and all(_no_work(c.name) for c in ev.cpu_children):
            launches += 1
    return timed, launches


def _no_work(name: str) -> bool:
    return name.startswith("aten::") and name[6:] in NO_WORK_OPS


def _union_ms(spans: list[tuple[int, int]]) -> float:
    """Milliseconds covered by at least one of ``spans`` (ns): overlapping streams once."""
    total, end = 0, -math.inf
    for a, b in sorted(spans):
        total += max(0, b - max(a, end))  # the part not covered yet
        end = max(end, b)
    return total / 1e6


def _summarise(
    source: str, timed: list[tuple[str, float]], launches: int, wall_ms: float, busy_ms: float
) -> Breakdown:
    classes = dict.fromkeys(CLASSES, 0.0)
    by_name: dict[tuple[str, str], list[float]] = {}
    for name, ms in timed:
        cls = classify(name)
        classes[cls] += ms
        by_name.setdefault((kernel_name(name), cls), []).append(ms)
    top = sorted(by_name.items(), key=lambda item: -sum(item[1]))[:TOP]
    return Breakdown(
        source=source,
        wall_ms=wall_ms,
        device_ms=sum(classes.values()),
        busy_ms=busy_ms,
        host_ms=wall_ms - busy_ms,
        launches=launches,
        classes=classes,
        top=[{"name": n, "class": c, "ms": sum(v), "calls": len(v)} for (n, c), v in top],
        note=NOTES[source],
    )
