"""Small Triton helpers shared by the kernel stages.

Kept free of launch logic so every stage file reads as: jit kernels, launcher.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def wide_offsets(index, stride):
    """``index * stride`` in int64: N·V and V·D can exceed 2**31 on real vocabularies."""
    return index.to(tl.int64) * stride


@triton.jit
def tanh(x):
    """tanh from ``exp`` only (no libdevice), so the interpreter and every arch agree.

    Written on ``-2|x|`` so ``exp`` never overflows; the sign is restored afterwards.
    """
    t = tl.exp(-2.0 * tl.abs(x))
    y = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0, -y, y)


@triton.jit
def cast(x, dtype: tl.constexpr, FIX_BF16: tl.constexpr):
    """``x.to(dtype)``, rounding to nearest even also under the interpreter.

    The CPU interpreter truncates fp32 -> bf16 (GPUs round to nearest even); with
    ``FIX_BF16`` (the interpreter) a cast to bf16 rounds on the bits first.
    """
    if FIX_BF16 and dtype == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def _nanosleep(ns):
    """PTX ``nanosleep`` (sm_70+): a waiting CTA leaves the issue slots and the lock's
    L2 line to the holder instead of hammering it with compare-and-swaps."""
    return tl.inline_asm_elementwise(
        "nanosleep.u32 $1;\n\tmov.u32 $0, 0;", "=r,r", [ns], dtype=tl.int32, is_pure=False, pack=1
    )


@triton.jit
def locked_add(ptrs, values, mask, lock, FIX_BF16: tl.constexpr, BACKOFF: tl.constexpr):
    """Read-modify-write ``*ptrs += values`` under a spin lock (for bf16/fp16 buffers).

    Triton has no portable 16-bit float atomics on sm_80, so low-precision gradient
    buffers are updated tile-wise under one lock per (tile, D-chunk). The sum is
    formed in fp32 and rounded once per update. With ``BACKOFF`` (a GPU; the
    interpreter has no inline PTX) a failed acquire sleeps 32 ns, doubling up to 2 µs.
    """
    delay = 32
    while tl.atomic_cas(lock, 0, 1) == 1:
        if BACKOFF:
            _nanosleep(delay)
            delay = tl.minimum(delay * 2, 2048)
    current = tl.load(ptrs, mask=mask, other=0.0, cache_modifier=".cg")
    total = current.to(tl.float32) + values
    tl.store(ptrs, cast(total, current.dtype, FIX_BF16), mask=mask)
    tl.atomic_xchg(lock, 0)


@triton.jit
def dot(a, b, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """``acc + a @ b``; ``UPCAST`` (the interpreter, every dtype) computes it in fp64.

    triton's CPU interpreter stores bf16 as uint16 and multiplies the raw bits, and
    its numpy matmul rounds differently for different block shapes, so two kernels
    tiling the same logits differently would disagree in the last bit (at a logit of
    8192 that is 1e-3 of probability). In fp64 the products are exact and the sum
    rounds to the same fp32 whatever the shape, as a GPU's fixed k-order does. Always
    False on a GPU.
    """
    if UPCAST:
        part = tl.dot(a.to(tl.float64), b.to(tl.float64), input_precision="ieee")
        return part.to(tl.float32) if acc is None else acc + part.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def logit_tile(
    E,
    C,
    e_rows,
    c_rows,
    stride_ed,
    stride_cd,
    D,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    EVEN_D: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """fp32 ``E[rows] @ C[cols].T`` for one (BLOCK_N, BLOCK_V) tile, over D in BLOCK_D steps.

    ``e_rows``/``c_rows`` are element offsets of the rows (``wide_offsets``)."""
    offs_d = tl.arange(0, BLOCK_D)
    e_ptrs = E + e_rows[:, None] + offs_d[None, :] * stride_ed
    c_ptrs = C + c_rows[None, :] + offs_d[:, None] * stride_cd
    acc = tl.zeros((BLOCK_N, BLOCK_V), dtype=tl.float32)
    for d in range(0, tl.cdiv(D, BLOCK_D)):
        if EVEN_D:
            e = tl.load(e_ptrs)
            c = tl.load(c_ptrs)
        else:
            e = tl.load(e_ptrs, mask=offs_d[None, :] < D - d * BLOCK_D, other=0.0)
            c = tl.load(c_ptrs, mask=offs_d[:, None] < D - d * BLOCK_D, other=0.0)
        acc = dot(e, c, acc, PRECISION, UPCAST)
        e_ptrs += BLOCK_D * stride_ed
        c_ptrs += BLOCK_D * stride_cd
    return acc


@triton.jit
def grad_epilogue(acc, offs_j, row_max, log_sum, a_inv, b_inv, smooth, y, Weight, v0, width,
                  softcap, HAS_SMOOTHING: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                  HAS_SOFTCAP: tl.constexpr):  # fmt: skip
    """G of one tile from its fp32 logits ``acc`` (columns ``offs_j`` of the slice at
    ``v0``): every route's gradient epilogue, one order of operations, so the routes
    agree to the bit. ``a_inv``, ``b_inv``, ``smooth``: the row coefficients over the
    scale; ``y``: the target's slice column, -1 outside. The target term goes after the
    softcap factor, (1 − t²) taken at its column: the same sum in an order that keeps
    fewer registers live (the portable slice kernel, sm_90a bf16 at Gemma2-2B: 207 → 186;
    with class weights 255 and an 84 B spill → 217)."""
    if HAS_SOFTCAP:
        t = tanh(acc / softcap)
        acc = softcap * t
    # (z − max) − log-sum: a common logit offset cancels exactly.
    grad = tl.exp((acc - row_max[:, None]) - log_sum[:, None]) * a_inv[:, None]
    if HAS_SMOOTHING:
        if HAS_WEIGHT:
            w = tl.load(Weight + v0 + offs_j, mask=offs_j < width, other=0.0)
            grad -= smooth[:, None] * w[None, :]
        else:
            grad -= smooth[:, None]
    hit = offs_j[None, :] == y[:, None]
    if HAS_SOFTCAP:
        slope = 1.0 - t * t
        grad = grad * slope - tl.where(hit, slope * b_inv[:, None], 0.0)
    else:
        grad -= tl.where(hit, b_inv[:, None], 0.0)
    return grad
