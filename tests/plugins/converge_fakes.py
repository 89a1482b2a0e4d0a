"""Methods that fail the ways a training run can, for ``perfsuite converge``'s tests:
out of memory inside the process, and killed from outside (as by the OOM killer)."""

from __future__ import annotations

import os
import signal

import torch

from perfsuite.method import Capabilities, Case, LossFn, SimpleMethod


def _oom(case: Case, c: torch.Tensor) -> LossFn:
    def loss_fn(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        raise torch.OutOfMemoryError("deliberate: tried to allocate 9.00 GiB")

    return loss_fn


def _killed(case: Case, c: torch.Tensor) -> LossFn:
    def loss_fn(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    return loss_fn


METHODS = [
    SimpleMethod("fake-oom", "out of memory in the loss", _oom, caps=Capabilities(True)),
    SimpleMethod("fake-killed", "SIGKILLed in the loss", _killed, caps=Capabilities(True)),
]
