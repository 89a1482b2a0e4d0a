"""A method declared in one file: its loss, its shard across ranks, its model patch."""

from __future__ import annotations

import torch

from perfsuite.baselines.torch_methods import EAGER, eager_loss
from perfsuite.method import AcrossRanks, Capabilities, Case, Holds, LossFn, SimpleMethod, StepPatch


def build(case: Case, c: torch.Tensor) -> LossFn:
    """The loss on one device (``run``; ``converge`` trains with it). Untimed set-up
    goes here; import the library it wraps here too, not at the top."""

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return eager_loss(e, c, targets, case.beta, case.softcap)

    return loss_fn


def patch(model: torch.nn.Module, preset: object, beta: float):
    """A transformers causal LM's training step (``step``): patch ``model`` in place,
    return the loss of a batch of token ids."""
    from perfsuite.step.model import eager_loss as model_loss

    return lambda ids: model_loss(model, ids, beta)


# What it supports, and what it holds at its peak (every memory estimator reads this):
# eager's N x V logits, 4 copies of them (7 with a softcap).
CAPS = Capabilities(label_smoothing=True, softcap=True, holds=Holds("logits", (4.0, 7.0)))

METHODS = [
    SimpleMethod(
        "one-file",
        "eager's math, declared in one file",
        build=build,
        caps=CAPS,
        # Across ranks (``run --tp``): eager's all-gathered shard logits.
        tp=AcrossRanks(EAGER.tp.build, "eager across ranks"),
        step=StepPatch(patch),
    ),
]
