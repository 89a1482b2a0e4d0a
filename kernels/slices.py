"""Default backward: exact gradient slices and plain GEMMs, no atomics, no locks. Per vocab
slice, in one fixed order (bit-identical run to run): the gradient slice
``G = (A·p − B·[v = y] − S·w_v)·(1 − t²)/σ`` in the inputs' dtype (terms.py), then
``dE += G·C_s`` in fp32 and ``dC_s = Gᵀ·E`` (docs/kernel.md, "How it works").
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from . import hopper
from .common import grad_tile, grouped, logit_tile, store_tile, wide_offsets
from .configs import GROUP_N, interpreting, pinned_config
from .forward import dot_precision
from .terms import Coefficients

DEFAULT_BUDGET = 64 * 2**20
# Slice widths are multiples of this: every pinned BLOCK_V divides it, and 128 columns keep
# each slice buffer's row stride and each C_s slice's start 16-byte aligned in any dtype
# (TMA descriptors and cuBLAS's vectorised kernels need that).
WIDTH_GRAIN = 128

_HEURISTICS = {
    "EVEN_D": lambda a: a["D"] % a["BLOCK_D"] == 0,
    "HAS_SMOOTHING": lambda a: a["S"] is not None,
    "HAS_WEIGHT": lambda a: a["Weight"] is not None,
    "HAS_SOFTCAP": lambda a: a["softcap"] is not None,
    "GROUP_N": lambda a: GROUP_N,
    "DOT_PRECISION": lambda a: dot_precision(a["E"].dtype),
    "UPCAST_DOT": lambda a: interpreting(),
}


@triton.jit
def _grad_slice_kernel(
    E,
    C,
    RowMax,
    LogSum,
    A,
    B,
    S,
    Weight,
    Targets,
    InvScale,
    Out,
    softcap,
    N,
    D,
    v0,
    width,
    stride_en,
    stride_ed,
    stride_cv,
    stride_cd,
    stride_on,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    GROUP_N: tl.constexpr,
    EVEN_D: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """One (row block, slice tile) of G; row blocks with zero coefficients (all rows
    ignored) store zeros without a GEMM."""
    pid_n, pid_v = grouped(
        tl.program_id(0), tl.cdiv(N, BLOCK_N), tl.cdiv(width, BLOCK_V), GROUP_N
    )  # L2 reuse of C_s

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_j = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    n_mask = offs_n < N
    j_mask = offs_j < width
    a = tl.load(A + offs_n, mask=n_mask, other=0.0)
    b = tl.load(B + offs_n, mask=n_mask, other=0.0)
    if tl.max(tl.abs(a) + tl.abs(b), axis=0) > 0:
        e_rows = wide_offsets(offs_n % N, stride_en)
        c_rows = wide_offsets(v0 + offs_j % width, stride_cv)
        acc = logit_tile(
            E, C, e_rows, c_rows, stride_ed, stride_cd, D,
            BLOCK_N, BLOCK_V, BLOCK_D, EVEN_D, DOT_PRECISION, UPCAST_DOT,
        )  # fmt: skip
        # The int32 hit test (row_terms) and the output pointers formed at the store ended
        # Triton 3.9's 8 B spill with softcap and class weights (sm_90a, whose builds 3.9
        # hands to CUDA 13.4's ptxas, and sm_80); every slice build is spill-free under
        # 3.6, 3.7 and 3.9.
        grad_tile(
            Out, acc, RowMax, LogSum, S, Targets, Weight, a, b, tl.load(InvScale), offs_n,
            offs_j, n_mask, j_mask, v0, width, stride_on, softcap, HAS_SMOOTHING, HAS_WEIGHT,
            HAS_SOFTCAP, UPCAST_DOT,
        )  # fmt: skip
    else:
        zeros = tl.zeros((BLOCK_N, BLOCK_V), dtype=tl.float32)
        store_tile(Out, zeros, offs_n, offs_j, n_mask, j_mask, stride_on, UPCAST_DOT)


_grad_slice = triton.heuristics(_HEURISTICS)(_grad_slice_kernel)


def _triton_grad_slice(
    out: torch.Tensor, e, c, targets, row_max, log_sum, k, weight, inv_scale, v0: int, *, p
) -> None:
    """Fill ``out`` (N, width) with the gradient slice of columns [v0, v0 + width)."""
    if hopper.use_tma(e, c, out):  # sm_90/sm_100, 16-bit, TMA-aligned (hopper.py)
        return hopper.grad_slice(
            out, e, c, targets, row_max, log_sum, k, weight, inv_scale, v0, p=p
        )
    n_rows, dim = e.shape
    width = out.shape[1]
    cfg = pinned_config("slices", e.dtype, e.device, (n_rows, width, dim))

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(n_rows, meta["BLOCK_N"]) * triton.cdiv(width, meta["BLOCK_V"]),)

    _grad_slice[grid](
        e, c, row_max, log_sum, k.prob, k.target, k.smooth,
        weight, targets.contiguous(),
        inv_scale, out, p.softcap, n_rows, dim, v0, width,
        e.stride(0), e.stride(1), c.stride(0), c.stride(1), out.stride(0),
        **cfg.launch("slices"),
    )  # fmt: skip


def row_chunks(n_rows: int) -> list[slice]:
    """Row slices whose fp32 copies or gathered rows stay ≤ 1/16 of an N×D buffer."""
    chunk = max(64, triton.cdiv(n_rows, 16))
    return [slice(start, start + chunk) for start in range(0, n_rows, chunk)]


def logit_slice(out: torch.Tensor, e: torch.Tensor, c_s: torch.Tensor) -> torch.Tensor:
    """fp32 ``e @ c_s.T`` into ``out`` (torch ops; 16-bit inputs upcast by row chunks
    unless the GEMM can write fp32 itself, as cuBLAS does)."""
    if e.dtype == torch.float32:
        return torch.mm(e, c_s.T, out=out)
    if _fp32_out_mm(e.device):
        return torch.mm(e, c_s.T, out_dtype=torch.float32, out=out)
    c32 = c_s.float()
    for part in row_chunks(e.shape[0]):
        torch.mm(e[part].float(), c32.T, out=out[part])
    return out


def inverse_cap(softcap: float) -> float:
    """``1/softcap``, as the kernels multiply by it: rounded to fp32 at the multiply, it is
    their correctly rounded ``1/s``; plain Python, so torch.compile traces it."""
    return 1.0 / softcap


def _torch_grad_slice(
    buf: torch.Tensor, spare: torch.Tensor | None, e, c, targets, row_max, log_sum, k,
    weight, inv_scale, v0: int, *, p,
) -> torch.Tensor:  # fmt: skip
    """The same slice with torch ops, in place on the fp32 ``buf`` (N, width); returns it."""
    width = buf.shape[1]
    logit_slice(buf, e, c[v0 : v0 + width])
    if p.softcap is not None:
        t = buf.mul_(inverse_cap(p.softcap)).tanh_()
        grad = torch.mul(t, p.softcap, out=spare)
    else:
        t, grad = None, buf
    grad.sub_(row_max[:, None]).sub_(log_sum[:, None]).exp_()
    grad.mul_((k.prob * inv_scale)[:, None])
    if k.smooth is not None:
        smooth = k.smooth * inv_scale
        if weight is None:
            grad.sub_(smooth[:, None])
        else:  # a rank-one update in place: no N×width temporary
            grad.addr_(smooth, weight[v0 : v0 + width], alpha=-1.0)
    hit = (targets >= v0) & (targets < v0 + width)
    cols = (targets - v0).clamp(0, width - 1)[:, None]
    grad.scatter_add_(1, cols, (hit.to(grad.dtype) * -(k.target * inv_scale))[:, None])
    if t is not None:
        grad.mul_(t.square_().neg_().add_(1.0))
    return grad


@functools.cache
def _fp32_out_mm(device: torch.device) -> bool:
    """Whether ``torch.addmm(..., out_dtype=float32)`` adds 16-bit products into fp32 here
    (cuBLAS in torch ≥ 2.8; not CPU torch): probed once per device, as the backward uses it."""
    if device.type != "cuda":
        return False
    try:
        a = torch.randn(64, 32, device=device).bfloat16()
        b = torch.randn(32, 48, device=device).bfloat16()
        acc = torch.ones(64, 48, device=device)
        torch.addmm(acc, a, b, out_dtype=torch.float32, out=acc)
        fresh = torch.empty(64, 48, device=device)
        torch.mm(a, b, out_dtype=torch.float32, out=fresh)
    except (TypeError, RuntimeError, NotImplementedError):
        return False
    want = a.float() @ b.float()
    close = torch.allclose(acc, want + 1.0, rtol=1e-5, atol=1e-5)
    return close and bool(torch.allclose(fresh, want, rtol=1e-5, atol=1e-5))


def bytes_per_column(
    n_rows: int, dim: int, dtype: torch.dtype, device: torch.device, engine: str, softcap: bool
) -> int:
    """Workspace one vocab column of a slice costs on ``engine``: G in the dtype (triton),
    plus the fp32 logits (cublas), or fp32 buffers, two with softcap, plus G and C_s
    rounded for 16-bit inputs (torch); the fp32 upcasts where no fp32-output GEMM exists,
    and fp16's rescaling of dC_s."""
    size = torch.finfo(dtype).bits // 8
    slow_half = size < 4 and not _fp32_out_mm(device)
    if engine == "triton":
        per = n_rows * size + (n_rows * 4 + dim * 4 if slow_half else 0)
    elif engine == "cublas":
        per = n_rows * (4 + size) + (n_rows * 4 + 2 * dim * 4 if slow_half else 0)
    else:
        per = n_rows * 4 * (2 if softcap else 1)
        if size < 4:
            per += n_rows * size + dim * 4
    return per + (dim * 4 if dtype == torch.float16 else 0)


def slice_width(vocab: int, per_column: int, budget: int | None) -> int:
    """Columns per slice: the fewest, most even slices of whole ``WIDTH_GRAIN`` grains the
    budget allows (None: ``DEFAULT_BUDGET`` or a sixteenth of V's cost, whichever is less)."""
    if budget is None:
        budget = min(DEFAULT_BUDGET, per_column * triton.cdiv(vocab, 16))
    columns = budget // max(per_column, 1) // WIDTH_GRAIN * WIDTH_GRAIN
    widest = min(max(WIDTH_GRAIN, columns), triton.cdiv(vocab, WIDTH_GRAIN) * WIDTH_GRAIN)
    count = triton.cdiv(vocab, widest)
    return triton.cdiv(triton.cdiv(vocab, count), WIDTH_GRAIN) * WIDTH_GRAIN


def _gradient_scale(
    k: Coefficients, weight: torch.Tensor | None, dtype: torch.dtype
) -> torch.Tensor:
    """σ: 2^⌊log2 max|coefficient|⌋ for fp16 (device-side, no sync), else 1: fp16 would
    flush p·g to zero for g = 1/N; G/σ is O(1), and σ divides back out exactly."""
    if dtype != torch.float16:
        return torch.ones((), device=k.prob.device)
    parts = [k.prob.abs().amax(), k.target.abs().amax()]
    if k.smooth is not None:
        wmax = 1.0 if weight is None else weight.abs().amax()
        parts.append(k.smooth.abs().amax() * wmax)
    gmax = torch.stack(parts).amax().clamp_min(2.0**-120)
    return torch.exp2(torch.floor(torch.log2(gmax)))


def slices_backward(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    row_max: torch.Tensor,
    log_sum: torch.Tensor,
    k: Coefficients,
    *,
    p,
    weight: torch.Tensor | None = None,
    de_fp32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """dE (N, D) and dC (V, D) in the inputs' dtype from the per-row coefficients ``k``,
    on ``p``'s engine (function.Params); ``de_fp32``: dE as the fp32 accumulator (the
    vocab-parallel path sums it across ranks first)."""
    from . import cublas_route

    n_rows, dim = e.shape
    vocab = c.shape[0]
    fused = p.engine != "torch"  # G written in the dtype by a Triton kernel
    half = e.dtype != torch.float32
    per = bytes_per_column(n_rows, dim, e.dtype, e.device, p.engine, p.softcap is not None)
    width = slice_width(vocab, per, p.budget)
    scale = _gradient_scale(k, weight, e.dtype)
    inv_scale = (1.0 / scale).reshape(1)
    de = torch.zeros((n_rows, dim), device=e.device, dtype=torch.float32)
    dc = torch.empty((vocab, dim), device=e.device, dtype=e.dtype)
    # G's row stride is the whole width, the last slice's too (16-byte aligned); the torch
    # engine's fp32 buffer is no wider than V (contiguous when one slice holds all of V).
    buf_shape = (n_rows, width if fused else min(width, vocab))
    buf = torch.empty(buf_shape, device=e.device, dtype=e.dtype if fused else torch.float32)
    logits = torch.empty_like(buf, dtype=torch.float32) if p.engine == "cublas" else None
    spare = torch.empty_like(buf) if not fused and p.softcap is not None else None
    rounded = torch.empty_like(buf, dtype=e.dtype) if not fused and half else None
    fast_half = half and _fp32_out_mm(e.device)
    w = weight if k.smooth is not None else None  # only the smoothing term reads it
    args = (e, c, targets, row_max, log_sum, k, w, inv_scale)
    for v0 in range(0, vocab, width):
        cols = min(width, vocab - v0)
        c_s = c[v0 : v0 + cols]
        if logits is not None:  # the cuBLAS route (routes.py): its own module
            grad = cublas_route.slab(buf, cols)
            cublas_route.grad_slice(grad, logits, *args, v0, p=p)
        elif fused:
            grad = buf[:, :cols]
            _triton_grad_slice(grad, *args, v0, p=p)
        else:
            extra = None if spare is None else spare[:, :cols]
            grad = _torch_grad_slice(buf[:, :cols], extra, *args, v0, p=p)
        if rounded is not None and fast_half:
            grad = rounded[:, :cols].copy_(grad)  # 16-bit GEMMs with fp32 output (cuBLAS)
        # dE from G as it stands (on CPU the torch engine's fp32 G, the more exact one).
        if grad.dtype == torch.float32:
            de.addmm_(grad, c_s.float())
        elif fast_half:
            torch.addmm(de, grad, c_s, out_dtype=torch.float32, out=de)
        else:  # row chunks keep the upcast copies of G within 1/16 of its size
            c32 = c_s.float()
            for part in row_chunks(n_rows):
                de[part].addmm_(grad[part].float(), c32)
        if rounded is not None and not fast_half:
            grad = rounded[:, :cols].copy_(grad)
        dc_s = torch.mm(grad.T, e, out=dc[v0 : v0 + cols])
        if e.dtype == torch.float16:
            dc_s.copy_(dc_s.float().mul_(scale))
    # The workspace goes before dE is cast to the dtype: held through the cast, it and both
    # dE copies made the peak (floor + N·D·4 + budget); freed, the loop's is the peak.
    buf = logits = spare = rounded = grad = c32 = None
    de.mul_(scale)
    return (de if de_fp32 else de.to(e.dtype)), dc
