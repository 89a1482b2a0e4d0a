"""The target logit per row, ``z[n, y_n] = softcap(E_n · C_{y_n})``, as a gathered dot
(fp32; 0 at ids outside [0, V)): outside the forward's vocab loop, where picking it out
of every tile kept registers live next to the accumulator."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import tanh, tanh_scale, wide_offsets
from .configs import interpreting

BLOCK_N = 32
BLOCK_D = 128


@triton.heuristics({"HAS_SOFTCAP": lambda a: a["softcap"] is not None})
@triton.jit
def _target_logit_kernel(
    E,
    C,
    Targets,
    Out,
    softcap,
    N,
    V,
    D,
    stride_en,
    stride_ed,
    stride_cv,
    stride_cd,
    stride_t,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    y = tl.load(Targets + wide_offsets(offs_n, stride_t), mask=n_mask, other=-1)
    valid = n_mask & (y >= 0) & (y < V)
    e_rows = wide_offsets(offs_n, stride_en)
    c_rows = wide_offsets(tl.where(valid, y, 0), stride_cv)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        offs_d = d0 + tl.arange(0, BLOCK_D)
        mask = valid[:, None] & (offs_d < D)[None, :]
        e = tl.load(E + e_rows[:, None] + offs_d[None, :] * stride_ed, mask=mask, other=0.0)
        c = tl.load(C + c_rows[:, None] + offs_d[None, :] * stride_cd, mask=mask, other=0.0)
        acc += tl.sum(e.to(tl.float32) * c.to(tl.float32), axis=1)
    if HAS_SOFTCAP:
        acc = softcap * tanh(acc, tanh_scale(softcap))
    tl.store(Out + offs_n, tl.where(valid, acc, 0.0), mask=n_mask)


def target_logits(
    e: torch.Tensor, c: torch.Tensor, targets: torch.Tensor, softcap: float | None
) -> torch.Tensor:
    """fp32 (N,) target logits of 2-D ``e`` (N, D), ``c`` (V, D), ``targets`` (N,)."""
    n_rows, dim = e.shape
    out = torch.empty(n_rows, device=e.device, dtype=torch.float32)
    if n_rows == 0:
        return out
    block_n = 256 if interpreting() else BLOCK_N
    _target_logit_kernel[(triton.cdiv(n_rows, block_n),)](
        e,
        c,
        targets,
        out,
        softcap,
        n_rows,
        c.shape[0],
        dim,
        *e.stride(),
        *c.stride(),
        targets.stride(0),
        BLOCK_N=block_n,
        BLOCK_D=BLOCK_D,
        num_warps=4,
    )
    return out
