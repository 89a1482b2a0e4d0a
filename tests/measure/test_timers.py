"""The three timers: events (the wall clock), graph (CUDA graph replays), kernels (the
profiler's kernel time)."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from perfsuite.measure.timers import TIMERS, TimerUnsupported, time_with

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def small_ce(device: str = "cpu", gap_s: float = 0.0):
    """A small linear cross-entropy, forward and backward, then ``gap_s`` of Python (the
    host's time: a chunk loop, a sync): (fn, setup)."""
    e = torch.randn(64, 32, device=device, requires_grad=True)
    c = torch.randn(256, 32, device=device, requires_grad=True)
    t = torch.randint(0, 256, (64,), device=device)

    def setup() -> None:
        e.grad = c.grad = None

    def fn() -> None:
        F.cross_entropy(F.linear(e, c), t).backward()
        if gap_s:
            time.sleep(gap_s)

    return fn, setup


def test_graph_on_cpu_is_unsupported_in_one_line():
    calls = []
    with pytest.raises(TimerUnsupported) as err:
        time_with("graph", lambda: calls.append(1), CPU, samples=3, warmup=1)
    assert str(err.value) == "CUDA graphs need a GPU"
    assert isinstance(err.value, ValueError)
    assert calls == []  # refused before any call
    assert str(TimerUnsupported("capture failed: sync\n  at frame 3\n")) == "capture failed: sync"


def test_an_unknown_timer_is_refused():
    assert TIMERS == ("events", "graph", "kernels")
    with pytest.raises(ValueError, match="unknown timer 'cupti': one of events, graph, kernels"):
        time_with("cupti", lambda: None, CPU, samples=1, warmup=0)


def test_kernels_never_exceeds_events_and_leaves_out_the_host():
    fn, setup = small_ce(gap_s=0.05)
    kw = dict(samples=5, warmup=1, setup=setup)
    events = time_with("events", fn, CPU, **kw)
    kernels = time_with("kernels", fn, CPU, **kw)
    assert len(kernels.samples_ms) == 5
    assert 0 < kernels.median_ms <= events.median_ms
    # The 50 ms of Python in every call is in no op: the kernels timer leaves it out.
    assert events.median_ms >= 50
    assert kernels.median_ms < 25, kernels.samples_ms


def test_kernels_keeps_setup_and_flush_outside_its_samples():
    calls = []

    def setup() -> None:
        calls.append("setup")
        torch.ones(256, 256).exp()  # an op, outside the profiled call
        time.sleep(0.02)

    fn = lambda: calls.append("fn")  # noqa: E731
    timing = time_with("kernels", fn, CPU, samples=3, warmup=2, setup=setup)
    assert calls == ["setup", "fn"] * 5
    assert timing.samples_ms == [0.0, 0.0, 0.0]  # fn runs no op: nothing to count


# CUDA: graphs, a failed capture, the kernels timer.


def launch_bound(device: str = "cuda"):
    """200 tiny kernels: launch overhead is most of the wall time."""
    x = torch.zeros(16, device=device)

    def fn() -> None:
        for _ in range(200):
            x.add_(1.0)

    return fn


@pytest.mark.cuda
@needs_cuda
def test_graph_replays_and_kernels_leave_out_launch_overhead():
    cuda = torch.device("cuda")
    fn = launch_bound()
    events = time_with("events", fn, cuda, samples=10, warmup=2)
    graph = time_with("graph", fn, cuda, samples=10, warmup=2)
    assert len(graph.samples_ms) == 10 and graph.median_ms > 0
    assert graph.median_ms < events.median_ms
    kernels = time_with("kernels", fn, cuda, samples=10, warmup=2)
    assert 0 < kernels.median_ms <= events.median_ms


@pytest.mark.cuda
@needs_cuda
def test_graph_of_a_backward_phase():
    cuda = torch.device("cuda")
    e = torch.randn(512, 256, device="cuda", requires_grad=True)
    c = torch.randn(4096, 256, device="cuda", requires_grad=True)
    t = torch.randint(0, 4096, (512,), device="cuda")
    state = {}

    def setup() -> None:  # the untimed forward, as the worker's bwd phase
        e.grad = c.grad = None
        state["loss"] = F.cross_entropy(F.linear(e, c), t)

    def fn() -> None:
        state.pop("loss").backward()

    timing = time_with("graph", fn, cuda, samples=5, warmup=2, setup=setup)
    assert len(timing.samples_ms) == 5 and min(timing.samples_ms) > 0
    assert e.grad is not None and torch.isfinite(e.grad).all()


@pytest.mark.cuda
@needs_cuda
def test_warm_up_is_never_captured():
    """A first call that syncs (autotuning, compilation) is the warm-up's, not the graph's."""
    x = torch.ones(1024, device="cuda")
    calls = []

    def fn() -> None:
        if not calls:
            float(x.sum())  # a host sync: uncapturable
        calls.append(1)
        x.mul_(1.0)

    timing = time_with("graph", fn, torch.device("cuda"), samples=3, warmup=1)
    assert len(timing.samples_ms) == 3


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize(
    "body",
    [
        lambda x: float(x.sum()),  # a host sync
        lambda x: torch.nonzero(x),  # a data-dependent shape
    ],
    ids=["item", "nonzero"],
)
def test_an_uncapturable_call_is_unsupported_and_the_device_still_works(body):
    x = torch.ones(1024, device="cuda")
    with pytest.raises(TimerUnsupported) as err:
        time_with("graph", lambda: body(x), torch.device("cuda"), samples=3, warmup=1)
    message = str(err.value)
    assert message.startswith("CUDA graph capture failed: ") and "\n" not in message
    assert float(torch.ones(8, device="cuda").sum()) == 8.0
