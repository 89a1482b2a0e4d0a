"""``engine="torch"``'s forward: ``forward.lse_forward``'s quantities from one fp32 logit
slice at a time in torch ops, so a CPU runs at its GEMM's speed, not the interpreter's."""

from __future__ import annotations

import torch

from .forward import ForwardResult
from .slices import bytes_per_column, inverse_cap, logit_slice, row_chunks, slice_width


def _target_logits(
    e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor, softcap: float | None
) -> torch.Tensor:
    """fp32 ``z[n, y_n]`` as one gathered dot per row (0 at ignored rows), by row chunks."""
    vocab = c.shape[0]
    valid = (targets >= 0) & (targets < vocab)
    ids = targets.clamp(0, vocab - 1)
    out = torch.empty(e.shape[0], device=e.device, dtype=torch.float32)
    for part in row_chunks(e.shape[0]):
        rows = c.index_select(0, ids[part]).float()
        out[part] = torch.einsum("nd,nd->n", e[part].float(), rows)
    if softcap is not None:
        out = softcap * torch.tanh(out * inverse_cap(softcap))
    return torch.where(valid, out, 0.0)


def torch_forward(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    *,
    smoothing: bool,
    softcap: float | None,
    budget: int | None,
    weight: torch.Tensor | None = None,
) -> ForwardResult:
    """Online (max, sum-exp) and smoothing sums (Σ_v w_v (z − max) with class weights
    ``weight``, fp32 (V,)) over vocab slices of fp32 logits."""
    n_rows, dim = e.shape
    vocab = c.shape[0]
    per = bytes_per_column(n_rows, dim, e.dtype, e.device, "torch", True)
    width = slice_width(vocab, per, budget)
    # No wider than V: the CPU needs no aligned stride, and a contiguous buffer (one slice
    # holding all of V) is what torch.compile accepts as an ``out=``.
    buf = torch.empty((n_rows, min(width, vocab)), device=e.device, dtype=torch.float32)
    spare = torch.empty_like(buf)
    row_max = torch.full((n_rows,), float("-inf"), device=e.device)
    row_sum = torch.zeros(n_rows, device=e.device)
    rel_sum = torch.zeros(n_rows, device=e.device) if smoothing else None
    for v0 in range(0, vocab, width):
        cols = min(width, vocab - v0)
        z = logit_slice(buf[:, :cols], e, c[v0 : v0 + cols])
        if softcap is not None:
            z.mul_(inverse_cap(softcap)).tanh_().mul_(softcap)
        new_max = torch.maximum(row_max, z.amax(1))
        # Σ (z − max) relative to the running max: a common logit offset cancels.
        shifted = torch.sub(z, new_max[:, None], out=spare[:, :cols])
        if rel_sum is not None:
            moved = torch.where(torch.isinf(row_max), 0.0, row_max - new_max)
            if weight is None:
                rel_sum += v0 * moved + shifted.sum(1)
            else:
                seen = weight[:v0].sum()
                rel_sum += seen * moved + shifted @ weight[v0 : v0 + cols]
        row_sum = row_sum * (row_max - new_max).exp() + shifted.exp_().sum(1)
        row_max = new_max
    target_logit = _target_logits(e, c, targets, softcap)
    return ForwardResult(row_max, row_sum.log(), target_logit, rel_sum, None)
