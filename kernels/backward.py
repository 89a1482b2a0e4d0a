"""Backward stage: recompute logit tiles, add the softmax and target parts to dE/dC.

Each program owns one (row block, vocab tile) pair. It rebuilds the logits, forms
``d = p − (1−β)[v = y]`` (times ``1 − t²`` with softcap, plus the ``(β/V)·t²``
piece), and multiplies by the per-row upstream gradient ``g``. Gradient filtering
skips a tile only when every ``|d| < filter_eps`` *and* it holds no target: the
dropped terms are then softmax probabilities alone, and the target part stays
exact. The constant smoothing part ``−(β/V)·g`` is rank one and never enters the
tiles: the launcher writes it into dE and dC before the kernel adds to them.

dE/dC updates go through fp32 atomics when the buffer is fp32, else through a
read-modify-write under one spin lock per (tile, D-chunk).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import cast, dot, locked_add, logit_tile, tanh, wide_offsets
from .configs import autotune_enabled, autotune_space, interpreting, pinned_config
from .forward import dot_precision
from .reductions import column_sum

GROUP_N = 8

_HEURISTICS = {
    "EVEN_D": lambda a: a["D"] % a["BLOCK_D"] == 0,
    "HAS_SMOOTHING": lambda a: a["smooth_w"] > 0,
    "HAS_SOFTCAP": lambda a: a["softcap"] is not None,
    "FILTER": lambda a: a["filter_eps"] is not None,
    "SORTED": lambda a: a["Order"] is not None,
    "ATOMIC_DE": lambda a: a["dE"].dtype == torch.float32,
    "ATOMIC_DC": lambda a: a["dC"].dtype == torch.float32,
    "GROUP_N": lambda a: GROUP_N,
    "DOT_PRECISION": lambda a: dot_precision(a["E"].dtype),
    # Interpreter-only bf16 fixes (exact dot, round-to-nearest casts); False on GPUs.
    "UPCAST_DOT": lambda a: interpreting() and a["E"].dtype == torch.bfloat16,
}


@triton.jit
def _backward_kernel(
    E,
    C,
    LSE,
    Targets,
    G,
    Order,
    dE,
    dC,
    dELocks,
    dCLocks,
    softcap,
    target_w,
    smooth_w,
    filter_eps,
    N,
    V,
    D,
    stride_en,
    stride_ed,
    stride_cv,
    stride_cd,
    stride_t,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_DD: tl.constexpr,
    GROUP_N: tl.constexpr,
    EVEN_D: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    FILTER: tl.constexpr,
    SORTED: tl.constexpr,
    ATOMIC_DE: tl.constexpr,
    ATOMIC_DC: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    # Grouped ordering: GROUP_N row blocks sweep the vocab together (L2 reuse of C).
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    num_v = tl.cdiv(V, BLOCK_V)
    per_group = GROUP_N * num_v
    first_n = (pid // per_group) * GROUP_N
    group_size = tl.minimum(num_n - first_n, GROUP_N)
    pid_n = first_n + (pid % per_group) % group_size
    pid_v = (pid % per_group) // group_size

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    g = tl.load(G + offs_n, mask=n_mask, other=0.0)
    # Blocks of ignored rows (a masked prompt) cost one load.
    if tl.max(tl.abs(g), axis=0) > 0:
        offs_lin = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
        v_mask = offs_lin < V
        if SORTED:
            offs_v = tl.load(Order + offs_lin, mask=v_mask, other=0)
        else:
            offs_v = tl.where(v_mask, offs_lin, 0)
        e_rows = wide_offsets(offs_n % N, stride_en)
        c_rows = wide_offsets(offs_v, stride_cv)
        acc = logit_tile(
            E, C, e_rows, c_rows, stride_ed, stride_cd, D,
            BLOCK_N, BLOCK_V, BLOCK_D, EVEN_D, DOT_PRECISION, UPCAST_DOT,
        )  # fmt: skip

        if HAS_SOFTCAP:
            t = tanh(acc / softcap)
            acc = softcap * t
        lse = tl.load(LSE + offs_n % N)
        targets = tl.load(Targets + wide_offsets(offs_n % N, stride_t)).to(tl.int32)
        live = n_mask & (g != 0)
        is_target = (offs_v[None, :] == targets[:, None]) & v_mask[None, :] & live[:, None]
        grad = tl.exp(acc - lse[:, None]) - tl.where(is_target, target_w, 0.0)
        if HAS_SOFTCAP:
            grad = grad * (1.0 - t * t)
            if HAS_SMOOTHING:
                grad += smooth_w * t * t
        grad = tl.where(live[:, None] & v_mask[None, :], grad, 0.0)

        keep = True
        if FILTER:
            big = tl.max(tl.max(tl.abs(grad), axis=1), axis=0) >= filter_eps
            has_target = tl.max(tl.max(is_target.to(tl.int32), axis=1), axis=0) > 0
            keep = big | has_target
        if keep:
            grad_t = cast(grad * g[:, None], E.dtype.element_ty, UPCAST_DOT)
            n_dd = tl.cdiv(D, BLOCK_DD)
            for dd in range(0, n_dd):
                offs_dd = dd * BLOCK_DD + tl.arange(0, BLOCK_DD)
                dd_mask = offs_dd < D
                c_chunk = tl.load(
                    C + c_rows[:, None] + offs_dd[None, :] * stride_cd,
                    mask=dd_mask[None, :],
                    other=0.0,
                )
                de = dot(grad_t, c_chunk, None, DOT_PRECISION, UPCAST_DOT)
                de_ptrs = dE + wide_offsets(offs_n, D)[:, None] + offs_dd[None, :]
                de_mask = n_mask[:, None] & dd_mask[None, :]
                if ATOMIC_DE:
                    tl.atomic_add(de_ptrs, de, mask=de_mask)
                else:
                    locked_add(de_ptrs, de, de_mask, dELocks + pid_n * n_dd + dd, UPCAST_DOT)
            grad_tt = tl.trans(grad_t)
            for dd in range(0, n_dd):
                offs_dd = dd * BLOCK_DD + tl.arange(0, BLOCK_DD)
                dd_mask = offs_dd < D
                e_chunk = tl.load(
                    E + e_rows[:, None] + offs_dd[None, :] * stride_ed,
                    mask=dd_mask[None, :],
                    other=0.0,
                )
                dc = dot(grad_tt, e_chunk, None, DOT_PRECISION, UPCAST_DOT)
                dc_ptrs = dC + wide_offsets(offs_v, D)[:, None] + offs_dd[None, :]
                dc_mask = v_mask[:, None] & dd_mask[None, :]
                if ATOMIC_DC:
                    tl.atomic_add(dc_ptrs, dc, mask=dc_mask)
                else:
                    locked_add(dc_ptrs, dc, dc_mask, dCLocks + pid_v * n_dd + dd, UPCAST_DOT)


_backward = triton.heuristics(_HEURISTICS)(_backward_kernel)
_backward_tuned = None


def _tuned():
    """The autotuned variant; dE/dC are restored between trials (they accumulate)."""
    global _backward_tuned
    if _backward_tuned is None:
        _backward_tuned = triton.autotune(
            autotune_space("backward"), key=["N", "V", "D"], restore_value=["dE", "dC"]
        )(_backward)
    return _backward_tuned


def default_filter_eps(dtype: torch.dtype) -> float:
    """CCE's choice: below this a softmax term does not survive rounding into the dtype."""
    return torch.finfo(dtype).eps / 32


def lce_backward(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    lse: torch.Tensor,
    g: torch.Tensor,
    *,
    cbar: torch.Tensor | None,
    beta: float,
    softcap: float | None,
    filter_eps: float | None,
    order: torch.Tensor | None,
    accum_fp32: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """dE (N, D) and dC (V, D) in the inputs' dtypes for per-row upstream gradients ``g``.

    ``g`` is fp32 (N,), zero at ignored rows. Workspace beyond dE/dC is O(N + V + D)
    (locks, the D-vectors of the rank-one smoothing part), plus fp32 dE/dC buffers
    when ``accum_fp32``.
    """
    n_rows, dim = e.shape
    vocab = c.shape[0]
    # In the input dtype by default (the memory floor); each surviving tile update
    # rounds once. fp32 buffers ((N + V)·D·4 bytes) are opt-in.
    smooth_w = beta / vocab
    buf_dtype = torch.float32 if accum_fp32 else e.dtype
    de = torch.empty((n_rows, dim), device=e.device, dtype=buf_dtype)
    dc = torch.empty((vocab, dim), device=e.device, dtype=buf_dtype)
    if beta > 0:
        # Rank-one smoothing part, exact and outside the tiles (math.md):
        # dE_n = −(β/V) g_n c̄,  dC_v = −(β/V) Σ_n g_n E_n for every v.
        assert cbar is not None
        torch.mul(g[:, None], (cbar * -smooth_w)[None, :], out=de)
        dc.copy_((column_sum(e, g) * -smooth_w).expand(vocab, dim))
    else:
        de.zero_()
        dc.zero_()

    if autotune_enabled():
        cfg = None
        kernel = _tuned()
        block_dd_max = 16
    else:
        cfg = pinned_config("backward", e.dtype, e.device, (n_rows, vocab, dim))
        kernel = _backward
        block_dd_max = cfg.block_dd
    n_dd = triton.cdiv(dim, block_dd_max)
    de_locks = torch.zeros(triton.cdiv(n_rows, 16) * n_dd, device=e.device, dtype=torch.int32)
    dc_locks = torch.zeros(triton.cdiv(vocab, 16) * n_dd, device=e.device, dtype=torch.int32)

    def grid(meta: dict) -> tuple[int]:
        return (triton.cdiv(n_rows, meta["BLOCK_N"]) * triton.cdiv(vocab, meta["BLOCK_V"]),)

    kernel[grid](
        e,
        c,
        lse,
        targets,
        g,
        order,
        de,
        dc,
        de_locks,
        dc_locks,
        softcap,
        1.0 - beta,
        smooth_w,
        filter_eps,
        n_rows,
        vocab,
        dim,
        e.stride(0),
        e.stride(1),
        c.stride(0),
        c.stride(1),
        targets.stride(0),
        **({} if cfg is None else cfg.launch("backward")),
    )
    if buf_dtype != e.dtype:
        de, dc = de.to(e.dtype), dc.to(e.dtype)
    return de, dc
