"""Time and memory of one training step, split into forward, backward and optimizer.

Timing: each sample is one whole step (``loss = f(batch)``, ``loss.backward()``,
``optimizer.step()`` and ``zero_grad(set_to_none=True)``) with a clock read at the two
boundaries between them, so fwd + bwd + opt = step for every sample (CUDA: events
recorded at the boundaries, read after the last sample). Before each sample the
last-level cache is flushed (``perfsuite.measure.timing.CacheFlusher``).

Memory: one step of its own, each phase measured above where it started with
``perfsuite.measure.memory``'s meters (CUDA: the allocator's peak; CPU: torch's
allocation events, and the process RSS high-water mark beside them); the step's peak
is the largest of the phases' peaks over where the step started, i.e. above the
weights and AdamW's states, the gradients included.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from perfsuite.measure.memory import Peak, tensor_peak_from_events
from perfsuite.measure.timing import CacheFlusher
from perfsuite.results.results import STEP_PHASES


class Stepper:
    """One training step of ``model`` with ``loss_of`` on ``ids``, phase by phase."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_of: Callable[[torch.Tensor], torch.Tensor],
        ids: torch.Tensor,
    ) -> None:
        self.model, self.optimizer, self.loss_of, self.ids = model, optimizer, loss_of, ids
        self.loss: torch.Tensor | None = None

    def forward(self) -> None:
        self.loss = self.loss_of(self.ids)

    def backward(self) -> None:
        assert self.loss is not None
        self.loss.backward()
        self.loss = None

    def optimize(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def step(self) -> None:
        self.forward()
        self.backward()
        self.optimize()

    def phases(self) -> list[Callable[[], None]]:
        return [self.forward, self.backward, self.optimize]


def time_steps(
    stepper: Stepper, device: torch.device, samples: int, warmup: int, flush: CacheFlusher
) -> dict[str, list[float]]:
    """Milliseconds per sample of each phase and of the whole step."""
    for _ in range(warmup):
        stepper.step()
    bounds: list[list[object]] = []
    for _ in range(samples):
        flush()
        marks = [_mark(device)]
        for phase in stepper.phases():
            phase()
            marks.append(_mark(device))
        bounds.append(marks)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    out: dict[str, list[float]] = {p: [] for p in STEP_PHASES}
    for marks in bounds:
        spans = [_elapsed(a, b) for a, b in zip(marks, marks[1:], strict=False)]
        for name, ms in zip(STEP_PHASES, spans, strict=False):
            out[name].append(ms)
        out["step"].append(_elapsed(marks[0], marks[-1]))
    return out


def time_fwd_bwd(
    model: torch.nn.Module,
    loss_of: Callable[[torch.Tensor], torch.Tensor],
    ids: torch.Tensor,
    device: torch.device,
    samples: int,
    warmup: int,
    flush: CacheFlusher,
) -> list[float]:
    """Milliseconds of ``loss_of(ids).backward()`` per sample, gradients cleared untimed."""
    out = []
    for i in range(warmup + samples):
        model.zero_grad(set_to_none=True)
        flush()
        start = _mark(device)
        loss_of(ids).backward()
        end = _mark(device)
        if i >= warmup:
            out.append((start, end))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    model.zero_grad(set_to_none=True)
    return [_elapsed(a, b) for a, b in out]


def _mark(device: torch.device) -> object:
    if device.type == "cuda":
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    return time.perf_counter()


def _elapsed(a: object, b: object) -> float:
    if isinstance(a, torch.cuda.Event):
        return float(a.elapsed_time(b))  # type: ignore[arg-type]
    return (float(b) - float(a)) * 1e3  # type: ignore[arg-type]


@dataclass
class _Span:
    peak: int  # above the phase's start
    net: int  # allocated at its end minus at its start
    absolute: int
    rss: int | None = None  # CPU: RSS growth at its peak over the phase's start
    rss_net: int = 0  # CPU: RSS at its end minus at its start


def step_memory(stepper: Stepper, device: torch.device) -> dict[str, Peak]:
    """Peak memory of each phase above its start, and of the step above its start."""
    gc.collect()
    spans = _cuda_spans(stepper, device) if device.type == "cuda" else _cpu_spans(stepper)
    out = {p: Peak(s.peak, s.absolute, s.rss) for p, s in zip(STEP_PHASES, spans, strict=False)}
    base, peak = 0, 0
    for span in spans:
        peak = max(peak, base + span.peak)
        base += span.net
    rss = None
    if device.type != "cuda":  # RSS is cumulative too: each phase's growth over its start
        rss_base, rss = 0, 0
        for span in spans:
            rss = max(rss, rss_base + (span.rss or 0))
            rss_base += span.rss_net
    out["step"] = Peak(peak, max(s.absolute for s in spans), rss)
    return out


def _cuda_spans(stepper: Stepper, device: torch.device) -> list[_Span]:
    spans = []
    torch.cuda.synchronize(device)
    for phase in stepper.phases():
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        phase()
        torch.cuda.synchronize(device)
        top = torch.cuda.max_memory_allocated(device)
        after = torch.cuda.memory_allocated(device)
        spans.append(_Span(top - before, after - before, top))
    return spans


def _kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


_profiler_ready = False


def _cpu_spans(stepper: Stepper) -> list[_Span]:
    """torch's CPU allocation events per phase (the reported peak), and the RSS
    high-water mark reset at each phase's start (``/proc/self/clear_refs``)."""
    from torch.profiler import ProfilerActivity, profile

    global _profiler_ready
    if not _profiler_ready:  # the profiler's first start maps ~150 MB: not the step's
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True):
            pass
        _profiler_ready = True
    spans = []
    for phase in stepper.phases():
        Path("/proc/self/clear_refs").write_text("5")
        rss_start = _kib("VmRSS")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            phase()
        hwm, rss_end = _kib("VmHWM"), _kib("VmRSS")
        events = [
            (ev.start_ns(), ev.nbytes())
            for ev in prof.profiler.kineto_results.events()
            if ev.name() == "[memory]" and ev.device_type() == torch.autograd.DeviceType.CPU
        ]
        spans.append(
            _Span(
                peak=tensor_peak_from_events(events),
                net=sum(n for _, n in events),
                absolute=hwm * 1024,
                rss=max(hwm - rss_start, 0) * 1024,
                rss_net=(rss_end - rss_start) * 1024,
            )
        )
    return spans
