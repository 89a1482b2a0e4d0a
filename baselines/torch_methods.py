"""Methods built from torch alone: the fp32 reference, eager, torch.compile, torch-native."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from perfsuite.method import Capabilities, Case, LossFn, SimpleMethod


def softcapped(logits: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """Gemma2's logit softcap ``s * tanh(l / s)``; identity without one."""
    return logits if softcap is None else softcap * torch.tanh(logits / softcap)


def reference_loss(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    beta: float = 0.0,
    softcap: float | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> torch.Tensor:
    """The yardstick: fp32 materialised logits through ``F.cross_entropy``."""
    logits = softcapped(e.float() @ c.float().T, softcap)
    return F.cross_entropy(
        logits, targets, label_smoothing=beta, ignore_index=ignore_index, reduction=reduction
    )


def eager_loss(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    beta: float = 0.0,
    softcap: float | None = None,
    ignore_index: int = -100,
) -> torch.Tensor:
    """The paper's "Baseline": logits in the input dtype, then ``F.cross_entropy``."""
    logits = softcapped(e @ c.T, softcap)
    return F.cross_entropy(logits, targets, label_smoothing=beta, ignore_index=ignore_index)


def _build_reference(case: Case, c: torch.Tensor) -> LossFn:
    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return reference_loss(e, c, targets, case.beta, case.softcap, case.ignore_index)

    return loss_fn


def _build_eager(case: Case, c: torch.Tensor) -> LossFn:
    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return eager_loss(e, c, targets, case.beta, case.softcap, case.ignore_index)

    return loss_fn


def _build_compiled(case: Case, c: torch.Tensor) -> LossFn:
    # beta and softcap are bound as Python constants, as a training loop would.
    compiled = torch.compile(eager_loss, dynamic=False)

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return compiled(e, c, targets, case.beta, case.softcap, case.ignore_index)

    return loss_fn


def _native_check(device: str) -> str | None:
    if not hasattr(F, "linear_cross_entropy") or not hasattr(torch.nn, "LinearCrossEntropyOptions"):
        return f"torch {torch.__version__} has no F.linear_cross_entropy (new in torch 2.13)"
    return None


def _build_native(case: Case, c: torch.Tensor) -> LossFn:
    options = torch.nn.LinearCrossEntropyOptions()

    def loss_fn(e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # At beta > 0 torch falls back to full logits (with a warning): that is
        # what it does, and what we measure.
        return F.linear_cross_entropy(
            e,
            c,
            targets,
            ignore_index=case.ignore_index,
            label_smoothing=case.beta,
            options=options,
        )

    return loss_fn


METHODS = [
    SimpleMethod(
        name="reference",
        description="fp32 materialised logits + F.cross_entropy (the yardstick)",
        build=_build_reference,
        caps=Capabilities(label_smoothing=True, softcap=True),
        distributions=("torch",),
        timed_by_default=False,
    ),
    SimpleMethod(
        name="eager",
        description="F.cross_entropy on e @ c.T in the input dtype (paper's Baseline)",
        build=_build_eager,
        caps=Capabilities(label_smoothing=True, softcap=True),
        distributions=("torch",),
    ),
    SimpleMethod(
        name="torch-compile",
        description="eager under torch.compile (compiled before timing)",
        build=_build_compiled,
        caps=Capabilities(label_smoothing=True, softcap=True),
        distributions=("torch",),
    ),
    SimpleMethod(
        name="torch-native",
        description="F.linear_cross_entropy with LinearCrossEntropyOptions() (chunked; "
        "full logits when beta > 0)",
        build=_build_native,
        caps=Capabilities(
            label_smoothing=True,
            softcap=False,
            grads_in_forward=True,
            materializes_logits=False,
            smoothing_falls_back=True,
        ),
        distributions=("torch",),
        extra_check=_native_check,
    ),
]
