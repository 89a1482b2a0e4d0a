"""Autograd Functions: split (forward kernel, later backward kernel) and fused.

Both save only O(N + V + D) beyond their inputs: the LSE, c̄, the vocab
averages. The fused Function runs the LSE pass and then the gradient pass inside
its forward (two launches, no grid-wide barrier) and keeps dE/dC for backward,
which only scales them by the upstream scalar.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .backward import lce_backward
from .forward import lse_forward
from .reductions import column_sum
from .sorting import vocab_order


@dataclass(frozen=True)
class Params:
    """Everything but the tensors; validated by ``api.linear_cross_entropy``."""

    beta: float
    softcap: float | None
    ignore_index: int
    reduction: str
    filter_eps: float | None
    sort_vocab: bool
    accum_fp32: bool
    num_splits: int | None = None


def _valid(targets: torch.Tensor, p: Params) -> torch.Tensor:
    return targets != p.ignore_index


def _forward(
    e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor, p: Params, needs_grad: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Per-row losses (0 at ignored rows), the LSE, validity, c̄ and vocab averages."""
    smoothing = p.beta > 0
    # c̄ serves the forward (no softcap) and the backward's rank-one part.
    cbar = column_sum(c) if smoothing and (p.softcap is None or needs_grad) else None
    sort = needs_grad and p.sort_vocab and p.filter_eps is not None
    out = lse_forward(
        e,
        c,
        targets,
        cbar=cbar,
        smoothing=smoothing,
        softcap=p.softcap,
        logit_avg=sort,
        num_splits=p.num_splits,
    )
    rows = out.lse - (1.0 - p.beta) * out.target_logit
    if out.smooth_sum is not None:
        rows = rows - (p.beta / c.shape[0]) * out.smooth_sum
    valid = _valid(targets, p)
    rows = torch.where(valid, rows, 0.0)
    return rows, out.lse, valid, cbar, out.logit_avg


def _reduce(rows: torch.Tensor, valid: torch.Tensor, reduction: str) -> torch.Tensor:
    if reduction == "none":
        return rows
    total = rows.sum()
    if reduction == "sum":
        return total
    # All rows ignored: 0 (torch gives NaN), without a host sync.
    return total / valid.sum().clamp(min=1)


def _row_grads(valid: torch.Tensor, reduction: str, grad_out: torch.Tensor | None) -> torch.Tensor:
    """fp32 per-row upstream gradient g_n (0 at ignored rows)."""
    weights = valid.to(torch.float32)
    if reduction == "mean":
        weights = weights / valid.sum().clamp(min=1)
    if grad_out is not None:
        weights = weights * grad_out.reshape(-1 if reduction == "none" else ()).float()
    return weights


def _grads(
    ctx: Any,
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    lse: torch.Tensor,
    g: torch.Tensor,
    cbar: torch.Tensor | None,
    logit_avg: torch.Tensor | None,
    p: Params,
) -> tuple[torch.Tensor, torch.Tensor]:
    order = vocab_order(logit_avg) if logit_avg is not None else None
    return lce_backward(
        e,
        c,
        targets,
        lse,
        g,
        cbar=cbar,
        beta=p.beta,
        softcap=p.softcap,
        filter_eps=p.filter_eps,
        order=order,
        accum_fp32=p.accum_fp32,
    )


class LinearCrossEntropyFunction(torch.autograd.Function):
    """Split version: LSE/target/smoothing forward, recomputing backward."""

    @staticmethod
    def forward(
        ctx: Any, e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor, p: Params
    ) -> torch.Tensor:
        needs_grad = any(ctx.needs_input_grad[:2])
        rows, lse, valid, cbar, logit_avg = _forward(e, c, targets, p, needs_grad)
        ctx.params = p
        ctx.save_for_backward(e, c, targets, lse, cbar, logit_avg)
        return _reduce(rows, valid, p.reduction)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        e, c, targets, lse, cbar, logit_avg = ctx.saved_tensors
        p: Params = ctx.params
        g = _row_grads(_valid(targets, p), p.reduction, grad_out)
        de, dc = _grads(ctx, e, c, targets, lse, g, cbar, logit_avg, p)
        return (
            de if ctx.needs_input_grad[0] else None,
            dc if ctx.needs_input_grad[1] else None,
            None,
            None,
        )


class FusedLinearCrossEntropyFunction(torch.autograd.Function):
    """Fused version: dE/dC are computed in the forward call for upstream gradient 1.

    ``reduction="none"`` cannot fold a per-row upstream gradient into a
    precomputed dC, so there the gradient pass waits for backward (as split).
    """

    @staticmethod
    def forward(
        ctx: Any, e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor, p: Params
    ) -> torch.Tensor:
        needs_grad = any(ctx.needs_input_grad[:2])
        rows, lse, valid, cbar, logit_avg = _forward(e, c, targets, p, needs_grad)
        ctx.params = p
        ctx.fused = needs_grad and p.reduction != "none"
        if ctx.fused:
            g = _row_grads(valid, p.reduction, None)
            de, dc = _grads(ctx, e, c, targets, lse, g, cbar, logit_avg, p)
            ctx.save_for_backward(de, dc)
        else:
            ctx.save_for_backward(e, c, targets, lse, cbar, logit_avg)
        return _reduce(rows, valid, p.reduction)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        if not ctx.fused:
            return LinearCrossEntropyFunction.backward(ctx, grad_out)
        de, dc = ctx.saved_tensors
        # Scale in place (no second N×D / V×D buffer): backward runs once per graph.
        return (
            de.mul_(grad_out) if ctx.needs_input_grad[0] else None,
            dc.mul_(grad_out) if ctx.needs_input_grad[1] else None,
            None,
            None,
        )
