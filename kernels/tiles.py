"""Which backward tiles to launch: a per-row mass budget over the forward's tile sums.
Skipping (row block, vocab tile f) drops the softmax mass ``exp(tile_lse[n, f] − lse)``
(with softcap plus at most ``BLOCK_V·β/V``); each row keeps the largest threshold
``filter_eps·4^-k`` whose dropped mass fits ``mass_budget`` (docs/filtering.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .common import wide_offsets
from .configs import GROUP_N, interpreting

# Candidate thresholds filter_eps·4^-k, k < LEVELS (down to ~1e-9 of filter_eps).
LEVELS = 16  # a power of two (tl.arange)
BLOCK_T = 32
# bf16 keeps tile_lse to 2**-8 relative; the bound adds that much (|x|/256) in the log.
_ROUND: tl.constexpr = tl.constexpr(1.0 / 256)


@dataclass(frozen=True)
class TileList:
    """Pairs in launch order (``pid_n · num_v + pid_v``), their count (on the device)."""

    entries: torch.Tensor
    count: torch.Tensor
    total: int

    def launched_fraction(self) -> float:
        """Fraction of all pairs the backward launches over (syncs: reports only)."""
        return int(self.count.item()) / max(1, self.total)


@triton.jit
def _tile_mass(TileLSE, offs_n, n_mask, f, num_f, lse, extra):
    """Upper bound of each (row, forward tile)'s dropped mass; 0 past the vocab."""
    x = tl.load(
        TileLSE + wide_offsets(offs_n, num_f)[:, None] + f[None, :],
        mask=n_mask[:, None] & (f < num_f)[None, :],
        other=-1e30,
    ).to(tl.float32)
    mass = tl.exp(x + tl.abs(x) * _ROUND - lse[:, None]) + extra
    return tl.where((f < num_f)[None, :] & (x > -1e29), mass, 0.0)


@triton.jit
def _threshold_kernel(
    TileLSE,
    RowMax,
    LogSum,
    Tau,
    N,
    num_f,
    filter_eps,
    budget,
    extra,
    LEVELS: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    """``Tau[n]``: the largest filter_eps·4^-k whose dropped mass fits the budget, else 0."""
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    lse = tl.load(RowMax + offs_n, mask=n_mask, other=0.0) + tl.load(
        LogSum + offs_n, mask=n_mask, other=0.0
    )
    k = tl.arange(0, LEVELS)
    levels = filter_eps * tl.exp2(-2.0 * k.to(tl.float32))
    dropped = tl.zeros((BLOCK_N, LEVELS), dtype=tl.float32)
    for t0 in range(0, num_f, BLOCK_T):
        f = t0 + tl.arange(0, BLOCK_T)
        mass = _tile_mass(TileLSE, offs_n, n_mask, f, num_f, lse, extra)
        for j in tl.static_range(LEVELS):
            below = tl.sum(tl.where(mass < filter_eps * 0.25**j, mass, 0.0), axis=1)
            dropped += tl.where(k[None, :] == j, below[:, None], 0.0)
    fits = dropped <= budget
    tau = tl.max(tl.where(fits, levels[None, :], 0.0), axis=1)
    tl.store(Tau + offs_n, tau, mask=n_mask)


@triton.jit
def _keep_kernel(
    TileLSE,
    RowMax,
    LogSum,
    G,
    Tau,
    Keep,
    N,
    num_f,
    num_v,
    extra,
    BLOCK_N: tl.constexpr,
    BLOCK_V: tl.constexpr,
    TILE_W: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    """``Keep[pid_n, t]`` for BLOCK_T backward tiles of one row block."""
    pid_n = tl.program_id(0)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_t = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    n_mask = offs_n < N
    g = tl.load(G + offs_n, mask=n_mask, other=0.0)
    live = n_mask & (g != 0)
    lse = tl.load(RowMax + offs_n, mask=n_mask, other=0.0) + tl.load(
        LogSum + offs_n, mask=n_mask, other=0.0
    )
    tau = tl.load(Tau + offs_n, mask=n_mask, other=0.0)
    # A backward tile spans SPAN forward tiles (its mass is their sum) or sits inside
    # one (it is launched with the whole forward tile).
    SPAN: tl.constexpr = BLOCK_V // TILE_W if BLOCK_V > TILE_W else 1
    mass = tl.zeros((BLOCK_N, BLOCK_T), dtype=tl.float32)
    for j in range(SPAN):
        f = (offs_t * BLOCK_V) // TILE_W + j
        mass += _tile_mass(TileLSE, offs_n, n_mask, f, num_f, lse, extra)
    near = ((mass >= tau[:, None]) & live[:, None]).to(tl.int32)
    keep = tl.max(near, axis=0)
    tl.store(Keep + pid_n * num_v + offs_t, keep.to(tl.int8), mask=offs_t < num_v)


def mass_budget(dtype: torch.dtype) -> float:
    """Dropped softmax mass allowed per row: half of δ = finfo(dtype).eps / 4."""
    return torch.finfo(dtype).eps / 8


def row_thresholds(
    tile_lse: torch.Tensor,
    row_max: torch.Tensor,
    log_sum: torch.Tensor,
    *,
    filter_eps: float,
    extra: float,
    dtype: torch.dtype,
) -> torch.Tensor:
    """Per-row tile-mass thresholds τ (N,) fp32 (module doc); ``extra``: per-tile add-on."""
    n_rows = tile_lse.shape[0]
    out = torch.empty(n_rows, device=tile_lse.device, dtype=torch.float32)
    block_n = 16 if interpreting() else 32
    _threshold_kernel[(triton.cdiv(n_rows, block_n),)](
        tile_lse,
        row_max,
        log_sum,
        out,
        *tile_lse.shape,
        filter_eps,
        mass_budget(dtype),
        extra,
        LEVELS=LEVELS,
        BLOCK_N=block_n,
        BLOCK_T=BLOCK_T,
        num_warps=4,
    )
    return out


@functools.lru_cache(maxsize=8)
def _grouped_entries(num_n: int, num_v: int, device: torch.device) -> torch.Tensor:
    """``pid_n · num_v + pid_v`` in the backward's grouped launch order (L2 reuse of C)."""
    pid = torch.arange(num_n * num_v, device=device, dtype=torch.int64)
    per_group = GROUP_N * num_v
    first_n = (pid // per_group) * GROUP_N
    group_size = (num_n - first_n).clamp(max=GROUP_N)
    pid_n = first_n + (pid % per_group) % group_size
    pid_v = (pid % per_group) // group_size
    return (pid_n * num_v + pid_v).to(torch.int32)


def build_tile_list(
    tile_lse: torch.Tensor,
    tile_width: int,
    row_max: torch.Tensor,
    log_sum: torch.Tensor,
    g: torch.Tensor,
    tau: torch.Tensor,
    *,
    vocab: int,
    block_n: int,
    block_v: int,
    extra: float,
) -> TileList:
    """The (row block, vocab tile) pairs the backward must visit, in launch order."""
    n_rows = tile_lse.shape[0]
    num_n, num_v = triton.cdiv(n_rows, block_n), triton.cdiv(vocab, block_v)
    keep = torch.empty((num_n, num_v), device=g.device, dtype=torch.int8)
    _keep_kernel[(num_n, triton.cdiv(num_v, BLOCK_T))](
        tile_lse,
        row_max,
        log_sum,
        g,
        tau,
        keep,
        *tile_lse.shape,
        num_v,
        extra,
        BLOCK_N=block_n,
        BLOCK_V=block_v,
        TILE_W=tile_width,
        BLOCK_T=BLOCK_T,
        num_warps=4,
    )
    order = _grouped_entries(num_n, num_v, g.device)
    kept = keep.view(-1)[order.long()].bool()
    total = order.numel()
    slot = torch.where(kept, kept.cumsum(0) - 1, total)
    entries = torch.empty(total + 1, device=g.device, dtype=torch.int32)
    entries.scatter_(0, slot, order)
    count = kept.sum(dtype=torch.int32).reshape(1)
    return TileList(entries, count, total)
