"""Triton helpers shared by the kernel stages: one order of operations per epilogue step
for every route (docs/kernel.md, "Softcap and the shared epilogue code")."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def wide_offsets(index, stride):
    """``index * stride`` in int64: N·V and V·D can exceed 2**31 on real vocabularies."""
    return index.to(tl.int64) * stride


@triton.jit
def tanh(x, k):
    """``tanh(x/s)`` for ``k = −2/s`` (``tanh_scale``) from ``exp(|x|·k)`` only, so the
    interpreter and every arch agree and ``exp`` never overflows; sign restored after."""
    t = tl.exp(tl.abs(x) * k)
    y = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0, -y, y)


@triton.jit
def cast(x, dtype: tl.constexpr, FIX_BF16: tl.constexpr):
    """``x.to(dtype)``, rounding to nearest even also under the interpreter, which
    truncates fp32 -> bf16: with ``FIX_BF16`` a cast to bf16 rounds on the bits first."""
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
    """``*ptrs += values`` under a spin lock, summed in fp32 and rounded once: 16-bit
    buffers on sm_80, which has no fast 16-bit atomics. With ``BACKOFF`` (a GPU) a failed
    acquire sleeps 32 ns, doubling up to 2 µs."""
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
    """``acc + a @ b``; ``UPCAST`` (the interpreter) computes it in fp64, where products are
    exact and the sum rounds to the same fp32 whatever the block shape (the interpreter's
    numpy matmul rounds by shape, so two tilings of one logit would differ)."""
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
def grouped(pid, num_n, num_v, GROUP_N: tl.constexpr):
    """(row block, column block) of the ``pid``-th tile in grouped order: GROUP_N row
    blocks sweep the columns together, so the column operand's tiles are reused in L2."""
    per_group = GROUP_N * num_v
    first_n = (pid // per_group) * GROUP_N
    group_size = tl.minimum(num_n - first_n, GROUP_N)
    return first_n + (pid % per_group) % group_size, (pid % per_group) // group_size


@triton.jit
def store_tile(Out, values, offs_n, offs_j, n_mask, j_mask, stride_on, FIX_BF16: tl.constexpr):
    """``Out[offs_n, offs_j] = values`` in Out's dtype, masked; the pointers are formed
    here, at the store: formed before a GEMM they stayed live through it (spills)."""
    out = Out + wide_offsets(offs_n, stride_on)[:, None] + offs_j[None, :]
    mask = n_mask[:, None] & j_mask[None, :]
    tl.store(out, cast(values, Out.dtype.element_ty, FIX_BF16), mask=mask)


@triton.jit
def tanh_scale(softcap):
    """``k = −2/softcap`` for ``tanh``, once per program, ``1/s`` correctly rounded as
    ``slices.inverse_cap`` gives it: one multiply per element where ``x/s`` compiled to
    range fixups too (docs/kernel.md, "Softcap")."""
    return -2.0 * tl.math.div_rn(1.0, softcap)


@triton.jit
def softcapped(x, softcap, tanh_k, HAS_SOFTCAP: tl.constexpr):
    """``s·tanh(x/s)`` (``tanh_k``: ``tanh_scale``); ``x`` itself without a softcap."""
    if HAS_SOFTCAP:
        x = softcap * tanh(x, tanh_k)
    return x


@triton.jit
def online_softmax(acc, first, limit, row_max, row_sum, smooth, seen, Weight,
                   EVEN: tl.constexpr, SUMS: tl.constexpr, HAS_WEIGHT: tl.constexpr):  # fmt: skip
    """Fold (softcapped) fp32 logits ``acc``, columns ``first + [0, COLS)`` (padding from
    ``limit`` on), into its rows' running max, Σ exp(z − max) and, with ``SUMS``,
    Σ_v w_v (z − max), relative to the running max so a common offset cancels (``seen``:
    Σ w_v folded so far). ``EVEN``: no padding columns. Returns the new state and the
    tile's shift and Σ exp."""
    cols = first + tl.arange(0, acc.shape[1])
    mask = cols < limit
    if EVEN:
        z = acc
    else:
        z = tl.where(mask[None, :], acc, float("-inf"))
    new_max = tl.maximum(row_max, tl.max(z, axis=1))
    # A tile past the end (or rows past N) leaves new_max = -inf: shift by 0.
    shift = tl.where(new_max == float("-inf"), 0.0, new_max)
    tile_sum = tl.sum(tl.exp(z - shift[:, None]), axis=1)
    row_sum = row_sum * tl.exp(row_max - shift) + tile_sum
    if SUMS:
        moved = tl.where(row_max == float("-inf"), 0.0, row_max - shift)
        if HAS_WEIGHT:
            w = tl.load(Weight + cols, mask=mask, other=0.0)
            inside = tl.sum((acc - shift[:, None]) * w[None, :], axis=1)
            seen_here = tl.sum(w, axis=0)
        else:
            if EVEN:
                inside = tl.sum(acc - shift[:, None], axis=1)
            else:
                inside = tl.sum(tl.where(mask[None, :], acc - shift[:, None], 0.0), axis=1)
            seen_here = tl.sum(mask.to(tl.float32), axis=0)
        smooth = smooth + seen * moved + inside
        seen += seen_here
    return new_max, row_sum, smooth, seen, shift, tile_sum


@triton.jit
def row_terms(RowMax, LogSum, S, Targets, a, b, inv, offs_n, n_mask, v0, width,
              HAS_SMOOTHING: tl.constexpr):  # fmt: skip
    """The per-row inputs of ``grad_epilogue``, loaded after the GEMM: row max (+inf past N,
    so exp(z − max) is 0 there), log-sum, the coefficients over σ (``inv`` = 1/σ) and the
    target's int32 column in the slice at ``v0``, -1 outside it."""
    row_max = tl.load(RowMax + offs_n, mask=n_mask, other=float("inf"))
    log_sum = tl.load(LogSum + offs_n, mask=n_mask, other=0.0)
    y = tl.load(Targets + offs_n, mask=n_mask, other=-1) - v0
    y = tl.where((y >= 0) & (y < width), y, -1).to(tl.int32)
    smooth = tl.load(S + offs_n, mask=n_mask, other=0.0) * inv if HAS_SMOOTHING else a
    return row_max, log_sum, a * inv, b * inv, smooth, y


@triton.jit
def grad_epilogue(acc, offs_j, row_max, log_sum, a_inv, b_inv, smooth, y, Weight, v0, width,
                  softcap, tanh_k, HAS_SMOOTHING: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                  HAS_SOFTCAP: tl.constexpr):  # fmt: skip
    """G of one tile from its fp32 logits ``acc`` (columns ``offs_j`` of the slice at
    ``v0``; the rest from ``row_terms``). The target term goes after the softcap factor,
    an order that keeps fewer registers live (docs/kernel.md, "Training options")."""
    if HAS_SOFTCAP:
        t = tanh(acc, tanh_k)
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


@triton.jit
def grad_tile(Out, acc, RowMax, LogSum, S, Targets, Weight, a, b, inv, offs_n, offs_j, n_mask,
              j_mask, v0, width, stride_on, softcap, HAS_SMOOTHING: tl.constexpr,
              HAS_WEIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
              FIX_BF16: tl.constexpr):  # fmt: skip
    """A tile's gradient from its fp32 logits ``acc``, stored (the portable slice kernel's
    and the cuBLAS route's epilogue, which differ only in where ``acc`` comes from)."""
    row_max, log_sum, a_inv, b_inv, smooth, y = row_terms(
        RowMax, LogSum, S, Targets, a, b, inv, offs_n, n_mask, v0, width, HAS_SMOOTHING
    )
    tanh_k = tanh_scale(softcap) if HAS_SOFTCAP else softcap
    grad = grad_epilogue(
        acc, offs_j, row_max, log_sum, a_inv, b_inv, smooth, y, Weight, v0, width,
        softcap, tanh_k, HAS_SMOOTHING, HAS_WEIGHT, HAS_SOFTCAP,
    )  # fmt: skip
    store_tile(Out, grad, offs_n, offs_j, n_mask, j_mask, stride_on, FIX_BF16)
