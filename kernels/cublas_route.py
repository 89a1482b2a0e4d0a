"""The cuBLAS route (``engine="cublas"``): per vocab slice, fp32 logits from cuBLAS, then
one Triton epilogue that folds the slice into the per-row LSE state in column order or
writes the gradient slice (``common.grad_tile``): cuBLAS's GEMMs for one more fp32 slice
round trip (docs/kernel.md, "Routes").
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import grad_tile, online_softmax, softcapped, store_tile, tanh_scale, wide_offsets
from .configs import fit, interpreting
from .forward import ForwardResult, chunk_sums
from .slices import bytes_per_column, logit_slice, slice_width
from .targets import target_logits

# Epilogue tiles of these memory-bound passes: the LSE pass keeps one program per row
# block for the whole slice (the merge's fixed order), so its row blocks are small. 8×256
# with 4 warps: 80 and 86 registers on sm_90a, no spill (32×256 spilled); not yet timed.
BLOCK = (8, 256)
NUM_WARPS = 4
# The interpreter's blocks: few, large programs (each costs Python time).
INTERPRETER_BLOCK = (64, 512)


def _blocks(n_rows: int, width: int) -> tuple[int, int]:
    """(BLOCK_N, BLOCK_V) for a launch, shrunk to the problem (at least 8 and 16)."""
    block_n, block_v = INTERPRETER_BLOCK if interpreting() else BLOCK
    return fit(block_n, n_rows, 8), fit(block_v, width)


@triton.heuristics(
    {
        "HAS_SOFTCAP": lambda a: a["softcap"] is not None,
        "HAS_SMOOTHING": lambda a: a["RelSum"] is not None,
        "HAS_WEIGHT": lambda a: a["Weight"] is not None,
    }
)
@triton.jit
def _lse_epilogue_kernel(
    Z,
    RowMax,
    RowSum,
    RelSum,
    Weight,
    Seen,
    softcap,
    N,
    v0,
    width,
    stride_zn,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
):
    """Fold columns [v0, v0 + width) of fp32 logits ``Z`` (N, ≥ width) into the online
    state (``common.online_softmax``); ``seen``, Σ w over the columns already folded, is
    v0 without class weights, else ``Seen[0]`` (a device scalar: no host sync)."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    row_max = tl.load(RowMax + offs_n, mask=n_mask, other=0.0)
    row_sum = tl.load(RowSum + offs_n, mask=n_mask, other=0.0)
    smooth = row_sum  # unused without smoothing
    seen = tl.zeros((), dtype=tl.float32) + v0
    if HAS_SMOOTHING:
        smooth = tl.load(RelSum + offs_n, mask=n_mask, other=0.0)
        if HAS_WEIGHT:
            seen = tl.load(Seen)
    z_rows = wide_offsets(offs_n, stride_zn)
    tanh_k = tanh_scale(softcap) if HAS_SOFTCAP else softcap
    if HAS_WEIGHT:
        Weight += v0  # indexed by the slice's columns below
    for j0 in range(0, width, BLOCK_V):
        offs_j = j0 + tl.arange(0, BLOCK_V)
        mask = n_mask[:, None] & (offs_j < width)[None, :]
        acc = tl.load(Z + z_rows[:, None] + offs_j[None, :], mask=mask, other=0.0)
        row_max, row_sum, smooth, seen, _, _ = online_softmax(
            softcapped(acc, softcap, tanh_k, HAS_SOFTCAP), j0, width, row_max, row_sum,
            smooth, seen, Weight, False, HAS_SMOOTHING, HAS_WEIGHT,
        )  # fmt: skip
    tl.store(RowMax + offs_n, row_max, mask=n_mask)
    tl.store(RowSum + offs_n, row_sum, mask=n_mask)
    if HAS_SMOOTHING:
        tl.store(RelSum + offs_n, smooth, mask=n_mask)


@triton.heuristics(
    {
        "HAS_SOFTCAP": lambda a: a["softcap"] is not None,
        "HAS_SMOOTHING": lambda a: a["S"] is not None,
        "HAS_WEIGHT": lambda a: a["Weight"] is not None,
        "INTERPRETING": lambda a: interpreting(),
    }
)
@triton.jit
def _grad_epilogue_kernel(
    Z,
    Out,
    RowMax,
    LogSum,
    A,
    B,
    S,
    Weight,
    Targets,
    InvScale,
    softcap,
    N,
    v0,
    width,
    stride_zn,
    stride_on,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    INTERPRETING: tl.constexpr,
):
    """One (row block, column block) of G from fp32 logits ``Z``: ``common.grad_epilogue``,
    the Triton route's epilogue."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_j = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    n_mask = offs_n < N
    j_mask = offs_j < width
    a = tl.load(A + offs_n, mask=n_mask, other=0.0)
    b = tl.load(B + offs_n, mask=n_mask, other=0.0)
    # Pointers and masks are formed where they are used: a 64-bit pointer per element
    # live across the epilogue spilled (sm_90a, 32×256 tiles).
    if tl.max(tl.abs(a) + tl.abs(b), axis=0) > 0:
        z_ptrs = Z + wide_offsets(offs_n, stride_zn)[:, None] + offs_j[None, :]
        acc = tl.load(z_ptrs, mask=n_mask[:, None] & j_mask[None, :], other=0.0)
        grad_tile(
            Out, acc, RowMax, LogSum, S, Targets, Weight, a, b, tl.load(InvScale), offs_n,
            offs_j, n_mask, j_mask, v0, width, stride_on, softcap, HAS_SMOOTHING, HAS_WEIGHT,
            HAS_SOFTCAP, INTERPRETING,
        )  # fmt: skip
    else:
        zeros = tl.zeros((BLOCK_N, BLOCK_V), dtype=tl.float32)
        store_tile(Out, zeros, offs_n, offs_j, n_mask, j_mask, stride_on, INTERPRETING)


def slab(buf: torch.Tensor, cols: int) -> torch.Tensor:
    """The front of ``buf`` as a (rows, cols) matrix with ``cols`` rounded up to 16 bytes as
    its row stride: a narrower last slice (GPT-2's 2,641 columns) keeps aligned rows."""
    step = 16 // buf.element_size()
    stride = triton.cdiv(cols, step) * step
    return buf.view(-1)[: buf.shape[0] * stride].view(buf.shape[0], stride)[:, :cols]


def cublas_forward(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    *,
    smoothing: bool,
    softcap: float | None,
    budget: int | None,
    weight: torch.Tensor | None = None,
) -> ForwardResult:
    """forward.lse_forward's outputs from cuBLAS fp32 logit slices and the LSE epilogue."""
    n_rows = e.shape[0]
    vocab = c.shape[0]
    per = bytes_per_column(n_rows, e.shape[1], e.dtype, e.device, "cublas", False)
    width = slice_width(vocab, per, budget)
    buf = torch.empty((n_rows, width), device=e.device, dtype=torch.float32)
    row_max = torch.full((n_rows,), float("-inf"), device=e.device)
    row_sum = torch.zeros(n_rows, device=e.device)
    rel_sum = torch.zeros(n_rows, device=e.device) if smoothing else None
    w = weight if smoothing else None  # only the smoothing sum reads it
    seen = None
    if w is not None:  # Σ w over the columns before each slice, on the device (no host sync)
        totals = chunk_sums(w, width, triton.cdiv(vocab, width))
        seen = torch.cat([totals.new_zeros(1), totals[:-1]]).cumsum(0)
    block_n, block_v = _blocks(n_rows, width)
    grid = (triton.cdiv(n_rows, block_n),)
    for s, v0 in enumerate(range(0, vocab, width)):
        cols = min(width, vocab - v0)
        z = logit_slice(slab(buf, cols), e, c[v0 : v0 + cols])
        _lse_epilogue_kernel[grid](
            z, row_max, row_sum, rel_sum, w, None if seen is None else seen[s:],
            softcap, n_rows, v0, cols, z.stride(0),
            BLOCK_N=block_n, BLOCK_V=block_v, num_warps=NUM_WARPS,
        )  # fmt: skip
    target_logit = target_logits(e, c, targets, softcap)
    return ForwardResult(row_max, row_sum.log(), target_logit, rel_sum, None)


def grad_slice(
    out: torch.Tensor, logits, e, c, targets, row_max, log_sum, k, weight, inv, v0: int, *, p
) -> None:
    """``slices._triton_grad_slice`` on this route: the fp32 slice from cuBLAS into the
    front of ``logits`` (N, the slice width), then the gradient epilogue into ``out``."""
    n_rows, cols = out.shape
    z = logit_slice(slab(logits, cols), e, c[v0 : v0 + cols])
    block_n, block_v = _blocks(n_rows, logits.shape[1])
    grid = (triton.cdiv(n_rows, block_n), triton.cdiv(cols, block_v))
    _grad_epilogue_kernel[grid](
        z, out, row_max, log_sum, k.prob, k.target, k.smooth, weight, targets.contiguous(),
        inv, p.softcap, n_rows, v0, cols, z.stride(0), out.stride(0),
        BLOCK_N=block_n, BLOCK_V=block_v, num_warps=NUM_WARPS,
    )  # fmt: skip
