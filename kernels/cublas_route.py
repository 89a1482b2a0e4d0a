"""The cuBLAS route: every GEMM in cuBLAS, the softmax in one Triton epilogue per slice.

``engine="cublas"``. Per vocab slice ``s`` of ``width`` columns, in a fixed order:

- forward: ``Z = E·C_sᵀ`` in fp32 through ``torch.mm(..., out_dtype=torch.float32)``
  (cuBLAS; on a CPU ``slices.logit_slice`` upcasts), then ``_lse_epilogue_kernel`` folds
  the slice into the running per-row state (row max, Σ exp(z − max), Σ_v w_v (z − max))
  in place: one program per row block walks the slice's columns in order, so the merge
  is exact, has no atomics and is bit-identical run to run;
- backward: the same fp32 slice, then ``_grad_epilogue_kernel`` writes the gradient slice
  ``G = (A·p − S·w_v − B·[v = y])·(1 − t²)/σ`` in the inputs' dtype (the math of
  ``slices._grad_slice_kernel``'s epilogue and of ``slices._torch_grad_slice``), then
  ``dE += G·C_s`` and ``dC_s = Gᵀ·E`` as in ``slices.slices_backward``.

It trades the Triton route's fused GEMMs for cuBLAS's (~710–800 against ~405–465
TFLOP/s on an H200: reports/nvidia-h200/raw/README.md) at the price of writing and
reading the fp32 slice once more. Which route runs by default is ``routes.route_for``'s.
No host sync: slice bounds are Python ints, the per-slice class-weight totals and σ are
device tensors read by the kernels. Workspace per column: the fp32 slice (N·4) and G in
the dtype (backward).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import (
    grad_tile,
    online_softmax,
    softcapped,
    store_tile,
    tanh_scale,
    wide_offsets,
)
from .configs import fit, interpreting
from .forward import ForwardResult, chunk_sums
from .slices import bytes_per_column, logit_slice, slice_width
from .targets import target_logits

# Epilogue tiles: memory-bound passes over an fp32 slice. The LSE pass keeps one program
# per row block for the whole slice (the merge's fixed order), so its row blocks are
# small: 1,024 programs at Gemma2-2B's 8,192 rows; the gradient pass has no reduction and
# tiles both ways. Built for sm_90a here without a GPU (Triton 3.7.1, `ptxas -v`, softcap,
# smoothing and class weights on): 8×256 with 4 warps takes 80 registers (LSE) and 86
# (gradient), no spills; 32×256 took 255 and spilled 96 B (gradient), 16×256 with 4 warps
# 232 (LSE). Not yet timed on a GPU: issue 44.
LSE_BLOCK = (8, 256)
GRAD_BLOCK = (8, 256)
NUM_WARPS = 4
# The interpreter's blocks: few, large programs (each costs Python time).
INTERPRETER_BLOCK = (64, 512)


def _blocks(tiles: tuple[int, int], n_rows: int, width: int) -> tuple[int, int]:
    """(BLOCK_N, BLOCK_V) for a launch, shrunk to the problem (at least 8 and 16)."""
    block_n, block_v = INTERPRETER_BLOCK if interpreting() else tiles
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
    """Fold columns [v0, v0 + width) of fp32 logits ``Z`` (N, ≥ width) into the state.

    The state is the online (max, Σ exp(z − max)) and, with smoothing, Σ_v w_v (z − max),
    relative to the running max so a common logit offset cancels (as forward.py and
    native.py keep it). ``seen`` is Σ w over the columns already folded: v0 without class
    weights, else ``Seen[0]`` (a device scalar: no host sync) plus this slice's tiles.
    """
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
    """The front of ``buf`` as a (rows, cols) matrix whose row stride is ``cols`` rounded up
    to 16 bytes: the last, narrower slice keeps tight rows that stay aligned (cuBLAS's
    fastest kernels and TMA want 16-byte strides; an odd width such as GPT-2's last 2,641
    columns would not be)."""
    step = 16 // buf.element_size()
    stride = triton.cdiv(cols, step) * step
    return buf.view(-1)[: buf.shape[0] * stride].view(buf.shape[0], stride)[:, :cols]


def _seen_before(weight: torch.Tensor, vocab: int, width: int) -> torch.Tensor:
    """Σ w over the columns before each slice, fp32 on the device (no host sync)."""
    totals = chunk_sums(weight, width, triton.cdiv(vocab, width))
    return torch.cat([totals.new_zeros(1), totals[:-1]]).cumsum(0)


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
    seen = _seen_before(w, vocab, width) if w is not None else None
    block_n, block_v = _blocks(LSE_BLOCK, n_rows, width)
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
    out: torch.Tensor, logits: torch.Tensor, e, c, targets, row_max, log_sum, k, weight,
    inv_scale, v0: int, *, p,
) -> None:  # fmt: skip
    """``slices._triton_grad_slice`` on this route: the fp32 slice from cuBLAS into the
    front of ``logits`` (N, the slice width), then the gradient epilogue into ``out``."""
    n_rows, cols = out.shape
    z = logit_slice(slab(logits, cols), e, c[v0 : v0 + cols])
    block_n, block_v = _blocks(GRAD_BLOCK, n_rows, logits.shape[1])
    grid = (triton.cdiv(n_rows, block_n), triton.cdiv(cols, block_v))
    w = weight if k.smooth is not None else None  # only the smoothing term reads it
    _grad_epilogue_kernel[grid](
        z, out, row_max, log_sum, k.prob, k.target, k.smooth, w, targets.contiguous(),
        inv_scale, p.softcap, n_rows, v0, cols, z.stride(0), out.stride(0),
        BLOCK_N=block_n, BLOCK_V=block_v, num_warps=NUM_WARPS,
    )  # fmt: skip
