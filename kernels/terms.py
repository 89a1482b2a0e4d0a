"""The loss's per-row terms, their reductions, and the backward's per-row coefficients
(A, B, S) of the gradient ``A_n·p_v − B_n·[v = y_n] − S_n·w_v`` in the (softcapped) logits,
which every engine's backward consumes and nothing else (the formulas: docs/kernel.md,
"Training options").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Coefficients:
    """fp32 (N,) each; ``smooth`` is None without label smoothing."""

    prob: torch.Tensor  # A
    target: torch.Tensor  # B
    smooth: torch.Tensor | None  # S


def target_weights(
    targets: torch.Tensor, valid: torch.Tensor, weight: torch.Tensor | None, vocab: int
) -> torch.Tensor | None:
    """fp32 w[y_n] (0 at ignored rows); None without class weights."""
    if weight is None:
        return None
    ids = targets.clamp(0, vocab - 1)
    return torch.where(valid, weight.index_select(0, ids), 0.0)


def ce_rows(
    row_max: torch.Tensor,
    log_sum: torch.Tensor,
    target_logit: torch.Tensor,
    rel_sum: torch.Tensor | None,
    valid: torch.Tensor,
    *,
    beta: float,
    vocab: int,
    wy: torch.Tensor | None = None,
    wsum: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-row cross-entropy (0 at ignored rows) around the row max, ``rel_sum`` being
    Σ_v w_v (z − max): unweighted, log-sum + (1−β)(max − z_y) − (β/V)·rel_sum."""
    if wy is None:
        rows = log_sum + (1.0 - beta) * (row_max - target_logit)
        if rel_sum is not None:
            rows = rows - (beta / vocab) * rel_sum
    else:
        assert wsum is not None
        rows = (1.0 - beta) * wy * (log_sum + row_max - target_logit)
        if rel_sum is not None:
            rows = rows + (beta / vocab) * (wsum * log_sum - rel_sum)
    return torch.where(valid, rows, 0.0)


def z_rows(lse: torch.Tensor, valid: torch.Tensor, z_loss: float) -> torch.Tensor | None:
    """Per-row z_loss·lse² (0 at ignored rows), or None when z_loss is 0."""
    if z_loss == 0:
        return None
    return torch.where(valid, z_loss * lse.square(), 0.0)


def _mean(x: torch.Tensor, valid: torch.Tensor, wy: torch.Tensor | None) -> torch.Tensor:
    """``x`` / (Σ_valid w_y, or the valid count), and 0 where that is 0: an empty mean is
    0 (torch gives NaN), without a host sync."""
    total = valid.sum().float() if wy is None else wy.sum()
    return torch.where(total > 0, x / total, 0.0)


def reduce(
    ce: torch.Tensor,
    zl: torch.Tensor | None,
    valid: torch.Tensor,
    reduction: str,
    wy: torch.Tensor | None = None,
) -> torch.Tensor:
    """The reduced loss, without a host sync (an all-ignored mean is 0, not NaN)."""
    if reduction == "none":
        return ce if zl is None else ce + zl
    total = ce.sum()
    z_total = None if zl is None else zl.sum()
    if reduction == "mean":
        total = _mean(total, valid, wy)
        if z_total is not None:
            z_total = _mean(z_total, valid, None)
    return total if z_total is None else total + z_total


def coefficients(
    valid: torch.Tensor,
    lse: torch.Tensor,
    *,
    beta: float,
    vocab: int,
    reduction: str,
    z_loss: float = 0.0,
    wy: torch.Tensor | None = None,
    wsum: torch.Tensor | None = None,
    grad_out: torch.Tensor | None = None,
    grad_lse: torch.Tensor | None = None,
) -> Coefficients:
    """(A, B, S) of the module doc for upstream ``grad_out`` (None: 1) and ``grad_lse``."""
    h = valid.to(torch.float32)
    q = h if z_loss else None
    if reduction == "mean":
        h = _mean(h, valid, wy)
        if q is not None:
            q = _mean(q, valid, None)
    if grad_out is not None:
        up = grad_out.reshape(-1 if reduction == "none" else ()).float()
        h = h * up
        q = None if q is None else q * up
    if wy is None:
        prob, target = h, h * (1.0 - beta)
    else:
        assert wsum is not None
        target = h * (1.0 - beta) * wy
        prob = target + h * (beta * wsum / vocab) if beta > 0 else target
    if q is not None:
        prob = prob + (2.0 * z_loss) * q * lse
    if grad_lse is not None:
        prob = prob + grad_lse.float()
    smooth = h * (beta / vocab) if beta > 0 else None
    return Coefficients(prob, target, smooth)
