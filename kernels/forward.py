"""Forward stage: per row, the LSE (as row max and log-sum) and the smoothing sum. Grid =
(row blocks, vocab splits); each program keeps an online (max, sum-exp) per row over its
tiles and writes O(splits·N) partials that torch combines: no locks, no N×V buffer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from . import hopper
from .common import cast, logit_tile, online_softmax, softcapped, tanh_scale, wide_offsets
from .configs import autotune_enabled, autotune_space, interpreting, pinned_config
from .targets import target_logits


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 dots follow torch's matmul precision (ieee unless the user allowed tf32)."""
    if dtype == torch.float32 and torch.get_float32_matmul_precision() == "highest":
        return "ieee"
    return "tf32"


_HEURISTICS = {
    "EVEN_D": lambda a: a["D"] % a["BLOCK_D"] == 0,
    # Every tile whole: V a multiple of BLOCK_V (split sizes are multiples of it too).
    "EVEN_V": lambda a: a["V"] % a["BLOCK_V"] == 0,
    "HAS_SMOOTHING": lambda a: a["SmoothPart"] is not None,
    "HAS_SOFTCAP": lambda a: a["softcap"] is not None,
    "HAS_WEIGHT": lambda a: a["Weight"] is not None,
    "HAS_LOGIT_AVG": lambda a: a["LogitAvg"] is not None,
    "HAS_TILE_LSE": lambda a: a["TileLSE"] is not None,
    "DOT_PRECISION": lambda a: dot_precision(a["E"].dtype),
    "UPCAST_DOT": lambda a: interpreting(),
    # The interpreter stores fp32 into bf16 as raw bits: cast explicitly there.
    "INTERPRETING": lambda a: interpreting(),
}


@triton.jit
def _forward_kernel(
    E,
    C,
    CBar,
    MaxPart,
    SumPart,
    SmoothPart,
    LogitAvg,
    TileLSE,
    Weight,
    softcap,
    inv_n,
    N,
    V,
    D,
    split_size,
    num_tiles,
    stride_en,
    stride_ed,
    stride_cv,
    stride_cd,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    BLOCK_D: tl.constexpr,
    EVEN_D: tl.constexpr,
    EVEN_V: tl.constexpr,
    HAS_SMOOTHING: tl.constexpr,
    HAS_SOFTCAP: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    HAS_LOGIT_AVG: tl.constexpr,
    HAS_TILE_LSE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    INTERPRETING: tl.constexpr,
):
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    # Rows past N re-read row (n mod N): unmasked loads, results discarded.
    e_rows = wide_offsets(offs_n % N, stride_en)
    offs_d = tl.arange(0, BLOCK_D)

    row_max = tl.full((BLOCK_N,), float("-inf"), dtype=tl.float32)
    row_sum = tl.zeros((BLOCK_N,), dtype=tl.float32)
    # With softcap, Σ_v (z − row_max) in-kernel (common.online_softmax).
    smooth = tl.zeros((BLOCK_N,), dtype=tl.float32)
    seen = tl.zeros((), dtype=tl.float32)
    tanh_k = tanh_scale(softcap) if HAS_SOFTCAP else softcap

    v_start = pid_s * split_size
    # split_size is a multiple of every BLOCK_V; the last split stops at V.
    for t in range(0, tl.cdiv(tl.minimum(split_size, V - v_start), BLOCK_V)):
        first = v_start + t * BLOCK_V
        offs_v = first + tl.arange(0, BLOCK_V)
        c_rows = wide_offsets(offs_v % V, stride_cv)
        acc = logit_tile(
            E, C, e_rows, c_rows, stride_ed, stride_cd, D,
            BLOCK_N, BLOCK_V, BLOCK_D, EVEN_D, DOT_PRECISION, UPCAST_DOT,
        )  # fmt: skip
        acc = softcapped(acc, softcap, tanh_k, HAS_SOFTCAP)
        if HAS_LOGIT_AVG:
            col = tl.sum(tl.where(n_mask[:, None], acc, 0.0), axis=0) * inv_n
            tl.atomic_add(LogitAvg + offs_v, col, mask=offs_v < V, sem="relaxed")
        row_max, row_sum, smooth, seen, shift, tile_sum = online_softmax(
            acc, first, V, row_max, row_sum, smooth, seen, Weight,
            EVEN_V, HAS_SMOOTHING and HAS_SOFTCAP, HAS_WEIGHT,
        )  # fmt: skip
        if HAS_TILE_LSE:
            # log Σ_{v in tile} exp z: the tile's softmax mass is exp(tile_lse − lse).
            tile_lse = tl.where(tile_sum > 0, shift + tl.log(tl.maximum(tile_sum, 1e-38)), -1e30)
            tile_id = v_start // BLOCK_V + t
            tile_lse = cast(tile_lse.to(tl.float32), TileLSE.dtype.element_ty, INTERPRETING)
            tl.store(TileLSE + wide_offsets(offs_n, num_tiles) + tile_id, tile_lse, mask=n_mask)

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
    tl.store(MaxPart + out, row_max, mask=n_mask)
    tl.store(SumPart + out, row_sum, mask=n_mask)
    if HAS_SMOOTHING:
        tl.store(SmoothPart + out, smooth, mask=n_mask)


SPLIT_GRAIN = 256  # the largest BLOCK_V any GPU config uses

_forward = triton.heuristics(_HEURISTICS)(_forward_kernel)


def compiled_for_interpreter() -> bool:
    """Whether the kernels were decorated under TRITON_INTERPRET=1 (fixed at import)."""
    return type(_forward_kernel).__name__ == "InterpretedFunction"


@functools.cache
def _tuned(flags: tuple[bool, ...], has_avg: bool, has_tile_lse: bool):
    """An autotuner per variant (a shared one would time one variant for all);
    ``reset_to_zero`` names only buffers that exist (Triton <= 3.7 zeroes ``None`` too)."""
    reset = (["LogitAvg"] if has_avg else []) + (["TileLSE"] if has_tile_lse else [])
    space = autotune_space("forward")
    return triton.autotune(space, key=["N", "V", "D"], reset_to_zero=reset or None)(_forward)


@dataclass
class ForwardResult:
    """Per-row fp32 outputs, the LSE kept as ``row_max + log_sum`` so ``max − z`` cancels a
    common logit offset exactly; ``rel_sum``: Σ_v w_v (z − row_max) when smoothing;
    ``logit_avg``: vocab sorting's; ``tile_lse``: bf16 per-row LSE per vocab tile."""

    row_max: torch.Tensor
    log_sum: torch.Tensor
    target_logit: torch.Tensor
    rel_sum: torch.Tensor | None
    logit_avg: torch.Tensor | None
    tile_lse: torch.Tensor | None = None
    tile_width: int = 0

    @property
    def lse(self) -> torch.Tensor:
        return self.row_max + self.log_sum


def choose_splits(
    n_rows: int, vocab: int, device: torch.device, block_n: int, ctas_per_sm: int, cpu: int = 1
) -> int:
    """Vocab splits so that row blocks × splits is a whole number of waves (``cpu`` splits
    on a CPU or under the interpreter)."""
    if device.type != "cuda" or interpreting():
        return cpu
    slots = torch.cuda.get_device_properties(device).multi_processor_count * ctas_per_sm
    return splits_for(n_rows, vocab, block_n, slots)


@functools.lru_cache(maxsize=256)
def splits_for(n_rows: int, vocab: int, block_n: int, slots: int) -> int:
    """``choose_splits`` for ``slots`` concurrent CTAs: among 1..64 splits (2 vocab tiles
    each at least) the fewest within 1 % of the best last-wave efficiency, as fewer,
    longer programs amortise their prologue. Cached, and in plain integer arithmetic
    (``triton.cdiv`` costs ~2 µs a host call): it runs on every forward ahead of the first
    launch, while the device waits (250 µs as it was, on a CI core)."""
    row_blocks = -(-n_rows // block_n)
    limit = max(1, min(64, vocab // (2 * SPLIT_GRAIN)))
    busy = [wave_efficiency(row_blocks * s, slots) for s in range(1, limit + 1)]
    best = max(busy)
    return next(s for s, x in enumerate(busy, 1) if x >= best - 0.01)


def wave_efficiency(ctas: int, slots: int) -> float:
    """Busy fraction of the CTA slots over all waves (1.0 = whole waves)."""
    waves = -(-ctas // slots)
    return ctas / (waves * slots)


def lse_forward(
    e: torch.Tensor,
    c: torch.Tensor,
    targets: torch.Tensor,
    *,
    cbar: torch.Tensor | None,
    smoothing: bool,
    softcap: float | None,
    logit_avg: bool,
    tile_lse: bool = False,
    num_splits: int | None = None,
    weight: torch.Tensor | None = None,
) -> ForwardResult:
    """Launch the forward kernel on 2-D ``e`` (N, D), ``c`` (V, D), ``targets`` (N,);
    with class weights ``weight`` (fp32 (V,)), ``cbar`` is Σ_v w_v C_v."""
    if smoothing and softcap is None and cbar is None:
        raise ValueError("smoothing without softcap needs c̄ (the column sum of c)")
    n_rows, dim = e.shape
    vocab = c.shape[0]
    sizes = (n_rows, vocab, dim)
    # sm_90/sm_100, 16-bit, TMA-aligned: the persistent TMA kernel (hopper.py).
    tma = not (logit_avg or tile_lse or num_splits) and hopper.use_tma(e, c)
    if tma:
        weighted = weight is not None
        cfg = pinned_config("forward", e.dtype, e.device, sizes, tma=True, weighted=weighted)
        splits = hopper.forward_splits(n_rows, vocab, e.device, cfg)
    else:
        cfg = None if autotune_enabled() else pinned_config("forward", e.dtype, e.device, sizes)
        block_n = 128 if cfg is None else cfg.block_n
        splits = num_splits or choose_splits(
            n_rows, vocab, e.device, block_n, 1 if cfg is None else cfg.ctas_per_sm
        )
    # A multiple of every BLOCK_V in use, so no tile straddles two splits.
    grain = SPLIT_GRAIN if cfg is None else max(SPLIT_GRAIN, cfg.block_v)
    split_size = triton.cdiv(triton.cdiv(vocab, splits), grain) * grain
    # The tile bound needs one fixed tile width: the pinned BLOCK_V (autotuning off).
    tile_width = cfg.block_v if (tile_lse and cfg is not None) else 0
    num_tiles = triton.cdiv(vocab, tile_width) if tile_width else 0
    part = e.new_empty((3 if smoothing else 2, splits, n_rows), dtype=torch.float32)
    smooth_part = part[2] if smoothing else None
    avg = torch.zeros(vocab, device=e.device, dtype=torch.float32) if logit_avg else None
    tmax = None
    if tile_width:
        tmax = torch.empty((n_rows, num_tiles), device=e.device, dtype=torch.bfloat16)

    def grid(meta: dict) -> tuple[int, int]:
        return (triton.cdiv(n_rows, meta["BLOCK_N"]), splits)

    args = (e, c, cbar, part[0], part[1], smooth_part, avg, tmax, weight)
    args += (softcap, 1.0 / n_rows, *sizes, split_size, num_tiles, *e.stride(), *c.stride())
    if tma:
        hopper.launch_forward(e, c, cbar, part, weight, softcap, split_size, cfg)
    elif cfg is None:
        flags = (smoothing, softcap is not None, avg is not None, tmax is not None)
        flags += (weight is not None,)
        _tuned(flags, avg is not None, tmax is not None)[grid](*args)
    else:
        _forward[grid](*args, **cfg.launch("forward"))

    row_max, log_sum, rel_sum = _combine(part, softcap, vocab, split_size, weight)
    # The target logit from a gathered dot (targets.py), not the vocab loop: selecting it
    # per tile held ~50 more registers live there (spills at 256×128 on Triton 3.9).
    target_logit = target_logits(e, c, targets, softcap)
    return ForwardResult(row_max, log_sum, target_logit, rel_sum, avg, tmax, tile_width)


def chunk_sums(weight: torch.Tensor, size: int, chunks: int) -> torch.Tensor:
    """fp32 Σ w over each of ``chunks`` runs of ``size`` columns (zeros past the end)."""
    padded = torch.zeros(chunks * size, device=weight.device, dtype=torch.float32)
    padded[: weight.shape[0]] = weight
    return padded.view(chunks, size).sum(1)


def _combine(
    part: torch.Tensor,
    softcap: float | None,
    vocab: int,
    split_size: int,
    weight: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-split (max, sum-exp[, smoothing sums]) to the row max, log-sum and Σ w(z − max)."""
    max_part, sum_part = part[0], part[1]
    row_max = max_part.amax(0)
    safe = torch.where(torch.isfinite(row_max), row_max, 0.0)
    if max_part.shape[0] == 1:
        log_sum = sum_part[0].log()
    else:
        log_sum = (sum_part * (max_part - safe).exp()).sum(0).log()
    rel_sum = None
    if part.shape[0] == 3:
        smooth_part = part[2]
        splits = max_part.shape[0]
        # Σ_v w_v: V as a Python scalar (a kernel argument, no host-to-device copy), or
        # the class weights' device-side sum.
        total = float(vocab) if weight is None else weight.sum()
        if softcap is None:
            # E_n·c̄ is the absolute Σ_v w_v z, computed once (split 0).
            rel_sum = smooth_part[0] - total * safe
        else:
            if weight is None:
                first = torch.arange(splits, device=max_part.device) * split_size
                count = (vocab - first).clamp(0, split_size).to(torch.float32)
            else:  # each split's weight
                count = chunk_sums(weight, split_size, splits)
            moved = torch.where(max_part > float("-inf"), max_part - safe, 0.0)
            rel_sum = (smooth_part + count[:, None] * moved).sum(0)
    return row_max, log_sum, rel_sum
