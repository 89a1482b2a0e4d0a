"""The default path as two ``torch.library`` custom ops joined by ``register_autograd``:
one opaque node each way for the compiler, with the Triton launches, the slice loop and
the value checks inside (docs/kernel.md, torch.compile). Options travel as scalars."""

from typing import Any

import torch

from . import terms
from .checks import check_targets_in_range, check_weight_values, queued
from .function import Params, _forward
from .slices import slices_backward

Tensor = torch.Tensor


@torch.library.custom_op("perfsuite::linear_cross_entropy", mutates_args=())
def lce_forward(
    e: Tensor,
    c: Tensor,
    targets: Tensor,
    weight: Tensor | None,
    beta: float,
    softcap: float | None,
    ignore_index: int,
    reduction: str,
    z_loss: float,
    engine: str,
    budget: int | None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(loss, lse, row max, log-sum) of 2-D ``e``; the checks that read values run here:
    eager ones first, queued device asserts after the forward's launches, so that the
    device does not wait for their host time before its one long kernel."""

    def check() -> None:
        check_targets_in_range(targets, c.shape[0], ignore_index)
        check_weight_values(weight)

    later = queued(targets.device)
    if not later:
        check()
    p = Params(beta, softcap, ignore_index, reduction, engine=engine, budget=budget, z_loss=z_loss)
    out, _ = _forward(e, c, targets, weight, p, needs_grad=True)
    if later:
        check()
    loss = terms.loss(out, terms.row_weights(targets, weight, p, c.shape[0]), p, c.shape[0])
    return loss, out.lse, out.row_max.clone(), out.log_sum.clone()


@lce_forward.register_fake
def _lce_forward_fake(
    e, c, targets, weight, beta, softcap, ignore_index, reduction, z_loss, engine, budget
):  # fmt: skip
    rows = e.shape[0]
    loss = e.new_empty((rows,) if reduction == "none" else (), dtype=torch.float32)
    return loss, *(e.new_empty((rows,), dtype=torch.float32) for _ in range(3))


@torch.library.custom_op("perfsuite::linear_cross_entropy_backward", mutates_args=())
def lce_backward(
    e: Tensor,
    c: Tensor,
    targets: Tensor,
    weight: Tensor | None,
    row_max: Tensor,
    log_sum: Tensor,
    grad_loss: Tensor,
    grad_lse: Tensor | None,
    beta: float,
    softcap: float | None,
    ignore_index: int,
    reduction: str,
    z_loss: float,
    engine: str,
    budget: int | None,
) -> tuple[Tensor, Tensor]:
    """(dE, dC) in the inputs' dtypes: the slice backward of slices.py."""
    p = Params(beta, softcap, ignore_index, reduction, engine=engine, budget=budget, z_loss=z_loss)
    rows = terms.row_weights(targets, weight, p, c.shape[0])
    k = terms.coefficients(rows, row_max + log_sum, p, c.shape[0], grad_loss, grad_lse)
    return slices_backward(e, c, targets, row_max, log_sum, k, p=p, weight=weight)


@lce_backward.register_fake
def _lce_backward_fake(e, c, *args):  # fmt: skip
    return torch.empty_like(e), torch.empty_like(c)


def _setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    e, c, targets, weight, *options = inputs
    _, _, row_max, log_sum = output
    ctx.save_for_backward(e, c, targets, weight, row_max, log_sum)
    ctx.options = options


def _backward(ctx: Any, grad_loss: Tensor, grad_lse: Tensor | None, *_: Any) -> tuple:
    e, c, targets, weight, row_max, log_sum = ctx.saved_tensors
    de, dc = lce_backward(
        e, c, targets, weight, row_max, log_sum, grad_loss, grad_lse, *ctx.options
    )
    return (de, dc) + (None,) * (2 + len(ctx.options))


lce_forward.register_autograd(_backward, setup_context=_setup_context)
