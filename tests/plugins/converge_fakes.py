"""A method killed from outside mid-step (as by the kernel's OOM killer), for
``perfsuite converge``'s isolation test."""

from __future__ import annotations

import os
import signal

import torch

from perfsuite.method import Capabilities, Case, LossFn, SimpleMethod


def _killed(case: Case, c: torch.Tensor) -> LossFn:
    def loss_fn(e: torch.Tensor, c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    return loss_fn


METHODS = [
    SimpleMethod("fake-killed", "SIGKILLed in the loss", _killed, caps=Capabilities(True)),
]
