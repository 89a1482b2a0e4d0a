"""Column sums in fp32, ``c̄ = Σ_v C_v`` and the weighted ``Σ_n g_n E_n``: the rank-one
pieces of label smoothing (math.md), with no fp32 copy of the input."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import wide_offsets
from .configs import interpreting

BLOCK_R = 64
BLOCK_D = 128
NUM_WARPS = 4


@triton.heuristics({"HAS_WEIGHTS": lambda args: args["W"] is not None})
@triton.jit
def _column_sum_kernel(
    X,
    W,
    Out,
    R,
    D,
    rows_per_split,
    stride_xr,
    stride_xd,
    BLOCK_R: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_WEIGHTS: tl.constexpr,
):
    """``Out[d] += Σ_r W[r]·X[r, d]`` over this program's row range (fp32 atomics)."""
    pid_d = tl.program_id(0)
    pid_s = tl.program_id(1)
    offs_d = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    row0 = pid_s * rows_per_split
    for r in range(0, rows_per_split, BLOCK_R):
        offs_r = row0 + r + tl.arange(0, BLOCK_R)
        r_mask = (offs_r < R) & (r + tl.arange(0, BLOCK_R) < rows_per_split)
        ptrs = X + wide_offsets(offs_r, stride_xr)[:, None] + offs_d[None, :] * stride_xd
        x = tl.load(ptrs, mask=r_mask[:, None] & d_mask[None, :], other=0.0).to(tl.float32)
        if HAS_WEIGHTS:
            w = tl.load(W + offs_r, mask=r_mask, other=0.0)
            x = x * w[:, None]
        acc += tl.sum(x, axis=0)
    tl.atomic_add(Out + offs_d, acc, mask=d_mask)


def column_sum(x: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 ``Σ_r weights[r]·x[r, :]`` (``weights`` fp32 of length R, or all ones)."""
    rows, dim = x.shape
    out = torch.zeros(dim, device=x.device, dtype=torch.float32)
    if rows == 0:
        return out
    block_r, block_d = (1024, 256) if interpreting() else (BLOCK_R, BLOCK_D)
    d_blocks = triton.cdiv(dim, block_d)
    target = 1  # programs: four per SM on a GPU
    if x.device.type == "cuda" and not interpreting():
        target = 4 * torch.cuda.get_device_properties(x.device).multi_processor_count
    splits = max(1, min(triton.cdiv(rows, block_r), triton.cdiv(target, d_blocks)))
    rows_per_split = triton.cdiv(triton.cdiv(rows, splits), block_r) * block_r
    splits = triton.cdiv(rows, rows_per_split)
    _column_sum_kernel[(d_blocks, splits)](
        x,
        weights,
        out,
        rows,
        dim,
        rows_per_split,
        *x.stride(),
        BLOCK_R=block_r,
        BLOCK_D=block_d,
        num_warps=NUM_WARPS,
    )
    return out
