"""Forward stage: per row, the LSE, the target logit and the smoothing sum.

Grid = (row blocks, vocab splits). Each program walks its vocab tiles once,
keeping an online (max, sum-exp) per row in registers; splits write partial
results to O(splits·N) buffers that torch combines, so there are no locks, no
grid-wide barrier and no N×V buffer. Without softcap the smoothing sum is
``E_n·c̄`` (one D-dot per row, done by split 0); with softcap it is accumulated
tile by tile. Padded vocab columns are −inf in the LSE and 0 in the sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .common import logit_tile, tanh, wide_offsets
from .configs import autotune_enabled, autotune_space, interpreting, pinned_config


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 dots follow torch's matmul precision (ieee unless the user allowed tf32)."""
    if dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest":
        return "ieee"
    return "tf32"


_HEURISTICS = {
    "EVEN_D": lambda a: a["D"] % a["BLOCK_D"] == 0,
    "HAS_SMOOTHING": lambda a: a["SmoothPart"] is not None,
    "HAS_SOFTCAP": lambda a: a["softcap"] is not None,
    "HAS_LOGIT_AVG": lambda a: a["LogitAvg"] is not None,
    "DOT_PRECISION": lambda a: dot_precision(a["E"].dtype),
    "UPCAST_DOT": lambda a: interpreting() and a["E"].dtype == torch.bfloat16,
}


@triton.jit
def _forward_kernel(
    E,
    C,
    Targets,
    CBar,
    LSEPart,
    TargetPart,
    SmoothPart,
    LogitAvg,
    softcap,
    inv_n,
    N,
    V,
    D,
    split_size,
    stride_en,
    stride_ed,
    stride_cv,
    stride_cd,
    stride_t,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    EVEN_D: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_LOGIT_AVG: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    # Rows past N re-read row (n mod N): unmasked loads, results discarded.
    e_rows = wide_offsets(offs_n % N, stride_en)
    targets = tl.load(Targets + wide_offsets(offs_n % N, stride_t)).to(tl.int32)
    offs_d = tl.arange(0, BLOCK_D)

    row_max = tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
    target_logit = tl.zeros((BLOCK_N,), dtype=tl.float32)
    smooth = tl.zeros((BLOCK_N,), dtype=tl.float32)

    v_start = pid_s * split_size
    # split_size is a multiple of every BLOCK_V; the last split stops at V.
    for t in range(0, tl.cdiv(tl.minimum(split_size, V - v_start), BLOCK_V)):
        offs_v = v_start + t * BLOCK_V + tl.arange(0, BLOCK_V)
        v_mask = offs_v < V
        c_rows = wide_offsets(offs_v % V, stride_cv)
        acc = logit_tile(
            E, C, e_rows, c_rows, stride_ed, stride_cd, D,
            BLOCK_N, BLOCK_V, BLOCK_D, EVEN_D, DOT_PRECISION, UPCAST_DOT,
        )  # fmt: skip
        if HAS_SOFTCAP:
            acc = softcap * tanh(acc / softcap)
        target_logit += tl.sum(tl.where(offs_v[None, :] == targets[:, None], acc, 0.0), axis=1)
        if HAS_SMOOTHING and HAS_SOFTCAP:
            smooth += tl.sum(tl.where(v_mask[None, :], acc, 0.0), axis=1)
        if HAS_LOGIT_AVG:
            col = tl.sum(tl.where(n_mask[:, None], acc, 0.0), axis=0) * inv_n
            tl.atomic_add(LogitAvg + offs_v, col, mask=v_mask)
        z = tl.where(v_mask[None, :], acc, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(z, axis=1))
        # A tile past V (last split overshooting) leaves new_max = -inf: shift by 0.
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        row_sum = row_sum * tl.exp(row_max - shift) + tl.sum(tl.exp(z - shift[:, None]), axis=1)
        row_max = new_max

    if HAS_SMOOTHING and not HAS_SOFTCAP:
        # Σ_v z[n, v] = E_n · c̄ (math.md), once per row: split 0 does it.
        if pid_s == 0:
            cbar_ptrs = CBar + offs_d
            e_ptrs = E + e_rows[:, None] + offs_d[None, :] * stride_ed
            for d in range(0, tl.cdiv(D, BLOCK_D)):
                d_mask = offs_d < D - d * BLOCK_D
                e = tl.load(e_ptrs, mask=d_mask[None, :], other=0.0).to(tl.float32)
                cb = tl.load(cbar_ptrs, mask=d_mask, other=0.0)
                smooth += tl.sum(e * cb[None, :], axis=1)
                e_ptrs += BLOCK_D * stride_ed
                cbar_ptrs += BLOCK_D

    out = wide_offsets(pid_s, N) + offs_n
    safe_sum = tl.where(row_sum > 0, row_sum, 1.0)
    lse = tl.where(row_sum > 0, row_max + tl.log(safe_sum), float("-inf"))
    tl.store(LSEPart + out, lse, mask=n_mask)
    tl.store(TargetPart + out, target_logit, mask=n_mask)
    if HAS_SMOOTHING:
        tl.store(SmoothPart + out, smooth, mask=n_mask)


SPLIT_GRAIN = 256  # the largest BLOCK_V any GPU config uses

_forward = triton.heuristics(_HEURISTICS)(_forward_kernel)
_forward_tuned = None


def compiled_for_interpreter() -> bool:
    """Whether the kernels were decorated under TRITON_INTERPRET=1 (fixed at import)."""
    return type(_forward_kernel).__name__ == "InterpretedFunction"


def _tuned():
    """The autotuned variant, built on first use (keys: problem size and dtype flags)."""
    global _forward_tuned
    if _forward_tuned is None:
        _forward_tuned = triton.autotune(
            autotune_space("forward"), key=["N", "V", "D"], reset_to_zero=["LogitAvg"]
        )(_forward)
    return _forward_tuned


@dataclass
class ForwardResult:
    """Per-row fp32 outputs; ``logit_avg`` (V,) only when vocab sorting was asked."""

    lse: torch.Tensor
    target_logit: torch.Tensor
    smooth_sum: torch.Tensor | None
    logit_avg: torch.Tensor | None


def choose_splits(n_rows: int, vocab: int, device: torch.device) -> int:
    """Vocab splits so that row blocks × splits fill the GPU (1 on CPU)."""
    if device.type != "cuda" or interpreting():
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    row_blocks = triton.cdiv(n_rows, 128)
    return max(1, min(triton.cdiv(2 * sms, row_blocks), triton.cdiv(vocab, 1024), 64))


def lse_forward(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    *,
    cbar: torch.Tensor | None,
    smoothing: bool,
    softcap: float | None,
    logit_avg: bool,
    num_splits: int | None = None,
) -> ForwardResult:
    """Launch the forward kernel on 2-D ``e`` (N, D), ``c`` (V, D), ``targets`` (N,)."""
    n_rows, dim = e.shape
    vocab = c.shape[0]
    splits = num_splits or choose_splits(n_rows, vocab, e.device)
    part = torch.empty(
        (3 if smoothing else 2, splits, n_rows), device=e.device, dtype=torch.float32
    )
    lse_part, target_part = part[0], part[1]
    smooth_part = part[2] if smoothing else None
    avg = torch.zeros(vocab, device=e.device, dtype=torch.float32) if logit_avg else None
    if smoothing and softcap is None and cbar is None:
        raise ValueError("smoothing without softcap needs c̄ (the column sum of c)")

    def grid(meta: dict) -> tuple[int, int]:
        return (triton.cdiv(n_rows, meta["BLOCK_N"]), splits)

    args = (e, c, targets, cbar, lse_part, target_part, smooth_part, avg, softcap, 1.0 / n_rows)
    sizes = (n_rows, vocab, dim)
    strides = (e.stride(0), e.stride(1), c.stride(0), c.stride(1), targets.stride(0))
    cfg = None if autotune_enabled() else pinned_config("forward", e.dtype, e.device, sizes)
    # A multiple of every BLOCK_V in use, so no tile straddles two splits.
    grain = SPLIT_GRAIN if cfg is None else max(SPLIT_GRAIN, cfg.block_v)
    split_size = triton.cdiv(triton.cdiv(vocab, splits), grain) * grain
    if cfg is None:
        _tuned()[grid](*args, *sizes, split_size, *strides)
    else:
        _forward[grid](*args, *sizes, split_size, *strides, **cfg.launch("forward"))

    lse = lse_part[0] if splits == 1 else torch.logsumexp(lse_part, dim=0)
    target_logit = target_part[0] if splits == 1 else target_part.sum(0)
    smooth = None
    if smooth_part is not None:
        smooth = smooth_part[0] if splits == 1 else smooth_part.sum(0)
    return ForwardResult(lse, target_logit, smooth, avg)
