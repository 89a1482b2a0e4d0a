"""Eager's own rounding noise, the yardstick a method's distance from eager is read
against (``parity``; docs/converge.md): training amplifies last-bit differences, so every
sweep also trains eager's loss rounded otherwise: in fp32 ``eager-reordered`` (the tokens
summed in two halves), in 16 bit ``reference`` (fp32 logits on the same model)."""

from __future__ import annotations

import torch

from perfsuite.baselines.torch_methods import cross_entropy_terms
from perfsuite.method import Capabilities, Case, LossFn, SimpleMethod

REORDERED = "eager-reordered"
FP32_LOGITS = "reference"  # perfsuite.baselines.torch_methods


def _reordered(case: Case, c: torch.Tensor) -> LossFn:
    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        half = e.shape[0] // 2
        args = (case.beta, case.ignore_index, "sum")
        total = sum(
            cross_entropy_terms(e[h] @ c.T, targets[h], *args, z_loss=case.z_loss)
            for h in (slice(0, half), slice(half, None))
        )
        return total / (targets != case.ignore_index).sum()

    return loss_fn


METHODS = {
    REORDERED: SimpleMethod(
        REORDERED,
        "eager with the loss summed over two halves of the tokens (another rounding)",
        _reordered,
        caps=Capabilities(label_smoothing=True, z_loss=True),
        distributions=("torch",),
    )
}


def yardstick_for(dtype: str) -> str:
    """The method whose distance from eager is eager's own noise in ``dtype``."""
    return REORDERED if dtype == "fp32" else FP32_LOGITS
