"""Hopper/Blackwell fast path of the forward LSE and the gradient slice: the portable
kernels' math in the same order per element, on a persistent grid with TMA descriptors that
zero-fill past the edges (docs/kernel.md, "The Hopper fast path"). ``PERFSUITE_TMA=0``
turns it off; the interpreter runs it too (host-side descriptors, fp64 dots).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from .common import (
    cast,
    dot,
    grad_epilogue,
    grouped,
    online_softmax,
    row_terms,
    tanh,
    tanh_scale,
    wide_offsets,
)
from .configs import GROUP_N, KernelConfig, autotune_enabled, interpreting, pinned_config

# Programs of the persistent grid under the interpreter: more than one, so the tests
# walk the strided work loop.
INTERPRETER_PROGRAMS = 3
# Epilogue subtiles per forward tile: at halves the β > 0 softcapped build spilled 20 B
# (three fused stages, Triton 3.6, sm_90a).
FORWARD_SUBTILES = 4

_HEURISTICS = {
    "HAS_SOFTCAP": lambda a: a["softcap"] is not None,
    "HAS_WEIGHT": lambda a: a["Weight"] is not None,
    "DOT_PRECISION": lambda a: "tf32",  # 16-bit inputs only: exact products either way
    "UPCAST_DOT": lambda a: interpreting(),
}
_FWD_HEURISTICS = {
    **_HEURISTICS,
    # Unmasked tiles only when the splits' whole tiles cover V exactly.
    "EVEN_V": lambda a: (
        a["split_size"] % a["BLOCK_V"] == 0 and a["split_size"] * a["num_splits"] == a["V"]
    ),
    "HAS_SMOOTHING": lambda a: a["SmoothPart"] is not None,
    "SUBTILES": lambda a: FORWARD_SUBTILES,
}
_SLICE_HEURISTICS = {
    **_HEURISTICS,
    "HAS_SMOOTHING": lambda a: a["S"] is not None,
    "GROUP_N": lambda a: GROUP_N,
    "SUBTILES": lambda a: slice_subtiles(a["Weight"] is not None),
}


def slice_subtiles(weighted: bool) -> int:
    """Epilogue subtiles per slice tile (the output descriptor's block: BLOCK_V / this):
    quarters with class weights (halves spilled: Triton 3.7.1, sm_90a), else halves."""
    return 4 if weighted else 2


@triton.jit
def _logits(
    e_desc, c_desc, off_n, off_v, D, BLOCK_N: tl.constexpr, BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
):  # fmt: skip
    """fp32 ``E[off_n:+BLOCK_N] @ C[off_v:+BLOCK_V].T`` through TMA (zero-filled past the
    ends, so rows past N and columns past V come back as 0)."""
    acc = tl.zeros((BLOCK_N, BLOCK_V), dtype=tl.float32)
    for k in range(0, tl.cdiv(D, BLOCK_D)):
        e = e_desc.load([off_n, k * BLOCK_D])
        c = c_desc.load([off_v, k * BLOCK_D])
        acc = dot(e, c.T, acc, DOT_PRECISION, UPCAST_DOT)
    return acc


@triton.jit
def _halves(x, ROWS: tl.constexpr, COLS: tl.constexpr):
    """The left and right column halves of ``x`` (free in the wgmma layout: registers)."""
    return x.reshape(ROWS, 2, COLS // 2).permute(0, 2, 1).split()


@triton.jit
def _capped(x, softcap, HAS_SOFTCAP: tl.constexpr):
    """``s·tanh(x/s)`` with ``x/s`` per element: at 255 registers this forward spilled with
    ``tanh_scale``'s product form (docs/kernel.md, "Softcap"); its bits stay within the
    portable forward's fp32 rounding."""
    if HAS_SOFTCAP:
        x = softcap * tanh(x / softcap, -2.0)
    return x


@triton.jit
def _softmax_sub(acc, off_v, V, row_max, row_sum, smooth, seen, Weight, softcap,
                 ROWS: tl.constexpr, COLS: tl.constexpr, PARTS: tl.constexpr,
                 EVEN_V: tl.constexpr, HAS_SMOOTHING: tl.constexpr,
                 HAS_SOFTCAP: tl.constexpr, HAS_WEIGHT: tl.constexpr):  # fmt: skip
    """``acc`` (columns from ``off_v``) into the online statistics as ``PARTS`` (1 or 2)
    column blocks in turn (``common.online_softmax``, the portable forward's loop body):
    the fewer columns at a time, the fewer temporaries live."""
    SUMS: tl.constexpr = HAS_SMOOTHING and HAS_SOFTCAP
    if PARTS == 1:
        row_max, row_sum, smooth, seen, _, _ = online_softmax(
            _capped(acc, softcap, HAS_SOFTCAP), off_v, V, row_max, row_sum,
            smooth, seen, Weight, EVEN_V, SUMS, HAS_WEIGHT,
        )  # fmt: skip
    else:
        left, right = _halves(acc, ROWS, COLS)
        row_max, row_sum, smooth, seen, _, _ = online_softmax(
            _capped(left, softcap, HAS_SOFTCAP), off_v, V, row_max, row_sum,
            smooth, seen, Weight, EVEN_V, SUMS, HAS_WEIGHT,
        )  # fmt: skip
        row_max, row_sum, smooth, seen, _, _ = online_softmax(
            _capped(right, softcap, HAS_SOFTCAP), off_v + COLS // 2, V, row_max,
            row_sum, smooth, seen, Weight, EVEN_V, SUMS, HAS_WEIGHT,
        )  # fmt: skip
    return row_max, row_sum, smooth, seen


@triton.jit
def _tma_forward_kernel(
    e_desc,
    c_desc,
    CBar,
    MaxPart,
    SumPart,
    SmoothPart,
    Weight,
    softcap,
    N,
    V,
    D,
    split_size,
    num_splits,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    FLATTEN: tl.constexpr,
    SUBTILES: tl.constexpr,
    EVEN_V: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """Per (row block, vocab split) item, strided over a persistent grid: the split's row
    max, sum-exp and smoothing sum, as ``forward._forward_kernel`` writes them. One loop
    over the program's (item, vocab tile) pairs, which ``FLATTEN`` fuses with the D loop;
    items run split-major, so the programs in flight share a split's C tiles in L2."""
    HALF: tl.constexpr = BLOCK_V // 2
    num_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(D, BLOCK_D)
    per_item = tl.cdiv(split_size, BLOCK_V)
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    mine = tl.cdiv(num_n * num_splits - pid, programs)
    row_max = tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
    smooth = tl.zeros((BLOCK_N,), dtype=tl.float32)
    seen = tl.zeros((), dtype=tl.float32)
    for j in tl.range(0, mine * per_item, flatten=FLATTEN):
        item = pid + (j // per_item) * programs
        t = j % per_item
        pid_s = item // num_n
        off_n = (item % num_n) * BLOCK_N
        off_v = pid_s * split_size + t * BLOCK_V
        fresh = t == 0
        row_max = tl.where(fresh, float("-inf"), row_max)
        row_sum = tl.where(fresh, 0.0, row_sum)
        smooth = tl.where(fresh, 0.0, smooth)
        seen = tl.where(fresh, 0.0, seen)
        acc = _logits(e_desc, c_desc, off_n, off_v, D, BLOCK_N, BLOCK_V, BLOCK_D,
                      DOT_PRECISION, UPCAST_DOT)  # fmt: skip
        # The tile's columns in SUBTILES blocks, left to right (each block's temporaries
        # live alone: the accumulator already takes half of a thread's registers).
        lo, hi = _halves(acc, BLOCK_N, BLOCK_V)
        row_max, row_sum, smooth, seen = _softmax_sub(
            lo, off_v, V, row_max, row_sum, smooth, seen, Weight, softcap, BLOCK_N, HALF,
            SUBTILES // 2, EVEN_V, HAS_SMOOTHING, HAS_SOFTCAP, HAS_WEIGHT,
        )  # fmt: skip
        row_max, row_sum, smooth, seen = _softmax_sub(
            hi, off_v + HALF, V, row_max, row_sum, smooth, seen, Weight, softcap, BLOCK_N,
            HALF, SUBTILES // 2, EVEN_V, HAS_SMOOTHING, HAS_SOFTCAP, HAS_WEIGHT,
        )  # fmt: skip
        last = t == per_item - 1
        if HAS_SMOOTHING and not HAS_SOFTCAP:
            # Σ_v z[n, v] = E_n · c̄ (math.md), once per row: split 0 does it.
            if last and pid_s == 0:
                offs_d = tl.arange(0, BLOCK_D)
                for d in range(0, k_tiles):
                    e = e_desc.load([off_n, d * BLOCK_D]).to(tl.float32)
                    d_mask = offs_d < D - d * BLOCK_D
                    cb = tl.load(CBar + d * BLOCK_D + offs_d, mask=d_mask, other=0.0)
                    smooth += tl.sum(e * cb[None, :], axis=1)
        # Predicated stores, no branch: Triton 3.6's loop fusion rejects the branch.
        offs_n = off_n + tl.arange(0, BLOCK_N)
        n_mask = (offs_n < N) & last
        out = wide_offsets(pid_s, N) + offs_n
        tl.store(MaxPart + out, row_max, mask=n_mask)
        tl.store(SumPart + out, row_sum, mask=n_mask)
        if HAS_SMOOTHING:
            tl.store(SmoothPart + out, smooth, mask=n_mask)


@triton.jit
def _grad_store(acc, out_desc, off_n, off_j, row_max, log_sum, a_inv, b_inv, smooth, y,
                Weight, v0, width, softcap, tanh_k, ROWS: tl.constexpr, COLS: tl.constexpr,
                SPLIT: tl.constexpr, HAS_SMOOTHING: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                HAS_SOFTCAP: tl.constexpr, UPCAST_DOT: tl.constexpr):  # fmt: skip
    """The gradient of a half tile (slice columns from ``off_j``) stored through TMA:
    whole, or (``SPLIT``) as two quarters in turn, which keeps half as many class
    weights and temporaries live."""
    if SPLIT:
        q0, q1 = _halves(acc, ROWS, COLS)
        offs_j = off_j + tl.arange(0, COLS // 2)
        grad = grad_epilogue(
            q0, offs_j, row_max, log_sum, a_inv, b_inv, smooth, y, Weight, v0, width,
            softcap, tanh_k, HAS_SMOOTHING, HAS_WEIGHT, HAS_SOFTCAP,
        )  # fmt: skip
        out_desc.store([off_n, off_j], cast(grad, out_desc.dtype, UPCAST_DOT))
        grad = grad_epilogue(
            q1, offs_j + COLS // 2, row_max, log_sum, a_inv, b_inv, smooth, y, Weight, v0,
            width, softcap, tanh_k, HAS_SMOOTHING, HAS_WEIGHT, HAS_SOFTCAP,
        )  # fmt: skip
        out_desc.store([off_n, off_j + COLS // 2], cast(grad, out_desc.dtype, UPCAST_DOT))
    else:
        grad = grad_epilogue(
            acc, off_j + tl.arange(0, COLS), row_max, log_sum, a_inv, b_inv, smooth, y,
            Weight, v0, width, softcap, tanh_k, HAS_SMOOTHING, HAS_WEIGHT, HAS_SOFTCAP,
        )  # fmt: skip
        out_desc.store([off_n, off_j], cast(grad, out_desc.dtype, UPCAST_DOT))


@triton.jit
def _slice_tile(e_desc, c_desc, out_desc, RowMax, LogSum, S, Weight, Targets, a, b, inv,
                softcap, tanh_k, N, D, v0, width, off_n, off_j, BLOCK_N: tl.constexpr,
                BLOCK_V: tl.constexpr, BLOCK_D: tl.constexpr, HAS_SMOOTHING: tl.constexpr,
                HAS_WEIGHT: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
                DOT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr,
                SUBTILES: tl.constexpr):  # fmt: skip
    """One output tile of the slice: its logits, then its gradient stored by halves."""
    HALF: tl.constexpr = BLOCK_V // 2
    acc = _logits(e_desc, c_desc, off_n, v0 + off_j, D, BLOCK_N, BLOCK_V, BLOCK_D,
                  DOT_PRECISION, UPCAST_DOT)  # fmt: skip
    offs_n = off_n + tl.arange(0, BLOCK_N)
    row_max, log_sum, a_inv, b_inv, smooth, y = row_terms(
        RowMax, LogSum, S, Targets, a, b, inv, offs_n, offs_n < N, v0, width, HAS_SMOOTHING
    )
    lo, hi = _halves(acc, BLOCK_N, BLOCK_V)
    _grad_store(
        lo, out_desc, off_n, off_j, row_max, log_sum, a_inv, b_inv, smooth, y,
        Weight, v0, width, softcap, tanh_k, BLOCK_N, HALF, SUBTILES == 4,
        HAS_SMOOTHING, HAS_WEIGHT, HAS_SOFTCAP, UPCAST_DOT,
    )  # fmt: skip
    _grad_store(
        hi, out_desc, off_n, off_j + HALF, row_max, log_sum, a_inv, b_inv, smooth, y,
        Weight, v0, width, softcap, tanh_k, BLOCK_N, HALF, SUBTILES == 4,
        HAS_SMOOTHING, HAS_WEIGHT, HAS_SOFTCAP, UPCAST_DOT,
    )  # fmt: skip


@triton.jit
def _tma_grad_slice_kernel(
    e_desc,
    c_desc,
    out_desc,
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
    D,
    v0,
    width,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    FLATTEN: tl.constexpr,
    GROUP_N: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    SUBTILES: tl.constexpr,
):
    """The gradient slice G[:, v0:v0+width] tile by tile over a persistent grid; row
    blocks with zero coefficients (all rows ignored) store zeros without a GEMM."""
    num_n = tl.cdiv(N, BLOCK_N)
    num_v = tl.cdiv(width, BLOCK_V)
    inv = tl.load(InvScale)
    tanh_k = tanh_scale(softcap) if HAS_SOFTCAP else softcap
    for tile in tl.range(tl.program_id(0), num_n * num_v, tl.num_programs(0), flatten=FLATTEN):
        pid_n, pid_j = grouped(tile, num_n, num_v, GROUP_N)  # L2 reuse of C_s
        off_n = pid_n * BLOCK_N
        off_j = pid_j * BLOCK_V
        offs_n = off_n + tl.arange(0, BLOCK_N)
        n_mask = offs_n < N
        a = tl.load(A + offs_n, mask=n_mask, other=0.0)
        b = tl.load(B + offs_n, mask=n_mask, other=0.0)
        # Fused, every tile goes through the GEMM: a branch around the D loop keeps Triton
        # from fusing it with the tile loop. Rows with zero coefficients (a = b = S = 0)
        # then come out +0 by the arithmetic, as the skip below stores them.
        if FLATTEN:
            live = True
        else:
            live = tl.max(tl.abs(a) + tl.abs(b), axis=0) > 0
        if live:
            _slice_tile(
                e_desc, c_desc, out_desc, RowMax, LogSum, S, Weight, Targets, a, b, inv,
                softcap, tanh_k, N, D, v0, width, off_n, off_j, BLOCK_N, BLOCK_V, BLOCK_D,
                HAS_SMOOTHING, HAS_WEIGHT, HAS_SOFTCAP, DOT_PRECISION, UPCAST_DOT, SUBTILES,
            )  # fmt: skip
        else:
            zeros = tl.zeros((BLOCK_N, BLOCK_V // SUBTILES), dtype=out_desc.dtype)
            for part in range(0, SUBTILES):
                out_desc.store([off_n, off_j + part * (BLOCK_V // SUBTILES)], zeros)


_forward = triton.heuristics(_FWD_HEURISTICS)(_tma_forward_kernel)
_grad_slice = triton.heuristics(_SLICE_HEURISTICS)(_tma_grad_slice_kernel)


def enabled() -> bool:
    """``PERFSUITE_TMA=0`` turns the fast path off (the portable kernels run instead)."""
    return os.environ.get("PERFSUITE_TMA", "1") != "0"


def eligible(
    capability: tuple[int, int] | None,
    dtype: torch.dtype,
    operands: Sequence[tuple[int, int, int]],
) -> bool:
    """Whether the TMA kernels can run (testable without a GPU): capability 9.x or 10.x
    (None off CUDA), a 16-bit dtype, and every operand's (data pointer, row stride, column
    stride) in elements 16-byte aligned with contiguous rows."""
    if (
        capability is None
        or capability[0] not in (9, 10)
        or dtype not in (torch.bfloat16, torch.float16)
    ):
        return False
    size = torch.finfo(dtype).bits // 8
    return all(col == 1 and (row * size) % 16 == 0 and ptr % 16 == 0 for ptr, row, col in operands)


def use_tma(*tensors: torch.Tensor) -> bool:
    """``eligible`` for these 2-D operands on their device (False on CPU, under the
    interpreter, with autotuning on or with the path switched off)."""
    first = tensors[0]
    if not enabled() or first.device.type != "cuda" or interpreting() or autotune_enabled():
        return False
    if any(t.dim() != 2 for t in tensors):
        return False
    cap = torch.cuda.get_device_capability(first.device)
    operands = [(t.data_ptr(), t.stride(0), t.stride(1)) for t in tensors]
    return eligible(cap, first.dtype, operands)


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


# Per-SM limits: registers, threads, resident CTAs, shared memory (and per-CTA max);
# Blackwell's tensor memory: 512 columns per SM, which tcgen05 accumulators take.
LIMITS = {
    "sm_80": dict(regs=65536, threads=2048, ctas=32, smem=167936, smem_cta=166912, tmem=0),
    "sm_90": dict(regs=65536, threads=2048, ctas=32, smem=233472, smem_cta=232448, tmem=0),
    "sm_100": dict(regs=65536, threads=2048, ctas=32, smem=233472, smem_cta=232448, tmem=512),
}
_RESERVED_SMEM = 1024  # the driver keeps 1 KiB of shared memory per CTA (sm_80+)


def fitting_ctas(
    registers: int, shared: int, num_warps: int, tmem: int = 0, arch: str = "sm_100"
) -> int:
    """CTAs of one build resident on an SM at ``arch``'s limits (0 when one does not fit);
    registers are allocated per warp in units of 256. ``perfsuite kernel-report`` uses it."""
    lim = LIMITS[arch]
    if shared > lim["smem_cta"] or registers > 255 or tmem > lim["tmem"]:
        return 0
    per_warp = -(-registers * 32 // 256) * 256
    by_regs = (lim["regs"] // per_warp) // num_warps if per_warp else lim["ctas"]
    by_threads = lim["threads"] // (32 * num_warps)
    by_smem = lim["smem"] // (shared + _RESERVED_SMEM)
    by_tmem = lim["tmem"] // tmem if tmem else lim["ctas"]
    return min(by_regs, by_threads, by_smem, by_tmem, lim["ctas"])


# CTAs/SM of each build, known once it has been loaded: (kernel, device, dtype, flags).
_RESIDENT: dict[tuple, int] = {}


def _launch(kernel, key: tuple, work: int, device: torch.device, cfg: KernelConfig, *args):
    """Launch ``kernel`` on one full wave: SMs × the CTAs of this build that fit on an SM
    (the config's ``ctas_per_sm`` until the loaded build says); results never depend on it."""
    key = (*key, cfg)  # a forced config (use_config) is another build
    on_gpu = device.type == "cuda" and not interpreting()
    programs = INTERPRETER_PROGRAMS
    if on_gpu:
        programs = _sm_count(device.index or 0) * _RESIDENT.get(key, cfg.ctas_per_sm)
    compiled = kernel[(max(1, min(work, programs)),)](*args, **cfg.launch(f"{key[0]}_tma"))
    if key not in _RESIDENT and on_gpu:
        meta = compiled.metadata
        tmem = int(getattr(meta, "tmem_size", 0) or 0)
        fit = fitting_ctas(compiled.n_regs, meta.shared, meta.num_warps, tmem)
        _RESIDENT[key] = max(1, fit)


def forward_splits(n_rows: int, vocab: int, device: torch.device, cfg: KernelConfig) -> int:
    """``forward.choose_splits``, but two under the interpreter where there are two tiles,
    so that the tests walk the split loop."""
    from .forward import choose_splits

    cpu = 1 if triton.cdiv(vocab, cfg.block_v) < 2 else 2
    return choose_splits(n_rows, vocab, device, cfg.block_n, cfg.ctas_per_sm, cpu)


def launch_forward(
    e: torch.Tensor,
    c: torch.Tensor,
    cbar: torch.Tensor | None,
    part: torch.Tensor,
    weight: torch.Tensor | None,
    softcap: float | None,
    split_size: int,
    cfg: KernelConfig,
) -> None:
    """``forward.lse_forward``'s launch on the TMA kernel: per-split partials into ``part``
    (max, sum-exp and, with smoothing, the smoothing sums: (2 or 3, splits, N))."""
    n_rows, dim = e.shape
    vocab = c.shape[0]
    smoothing, splits = part.shape[0] == 3, part.shape[1]
    smooth_part = part[2] if smoothing else None
    e_desc = TensorDescriptor.from_tensor(e, [cfg.block_n, cfg.block_d])
    c_desc = TensorDescriptor.from_tensor(c, [cfg.block_v, cfg.block_d])
    items = triton.cdiv(n_rows, cfg.block_n) * splits
    flags = (smoothing, softcap is not None, weight is not None, vocab % cfg.block_v == 0)
    _launch(
        _forward, ("forward", e.device, e.dtype, *flags), items, e.device, cfg,
        e_desc, c_desc, cbar, part[0], part[1], smooth_part, weight, softcap,
        n_rows, vocab, dim, split_size, splits,
    )  # fmt: skip


def grad_slice(
    out: torch.Tensor, e, c, targets, row_max, log_sum, k, weight, inv_scale, v0: int, *, p
) -> None:
    """``slices._triton_grad_slice`` on the TMA kernel: ``out`` (N, width) = the slice."""
    n_rows, dim = e.shape
    width = out.shape[1]
    cfg = pinned_config("slices", e.dtype, e.device, (n_rows, width, dim), tma=True)
    e_desc = TensorDescriptor.from_tensor(e, [cfg.block_n, cfg.block_d])
    c_desc = TensorDescriptor.from_tensor(c, [cfg.block_v, cfg.block_d])
    sub = cfg.block_v // slice_subtiles(weight is not None)
    out_desc = TensorDescriptor.from_tensor(out, [cfg.block_n, sub])
    tiles = triton.cdiv(n_rows, cfg.block_n) * triton.cdiv(width, cfg.block_v)
    flags = (k.smooth is not None, p.softcap is not None, weight is not None)
    _launch(
        _grad_slice, ("slices", e.device, e.dtype, *flags), tiles, e.device, cfg,
        e_desc, c_desc, out_desc, row_max, log_sum, k.prob, k.target, k.smooth,
        weight, targets.contiguous(), inv_scale, p.softcap, n_rows, dim, v0, width,
    )  # fmt: skip
