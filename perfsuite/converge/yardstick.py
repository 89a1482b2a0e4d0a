"""Eager's own rounding noise, the yardstick a method's distance from eager is read against.

Training amplifies rounding: two fp32 runs whose losses differ in the last bit
drift apart, slowly while the model generalises and fast once it memorises.
Measured at the cpu-calibration preset (reports/converge-cpu-calibration/), eager
against this yardstick at beta = 0: at most 2.5e-7 relative through step 200,
past Liger's 2e-5 at step 260, 8.3e-5 at most; at beta = 0.1, 7.5e-7 at most.
Liger's fixed tolerances were set for 32 steps. So every sweep also
trains eager's loss with another rounding, and a method also passes if it is no
farther from eager than twice that run is (``parity``):

* fp32: ``eager-reordered``, eager's exact math with the tokens summed in two
  halves (the loss and its gradient round differently, nothing else changes);
* bf16 / fp16: ``reference``, fp32 logits through ``F.cross_entropy`` on the same
  16-bit model (eager rounds its logits and their gradient to 16 bits).
"""

from __future__ import annotations

import torch

from perfsuite.baselines.torch_methods import cross_entropy_terms
from perfsuite.method import Capabilities, Case, LossFn, SimpleMethod

REORDERED = "eager-reordered"
FP32_LOGITS = "reference"  # perfsuite.baselines.torch_methods


def _reordered(case: Case, c: torch.Tensor) -> LossFn:
    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        half = e.shape[0] // 2
        total = sum(
            cross_entropy_terms(
                e[part] @ c.T,
                targets[part],
                case.beta,
                case.ignore_index,
                "sum",
                z_loss=case.z_loss,
            )  # fmt: skip
            for part in (slice(0, half), slice(half, None))
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
