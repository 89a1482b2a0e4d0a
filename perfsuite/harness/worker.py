"""What every kind's worker shares: a measured row's columns, the status of a case that
raised, the memory cap that provokes ``oom``, and a loss cell's phase bodies. Here, not
in one kind's worker, so that step, converge and regress need not import the loss kind."""

from __future__ import annotations

import resource
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from perfsuite.measure.memory import Peak
from perfsuite.measure.timing import Timing
from perfsuite.method import LossFn, Unavailable, Unsupported
from perfsuite.results.results import Row

# Said next to a bf16 failure under the interpreter, whose casts differ from a GPU's.
INTERPRETER_BF16_NOTE = (
    "under the Triton interpreter, whose fp32->bf16 casts truncate where GPUs round to "
    "nearest: may pass on a GPU"
)


def fill(row: Row, peak: Peak, timing: Timing) -> None:
    """A measured row's memory and time columns."""
    row.peak_bytes, row.peak_abs_bytes = peak.delta, peak.absolute
    row.rss_peak_bytes, row.samples_ms = peak.rss_delta, timing.samples_ms
    if timing.samples_ms:
        row.median_ms, row.p20_ms, row.p80_ms = timing.median_ms, timing.p20_ms, timing.p80_ms


def failure(err: BaseException) -> tuple[str, str]:
    """``(status, reason)`` of a case whose measurement raised ``err``."""
    if isinstance(err, Unsupported):
        return "unsupported", str(err)
    if isinstance(err, Unavailable):
        return "unavailable", str(err)
    return ("oom" if is_oom(err) else "error"), describe(err)


def is_oom(err: BaseException) -> bool:
    if isinstance(err, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(err)
    return isinstance(err, RuntimeError) and (
        "can't allocate memory" in text or "out of memory" in text.lower()
    )


def describe(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:500]


def limit_memory(extra_bytes: int) -> None:
    """Cap the data segment at what the process holds now plus ``extra_bytes``."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmData:"):
            current = int(line.split()[1]) * 1024
            resource.setrlimit(
                resource.RLIMIT_DATA, (current + extra_bytes, resource.RLIM_INFINITY)
            )
            return


class Phase:
    """The untimed set-up and the timed body of one phase of a loss cell (``inputs``: a
    ``perfsuite.run.inputs.Inputs``, its e, c and targets)."""

    def __init__(self, name: str, loss_fn: LossFn, inputs: Any) -> None:
        self.name, self.loss_fn, self.inputs = name, loss_fn, inputs
        self.loss: torch.Tensor | None = None

    def _forward(self) -> None:
        self.loss = self.loss_fn(self.inputs.e, self.inputs.c, self.inputs.targets)

    def _backward(self) -> None:
        assert self.loss is not None
        self.loss.backward()
        self.loss = None

    def _fwd_bwd(self) -> None:
        self.loss_fn(self.inputs.e, self.inputs.c, self.inputs.targets).backward()

    def reset(self) -> None:
        """Drop the pending graph and the gradients."""
        self.loss = None
        self.inputs.clear_grads()

    def setup(self) -> None:
        self.reset()
        if self.name == "bwd":
            self._forward()

    @property
    def body(self) -> Callable[[], None]:
        return {"fwd": self._forward, "bwd": self._backward, "fwd+bwd": self._fwd_bwd}[self.name]
