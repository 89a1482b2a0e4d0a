"""The loss's per-row terms, their reductions, and the backward's per-row coefficients
(A, B, S) of the gradient ``A_n·p_v − B_n·[v = y_n] − S_n·w_v`` in the (softcapped) logits,
which every engine's backward consumes and nothing else (the formulas: docs/kernel.md,
"Training options"). ``p`` is the call's options (function.Params).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

Rows = tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]


@dataclass(frozen=True)
class Coefficients:
    """fp32 (N,) each; ``smooth`` is None without label smoothing."""

    prob: torch.Tensor  # A
    target: torch.Tensor  # B
    smooth: torch.Tensor | None  # S


def row_weights(targets: torch.Tensor, weight: torch.Tensor | None, p: Any, vocab: int) -> Rows:
    """The validity mask, fp32 w[y_n] (0 at ignored rows) and Σ w; None, None without
    class weights."""
    valid = targets != p.ignore_index
    if weight is None:
        return valid, None, None
    wy = torch.where(valid, weight.index_select(0, targets.clamp(0, vocab - 1)), 0.0)
    return valid, wy, weight.sum()


def _mean(x: torch.Tensor, valid: torch.Tensor, wy: torch.Tensor | None) -> torch.Tensor:
    """``x`` / (Σ_valid w_y, or the valid count), and 0 where that is 0: an empty mean is
    0 (torch gives NaN), without a host sync."""
    total = valid.sum().float() if wy is None else wy.sum()
    return torch.where(total > 0, x / total, 0.0)


def loss(out: Any, rows: Rows, p: Any, vocab: int) -> torch.Tensor:
    """The reduced loss from a forward's per-row statistics (forward.ForwardResult), its
    cross-entropy around the row max with ``rel_sum`` = Σ_v w_v (z − max), plus the
    z-loss; ignored rows count 0."""
    valid, wy, wsum = rows
    beta = p.beta
    if wy is None:
        ce = out.log_sum + (1.0 - beta) * (out.row_max - out.target_logit)
        if out.rel_sum is not None:
            ce = ce - (beta / vocab) * out.rel_sum
    else:
        ce = (1.0 - beta) * wy * (out.log_sum + out.row_max - out.target_logit)
        if out.rel_sum is not None:
            ce = ce + (beta / vocab) * (wsum * out.log_sum - out.rel_sum)
    ce = torch.where(valid, ce, 0.0)
    zl = torch.where(valid, p.z_loss * out.lse.square(), 0.0) if p.z_loss else None
    if p.reduction == "none":
        return ce if zl is None else ce + zl
    total = ce.sum()
    z_total = None if zl is None else zl.sum()
    if p.reduction == "mean":
        total = _mean(total, valid, wy)
        if z_total is not None:
            z_total = _mean(z_total, valid, None)
    return total if z_total is None else total + z_total


def coefficients(
    rows: Rows,
    lse: torch.Tensor,
    p: Any,
    vocab: int,
    grad_out: torch.Tensor | None = None,
    grad_lse: torch.Tensor | None = None,
) -> Coefficients:
    """(A, B, S) of the module doc for upstream ``grad_out`` (None: 1) and ``grad_lse``."""
    valid, wy, wsum = rows
    beta, z_loss = p.beta, p.z_loss
    h = valid.to(torch.float32)
    q = h if z_loss else None
    if p.reduction == "mean":
        h = _mean(h, valid, wy)
        if q is not None:
            q = _mean(q, valid, None)
    if grad_out is not None:
        up = grad_out.reshape(-1 if p.reduction == "none" else ()).float()
        h = h * up
        q = None if q is None else q * up
    if wy is None:
        prob, target = h, h * (1.0 - beta)
    else:
        target = h * (1.0 - beta) * wy
        prob = target + h * (beta * wsum / vocab) if beta > 0 else target
    if q is not None:
        prob = prob + (2.0 * z_loss) * q * lse
    if grad_lse is not None:
        prob = prob + grad_lse.float()
    smooth = h * (beta / vocab) if beta > 0 else None
    return Coefficients(prob, target, smooth)
