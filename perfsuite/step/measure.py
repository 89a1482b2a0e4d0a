"""Time and memory of one training step by phase: a sample is a whole step with the clock
read between phases (fwd + bwd + opt = step)."""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable

import torch

from perfsuite.measure.memory import Peak, measure_peak
from perfsuite.measure.timing import CacheFlusher, Sampling, time_samples, time_spans
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

    def phases(self) -> list[Callable[[], None]]:
        return [self.forward, self.backward, self.optimize]


def time_steps(
    stepper: Stepper, device: torch.device, how: Sampling, flush: CacheFlusher
) -> dict[str, list[float]]:
    """Milliseconds per sample of each phase and of the whole step (their sum)."""
    spans = time_spans(
        stepper.phases(), device, samples=how.samples, warmup=how.warmup, flush=flush,
        cpu_time=how.cpu_time,
    )  # fmt: skip
    out = {p: [s[i] for s in spans] for i, p in enumerate(STEP_PHASES[:-1])}
    out["step"] = [sum(s) for s in spans]
    return out


def time_fwd_bwd(
    model: torch.nn.Module,
    loss_of: Callable[[torch.Tensor], torch.Tensor],
    ids: torch.Tensor,
    device: torch.device,
    how: Sampling,
    flush: CacheFlusher,
) -> list[float]:
    """Milliseconds of ``loss_of(ids).backward()`` per sample, gradients cleared untimed."""
    clear = functools.partial(model.zero_grad, set_to_none=True)
    timing = time_samples(
        lambda: loss_of(ids).backward(), device, samples=how.samples, warmup=how.warmup,
        setup=clear, flush=flush, cpu_time=how.cpu_time,
    )  # fmt: skip
    clear()
    return timing.samples_ms


def step_memory(stepper: Stepper, device: torch.device) -> dict[str, Peak]:
    """Peak memory of each phase above its start (``perfsuite.measure.memory``), and of
    the step above its start: each phase's peak over what the phases before it left."""
    gc.collect()
    spans = [measure_peak(phase, device) for phase in stepper.phases()]
    out = dict(zip(STEP_PHASES, spans, strict=False))
    peak = base = rss = rss_base = 0
    for span in spans:
        peak, base = max(peak, base + span.delta), base + span.net
        rss, rss_base = max(rss, rss_base + (span.rss_delta or 0)), rss_base + span.rss_net
    cpu = device.type != "cuda"  # RSS is cumulative too: each phase's growth over its start
    out["step"] = Peak(peak, max(s.absolute for s in spans), rss if cpu else None)
    return out
