"""The gradient filters (docs/filtering.md) emulated in torch on fp32 logits: the (row block,
vocab tile) pairs a filter computes, not how fast (no GPU needed); β = 0 (smoothing's is exact)."""

from __future__ import annotations

import math

import torch

from perfsuite.filtering.rules import FILTERS as FILTERS  # the rules (rules.py: no torch)
from perfsuite.filtering.rules import ORDERS, Filter
from perfsuite.kernels.tiles import LEVELS, mass_budget

FORWARD_TILE = 128


def vocab_order(kind: str, logits: torch.Tensor, live: torch.Tensor, seed: int = 0):
    """Column permutation (V,) for ``kind``; None for natural order."""
    if kind == "natural":
        return None
    if kind == "sorted":
        return torch.argsort(logits[live].mean(0), descending=True)
    if kind == "random":
        gen = torch.Generator().manual_seed(seed)
        return torch.randperm(logits.shape[1], generator=gen).to(logits.device)
    raise ValueError(f"unknown vocabulary order {kind!r}; known: {', '.join(ORDERS)}")


def _blocks(x: torch.Tensor, tn: int, tv: int, fill: float) -> torch.Tensor:
    """(N, V) -> (N/tn, tn, V/tv, tv), padded with ``fill``."""
    n, v = x.shape
    pn, pv = -n % tn, -v % tv
    if pn or pv:
        x = torch.nn.functional.pad(x, (0, pv, 0, pn), value=fill)
    return x.view(x.shape[0] // tn, tn, x.shape[1] // tv, tv)


def tiles_any(hit: torch.Tensor, tn: int, tv: int) -> torch.Tensor:
    """(row blocks, vocab tiles) bool: some entry of the tile is set."""
    return _blocks(hit.to(torch.uint8), tn, tv, 0).amax(dim=(1, 3)).bool()


def expand(keep: torch.Tensor, n: int, v: int, tn: int, tv: int) -> torch.Tensor:
    """Tile decisions back to an (N, V) entry mask (in the same column order)."""
    return keep.repeat_interleave(tn, 0).repeat_interleave(tv, 1)[:n, :v]


def element_tiles(terms: torch.Tensor, live: torch.Tensor, eps: float, flt: Filter) -> torch.Tensor:
    """Tiles holding some |term| ≥ eps in a live row (terms: p, or p − onehot for CCE)."""
    return tiles_any((terms.abs() >= eps) & live[:, None], flt.tile_n, flt.tile_v)


def forward_tile_lse(logits: torch.Tensor, width: int = FORWARD_TILE) -> torch.Tensor:
    """(N, ⌈V/width⌉) bf16 log-sum-exp of each forward tile, as the forward stores it."""
    blocks = _blocks(logits, 1, width, -math.inf).squeeze(1)
    return torch.logsumexp(blocks, dim=-1).bfloat16()


def tile_mass(tile_lse: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """Tile masses bounded up as the kernel does (``x + |x|/256``: bf16's rounding)."""
    x = tile_lse.float()
    mass = torch.exp(x + x.abs() / 256 - lse[:, None])
    return torch.where(torch.isfinite(x), mass, torch.zeros_like(mass))


def row_thresholds(mass: torch.Tensor, filter_eps: float, dtype: torch.dtype) -> torch.Tensor:
    """τ per row: the largest filter_eps·4^-k whose dropped mass fits the budget, else 0."""
    budget = mass_budget(dtype)
    k = torch.arange(LEVELS, dtype=torch.float32, device=mass.device)
    levels = filter_eps * torch.exp2(-2.0 * k)
    dropped = torch.stack([(mass * (mass < lv)).sum(1) for lv in levels.tolist()], 1)
    fits = dropped <= budget
    return torch.where(fits, levels[None, :], torch.zeros(())).amax(1)


def tile_list_tiles(
    logits: torch.Tensor,
    lse: torch.Tensor,
    live: torch.Tensor,
    filter_eps: float,
    dtype: torch.dtype,
    flt: Filter,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(keep, tau)``: the mass budget's launched pairs and each row's threshold."""
    mass = tile_mass(forward_tile_lse(logits), lse)
    tau = row_thresholds(mass, filter_eps, dtype)
    span = max(1, flt.tile_v // FORWARD_TILE)
    back = _blocks(mass, 1, span, 0.0).squeeze(1).sum(-1)  # (N, backward tiles)
    near = (back >= tau[:, None]) & live[:, None]
    return tiles_any(near, flt.tile_n, 1), tau


def softmax_part(
    probs: torch.Tensor,
    targets: torch.Tensor,
    live: torch.Tensor,
    scale: torch.Tensor | None,
    mask: torch.Tensor | None,
    target_in_tile: bool,
) -> torch.Tensor:
    """dLoss/dlogits (mean reduction, β = 0) with the masked entries dropped; ``scale``:
    softcap's ``1 − tanh²``. A target outside the tiles (ours) stays exact; inside them
    (CCE) it goes with its tile."""
    g = live.float() / live.sum()
    rows = torch.nonzero(live).squeeze(1)
    d = probs.clone()
    if mask is not None and not target_in_tile:
        d = d * mask
    d[rows, targets[rows]] -= 1.0
    if mask is not None and target_in_tile:
        d = d * mask
    d *= g[:, None]
    if scale is not None:
        d *= scale
    return d
