"""The autograd Function of the paths the custom op (op.py) does not take: fused, the tile
backward, and the pieces vocab-parallel shares."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import terms
from .backward import LAST_TILES, lce_backward  # noqa: F401 (read as function.LAST_TILES)
from .cublas_route import cublas_forward
from .forward import ForwardResult, lse_forward
from .native import torch_forward
from .reductions import column_sum
from .slices import slices_backward


@dataclass(frozen=True)
class Params:
    """``api.linear_cross_entropy``'s options, validated and resolved (``engine``:
    triton, cublas or torch; ``budget``: its ``memory_budget``; ``fused``: impl="fused")."""

    beta: float
    softcap: float | None
    ignore_index: int
    reduction: str
    filter_eps: float | None = None
    sort_vocab: bool = False
    accum_fp32: bool = False
    tile_list: bool = True
    # torch.is_grad_enabled() at the call (inside Function.forward it is always False).
    grad_mode: bool = True
    backward: str = "slices"  # or "tiles" (the ablation)
    engine: str = "triton"
    budget: int | None = None
    z_loss: float = 0.0
    return_lse: bool = False
    fused: bool = False


def _forward(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor | None,
    p: Params,
    needs_grad: bool,
) -> tuple[ForwardResult, torch.Tensor | None]:
    """Either engine's forward, and c̄ (the weighted column sum with class weights) when
    the forward or the tile backward uses it."""
    smoothing = p.beta > 0
    if p.engine in ("torch", "cublas"):  # the slice forwards: torch ops, cuBLAS + epilogue
        run = torch_forward if p.engine == "torch" else cublas_forward
        kw = dict(smoothing=smoothing, softcap=p.softcap, budget=p.budget, weight=weight)
        return run(e, c, targets, **kw), None
    # c̄ serves the forward (no softcap) and the tile backward's rank-one part.
    tiles = p.backward == "tiles"
    use_cbar = smoothing and (p.softcap is None or needs_grad and tiles)
    cbar = column_sum(c, weight) if use_cbar else None
    filtering = needs_grad and p.filter_eps is not None
    # The tile list replaces sorting: its bound is per tile in vocab order.
    use_list = filtering and p.tile_list
    out = lse_forward(
        e,
        c,
        targets,
        cbar=cbar,
        smoothing=smoothing,
        softcap=p.softcap,
        logit_avg=filtering and p.sort_vocab and not use_list,
        tile_lse=use_list,
        weight=weight if smoothing else None,  # only the smoothing sum reads it
    )
    return out, cbar


def _grads(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    weight: torch.Tensor | None,
    k: terms.Coefficients,
    s: ForwardResult,
    cbar: torch.Tensor | None,
    p: Params,
) -> tuple[torch.Tensor, torch.Tensor]:
    if p.backward == "slices":
        return slices_backward(e, c, targets, s.row_max, s.log_sum, k, p=p, weight=weight)
    # The tile backward: plain cross-entropy only (api refuses weights and z-loss there).
    return lce_backward(e, c, targets, s, k.prob, cbar=cbar, p=p)


def input_grads(ctx: Any, de: torch.Tensor, dc: torch.Tensor, others: int = 3) -> tuple:
    """(dE, dC) where asked for, then None for the ``others`` inputs."""
    asked = ctx.needs_input_grad
    return (de if asked[0] else None, dc if asked[1] else None, *(None,) * others)


class LinearCrossEntropyFunction(torch.autograd.Function):
    """The forward kernel, then a recomputing backward, or with ``p.fused`` (but for
    ``reduction="none"``) dE/dC computed in the forward call and scaled in backward."""

    @staticmethod
    def forward(
        ctx: Any,
        e: torch.Tensor,
        c: torch.Tensor,
        targets: torch.Tensor,
        weight: torch.Tensor | None,
        p: Params,
    ) -> Any:
        ctx.params = p
        needs_grad = p.grad_mode and any(ctx.needs_input_grad[:2])
        out, cbar = _forward(e, c, targets, weight, p, needs_grad)
        rows = terms.row_weights(targets, weight, p, c.shape[0])
        loss = terms.loss(out, rows, p, c.shape[0])
        ctx.fused = p.fused and needs_grad and p.reduction != "none"
        if ctx.fused:
            k = terms.coefficients(rows, out.lse, p, c.shape[0])
            de, dc = _grads(e, c, targets, weight, k, out, cbar, p)
            ctx.save_for_backward(de, dc)
        else:  # O(N + V + D) beyond the inputs, plus the tile bound
            stats = (out.row_max, out.log_sum, out.target_logit, cbar, out.logit_avg, out.tile_lse)
            ctx.save_for_backward(e, c, targets, weight, *stats)
            ctx.tile_width = out.tile_width
        return (loss, out.lse) if p.return_lse else loss

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor, *grad_lse: torch.Tensor) -> Any:
        if ctx.fused:
            de, dc = ctx.saved_tensors
            # Scale in place (no second N×D / V×D buffer): backward runs once per graph.
            return input_grads(ctx, de.mul_(grad_out), dc.mul_(grad_out))
        e, c, targets, weight, row_max, log_sum, target_logit, cbar, *rest = ctx.saved_tensors
        saved = ForwardResult(row_max, log_sum, target_logit, None, *rest, ctx.tile_width)
        p: Params = ctx.params
        rows = terms.row_weights(targets, weight, p, c.shape[0])
        k = terms.coefficients(rows, saved.lse, p, c.shape[0], grad_out, *grad_lse)
        return input_grads(ctx, *_grads(e, c, targets, weight, k, saved, cbar, p))
