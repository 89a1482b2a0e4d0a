"""Three ways to time a sample, one protocol: warm up, flush the cache, time each sample.

* ``events``: the wall time of a call (CUDA events around it, ``perf_counter`` on CPU),
  ``timing.time_samples``: what a user of the method waits for.
* ``graph``: the call captured once in a CUDA graph after the warm-up (so autotuning and
  first-call compilation are never captured), each sample one replay between CUDA
  events, the L2 flush before it and outside the graph: the time without Python and
  launch overhead. A call that cannot be captured (a host sync such as ``.item()``, a
  data-dependent shape) raises ``TimerUnsupported`` with the reason, never another error.
* ``kernels``: the sum of the device kernels' durations the profiler saw in the call,
  the gaps between launches excluded; on CPU the sum of the ops' self times
  (``profile.kernel_ms``): the work alone, what a faster launch path could approach.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from perfsuite.measure.profile import kernel_ms, run_profiled
from perfsuite.measure.timing import CacheFlusher, Timing, time_samples, warm_up
from perfsuite.results.kinds import TIMERS

NO_GPU = "CUDA graphs need a GPU"


class TimerUnsupported(ValueError):
    """This timer cannot time this call; the message is one line saying why."""

    def __init__(self, reason: str) -> None:
        lines = str(reason).strip().splitlines()
        super().__init__(lines[0][:300] if lines else "unsupported")


def time_with(
    timer: str,
    fn: Callable[[], object],
    device: torch.device,
    *,
    samples: int,
    warmup: int,
    setup: Callable[[], object] | None = None,
    flush: CacheFlusher | None = None,
) -> Timing:
    """``samples`` samples of ``fn`` by ``timer`` (one of ``TIMERS``), after ``warmup``
    untimed calls; ``setup`` runs untimed before each call, as in ``time_samples``."""
    if timer not in TIMERS:
        raise ValueError(f"unknown timer {timer!r}: one of {', '.join(TIMERS)}")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    if timer == "events":
        return time_samples(fn, device, samples=samples, warmup=warmup, setup=setup, flush=flush)
    if timer == "graph":
        return _graph(fn, device, samples, warmup, setup, flush)
    return _kernels(fn, device, samples, warmup, setup, flush)


def _kernels(
    fn: Callable[[], object],
    device: torch.device,
    samples: int,
    warmup: int,
    setup: Callable[[], object] | None,
    flush: CacheFlusher | None,
) -> Timing:
    """Each sample: set-up and flush outside the profiler, then one profiled call."""
    flush = flush or CacheFlusher(device)
    warm_up([fn], warmup, setup)
    timing = Timing()
    for _ in range(samples):
        prof, _ = run_profiled(fn, device, setup=setup, flush=flush)
        timing.samples_ms.append(kernel_ms(prof, device))
    return timing


def _graph(
    fn: Callable[[], object],
    device: torch.device,
    samples: int,
    warmup: int,
    setup: Callable[[], object] | None,
    flush: CacheFlusher | None,
) -> Timing:
    """Warm-up, set-up and capture on a side stream (cuBLAS's per-stream workspaces,
    Triton's autotuning and the autograd streams of a backward all settle there first);
    ``setup`` runs once before the capture, not between replays: a replay reads and
    writes the addresses captured, and nothing between the capture and the last replay
    allocates (the flush writes a buffer made before), so what the captured kernels read
    (a forward's saved tensors, freed by the captured backward) stays as it was."""
    if device.type != "cuda":
        raise TimerUnsupported(NO_GPU)
    flush = flush or CacheFlusher(device)
    graph = _capture(fn, device, max(warmup, 1), setup)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    torch.cuda.synchronize(device)
    for start, end in zip(starts, ends, strict=True):
        flush()
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize(device)
    return Timing([float(s.elapsed_time(e)) for s, e in zip(starts, ends, strict=True)])


def _capture(
    fn: Callable[[], object], device: torch.device, warmup: int, setup: Callable[[], object] | None
) -> torch.cuda.CUDAGraph:
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    failure: BaseException | None = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        warm_up([fn], warmup, setup)
        if setup is not None:
            setup()
        torch.cuda.synchronize(device)
        try:
            with torch.cuda.graph(graph, stream=stream):
                try:
                    fn()
                except Exception as err:  # noqa: BLE001 - the reason goes into the message
                    failure = err
        except Exception as err:  # noqa: BLE001 - capture_end of a broken capture
            failure = failure or err
    torch.cuda.current_stream(device).wait_stream(stream)
    if failure is not None:
        _settle(device)
        raise TimerUnsupported(f"CUDA graph capture failed: {_one_line(failure)}") from None
    return graph


def _settle(device: torch.device) -> None:
    """After a failed capture: let the stream drain; an error it left is the capture's."""
    try:
        torch.cuda.synchronize(device)
    except Exception:  # noqa: BLE001 - reported as the capture's failure already
        pass


def _one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:240]
