"""Three ways to time a sample, one protocol (docs/run.md#timers): ``events`` (a call's
wall time), ``graph`` (one CUDA graph replay; ``TimerUnsupported`` says why a call cannot
be captured), ``kernels`` (the profiled kernels' summed durations, launch gaps excluded)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress

import torch

from perfsuite.measure.profile import breakdown_of, run_profiled
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
    if timer == "events":
        return time_samples(fn, device, samples=samples, warmup=warmup, setup=setup, flush=flush)
    if timer == "graph" and device.type != "cuda":
        raise TimerUnsupported(NO_GPU)
    flush = flush or CacheFlusher(device)
    if timer == "graph":  # each sample one replay between CUDA events, the flush before it
        graph = _capture(fn, device, max(warmup, 1), setup)
        return time_samples(graph.replay, device, samples=samples, warmup=0, flush=flush)
    # kernels: set-up and flush outside the profiler, then one profiled call a sample
    warm_up([fn], warmup, setup)
    runs = (run_profiled(fn, device, setup=setup, flush=flush)[0] for _ in range(samples))
    return Timing([breakdown_of(prof, device, 0.0).device_ms for prof in runs])


def _capture(
    fn: Callable[[], object], device: torch.device, warmup: int, setup: Callable[[], object] | None
) -> torch.cuda.CUDAGraph:
    """Warm-up, set-up and capture on a side stream, where cuBLAS's workspaces, Triton's
    autotuning and autograd's streams settle first. ``setup`` runs once, before the
    capture: replays reuse the captured addresses, and nothing allocates between them."""
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
        with suppress(Exception):  # let the stream drain: an error it left is the capture's
            torch.cuda.synchronize(device)
        why = f"{type(failure).__name__}: {str(failure).strip()}"
        raise TimerUnsupported(f"CUDA graph capture failed: {why}") from None
    return graph
